#!/usr/bin/env bash
# The shared harness (../shared/bench/peers) at a fixed thread count for every engine, optionally under the AVX2
# reproduction: what docs/speed-peers.md's per-CPU-kind tables come from. run_all.sh passes no --threads, so torch takes
# its default and CTranslate2 all the machine's cores (intra_threads = os.cpu_count()) even under taskset; here
# each measurement gets --threads $THREADS, and OMP/MKL are told the same.
#
#   THREADS=1 AVX2=1 taskset -c 0 bash benchmarks/peers/at_threads.sh      # the AVX2 case, one thread, on core 0
#   THREADS=2 bash benchmarks/peers/at_threads.sh                          # natively, two threads
#
# AVX2=1 sets the five variables that make every engine use AVX2 kernels only on an AVX-512 machine (fbgemm, behind
# torch's int8 path, and CTranslate2 ignore the first three): MKL_ENABLE_INSTRUCTIONS, ATEN_CPU_CAPABILITY,
# ONEDNN_MAX_CPU_ISA, FBGEMM_ENABLE_INSTRUCTIONS, CT2_FORCE_CPU_ISA. The log's first lines show what took effect
# (torch's kernel level, the fp32 and bf16 matmul rates: bf16 collapses to ~2 GFLOP/s under the reproduction).
#
# Knobs (env): THREADS (1), AVX2 (0), TRAIN_CASES ("small:fp32 base:fp32"), INFER_CASES ("4:fp32 1:fp32"),
#   TRAIN_IMPLS ("aiayn torch_nn hf_marian fairseq_wmt onmt_tf"), INFER_IMPLS ("aiayn aiayn-int8 hf_marian"),
#   CT2_TYPES ("int8 float32"), ROUNDS (1), RESULTS (a new folder under $PEERS), PEERS (~/.cache/aiayn-peers).
# Then: tables.md (the harness's summarize.py) and ratios.md (benchmarks/peers/ratios.py) in $RESULTS.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
HARNESS=${HARNESS:-$(cd "$REPO/../shared/bench/peers" && pwd)}
ROOT=${PEERS:-$HOME/.cache/aiayn-peers}
THREADS=${THREADS:-1}
RESULTS=${RESULTS:-$ROOT/results-t$THREADS-$(date +%Y%m%d-%H%M%S)}
TRAIN_CASES=${TRAIN_CASES:-"small:fp32 base:fp32"}
INFER_CASES=${INFER_CASES:-"4:fp32 1:fp32"}
TRAIN_IMPLS=${TRAIN_IMPLS:-"aiayn torch_nn hf_marian fairseq_wmt onmt_tf"}
INFER_IMPLS=${INFER_IMPLS:-"aiayn aiayn-int8 hf_marian"}
CT2_TYPES=${CT2_TYPES:-"int8 float32"}
ROUNDS=${ROUNDS:-1}
TIMEOUT=${TIMEOUT:-400}
PY=${PYTHON:-$(command -v python3)}   # a python with aiayn installed
export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH} OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
if [ "${AVX2:-0}" = 1 ]; then
  export MKL_ENABLE_INSTRUCTIONS=AVX2 ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 \
         FBGEMM_ENABLE_INSTRUCTIONS=AVX2 CT2_FORCE_CPU_ISA=AVX2
fi
"$PY" -c "import aiayn" || { echo "aiayn is not importable by $PY: pip install -e . first" >&2; exit 1; }
[ -x "$ROOT/venv/bin/python" ] || ROOT=$ROOT bash "$HARNESS/setup_peers.sh"
mkdir -p "$RESULTS/logs"
LOG=$RESULTS/logs/run.log

adapter() {  # label -> "adapter-path python"
  case "$1" in
    aiayn) echo "$HERE/aiayn_adapter.py $PY" ;;
    aiayn-int8) echo "$HERE/aiayn_int8.py $PY" ;;
    fairseq_wmt) echo "fairseq_wmt $ROOT/venv-fairseq/bin/python" ;;
    onmt_tf) echo "onmt_tf $ROOT/venv-onmt/bin/python" ;;
    *) echo "$1 $ROOT/venv/bin/python" ;;
  esac
}

run() {  # log-name, command...
  local log="$RESULTS/logs/$1.log"; shift
  echo "[$(date +%H:%M:%S)] $*" | tee -a "$LOG"
  (cd "$HARNESS" && timeout "$TIMEOUT" "$@") >>"$log" 2>&1
  local rc=$?
  grep "^==>" "$log" | tail -1 | tee -a "$LOG"
  [ $rc -eq 0 ] || { echo "   FAILED rc=$rc, see $log" | tee -a "$LOG"; tail -3 "$log"; }
}

{
  echo "# $(date -u '+%Y-%m-%d %H:%M UTC') THREADS=$THREADS AVX2=${AVX2:-0}; $(grep -m1 'model name' /proc/cpuinfo)"
  echo "# affinity: $(taskset -p $$ 2>/dev/null | sed 's/.*: //'); load: $(cut -d' ' -f1-3 /proc/loadavg)"
  env | grep -E '^(MKL_ENABLE_INSTRUCTIONS|ATEN_CPU_CAPABILITY|ONEDNN_MAX_CPU_ISA|FBGEMM_ENABLE_INSTRUCTIONS|CT2_FORCE_CPU_ISA|OMP_NUM_THREADS)=' | sed 's/^/# /'
  "$PY" -c "import torch; print('# torch', torch.__version__, 'kernels', torch.backends.cpu.get_cpu_capability())"
} | tee "$LOG"
# fp32's peak (the MFU denominator); bf16 at one size only: under the reproduction it runs at ~1 GFLOP/s (the check
# that the caps took effect), and the harness's four sizes would take many minutes
run peak "$ROOT/venv/bin/python" peak_matmul.py --threads "$THREADS" --dtypes fp32 --out "$RESULTS/peak.jsonl"
run peak-bf16 "$ROOT/venv/bin/python" peak_matmul.py --threads "$THREADS" --dtypes bf16 --sizes 1024 --reps 3 \
  --max-seconds 20 --out "$RESULTS/peak.jsonl"
grep -h "GFLOP/s" "$RESULTS/logs/peak.log" "$RESULTS/logs/peak-bf16.log" | tee -a "$LOG"

for round in $(seq "$ROUNDS"); do
  for case in $TRAIN_CASES; do
    cfg=${case%%:*}; dt=${case##*:}
    for lab in $TRAIN_IMPLS; do
      read -r ad pyx <<<"$(adapter "$lab")"
      run "train-$lab-$cfg-$dt" "$pyx" bench_train.py --impl "$ad" --label "$lab" --config "$cfg" --dtype "$dt" \
        --threads "$THREADS" --peak "$RESULTS/peak.jsonl" --out "$RESULTS/train.jsonl"
    done
  done
  for case in $INFER_CASES; do
    beam=${case%%:*}; dt=${case##*:}
    for lab in $INFER_IMPLS; do
      read -r ad pyx <<<"$(adapter "$lab")"
      run "infer-$lab-b$beam-$dt" "$pyx" bench_infer.py --impl "$ad" --label "$lab" --config base --beam "$beam" \
        --dtype "$dt" --threads "$THREADS" --out "$RESULTS/infer.jsonl"
    done
    for ct in $CT2_TYPES; do
      run "infer-ct2-b$beam-$ct" "$ROOT/venv/bin/python" bench_ct2.py --config base --compute-type "$ct" \
        --beam "$beam" --threads "$THREADS" --model-dir "$ROOT/ct2-marian-base" --out "$RESULTS/infer.jsonl"
    done
  done
done
"$ROOT/venv/bin/python" "$HARNESS/summarize.py" "$RESULTS" > "$RESULTS/tables.md"
(cd "$REPO" && "$PY" -m benchmarks.peers.ratios "$RESULTS") > "$RESULTS/ratios.md"
cat "$RESULTS/ratios.md"
echo "results: $RESULTS"
