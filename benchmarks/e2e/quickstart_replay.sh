#!/bin/bash
# The quickstart's bf16 recipe replayed for the steps another CPU trained in its 12 minutes: same model, data,
# schedule (annealed over the last 30 % of the steps) and bf16 arithmetic, on whatever CPU runs this; peak memory
# from /usr/bin/time, resident memory sampled every 10 s. Run from the repository root:
#   STEPS=1664 bash benchmarks/e2e/quickstart_replay.sh RESULTS [OUT]
# RESULTS gets machine.txt, quickstart.log and rss.txt; OUT (default runs/qs-bf16-replay) the run.
set -uo pipefail
HERE=$1; OUT=${2:-runs/qs-bf16-replay}; STEPS=${STEPS:-1664}
mkdir -p "$HERE"
lscpu | grep -E 'Model name|^CPU\(s\)' > "$HERE/machine.txt"
grep -o 'avx512[a-z_0-9]*\|amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ' >> "$HERE/machine.txt"
/usr/bin/time -v aiayn quickstart --dtype bf16 --max-steps "$STEPS" --out "$OUT" --no-progress > "$HERE/quickstart.log" 2>&1 &
pid=$!
: > "$HERE/rss.txt"
while kill -0 $pid 2>/dev/null; do
    for p in $(pgrep -f "aiayn quickstart --dtype bf16 --max-steps $STEPS --out $OUT" | grep -v "^$pid$"); do
        echo "$(date -u +%H:%M:%S) $(ps -o rss= -p "$p" 2>/dev/null)" >> "$HERE/rss.txt"
    done
    sleep 10
done
wait $pid; echo "# exit $?" >> "$HERE/quickstart.log"
