#!/usr/bin/env bash
# Where a GPU quickstart's time goes: the quickstart by steps (400) under py-spy (a dump, then a 20-second sampled
# profile of the training loop) with dynamo's recompilations logged, then the same with 4x larger batches. Needs
# py-spy (a wheel in .whl/ on a machine without network). Results under $OUT (or ./gpu-out). From the repo root:
#   bash benchmarks/gpu/probe_quickstart.sh
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
    export PYTHONPATH=$PYTHONPATH:/tmp/site PATH=$PATH:/tmp/site/bin
fi
Q=$(mktemp -d)
TORCH_LOGS=recompiles timeout 170 python3 -m aiayn quickstart --out "$Q/a" --max-steps 400 --no-progress \
    > "$OUT/probe-a.log" 2>&1 &
sleep 40
PID=$(pgrep -f "aiayn quickstart --out $Q/a" | head -1)
py-spy dump --pid "$PID" > "$OUT/probe-pyspy-dump.txt" 2>&1
py-spy record --pid "$PID" --duration 20 --rate 200 --format raw --output "$OUT/probe-pyspy-raw.txt" 2>&1 | tail -2
wait
cp "$Q/a/run/log.jsonl" "$OUT/probe-a-log.jsonl"
timeout 120 python3 -m aiayn quickstart --out "$Q/b" --max-steps 200 --max-tokens 8192 --no-progress \
    > "$OUT/probe-b.log" 2>&1
cp "$Q/b/run/log.jsonl" "$OUT/probe-b-log.jsonl"
grep -hE "steps at|done in|Recompil" "$OUT"/probe-[ab].log | head -20
