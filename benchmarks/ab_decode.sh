#!/usr/bin/env bash
# Decoding speed of two commits of aiayn, interleaved: the shared harness's bench_infer.py (base, 64 sentences, 30
# output tokens) with benchmarks/aiayn_adapter.py of each commit, alternating A, B, A, B ... so that a machine's
# drift hits both alike. Each commit is checked out in a temporary worktree and imported from there.
#
#   bash benchmarks/ab_decode.sh 567f881 HEAD                 # cases "1:fp32 4:fp32", 2 rounds
#   CASES="1:fp32 4:fp32 1:int8 4:int8 1:bf16 4:bf16" ROUNDS=3 bash benchmarks/ab_decode.sh A B
#
# int8 runs aiayn_int8_adapter.py (fp32 model, `--dtype int8` decoding). Prints the harness's "==>" lines, labelled
# with the commit, and appends the JSON records to $OUT (default /tmp/ab_decode.jsonl).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
HARNESS=${HARNESS:-$(cd "$HERE/../../shared/bench/peers" && pwd)}
PY=${PYTHON:-$(command -v python3)}
CASES=${CASES:-"1:fp32 4:fp32"}
ROUNDS=${ROUNDS:-2}
OUT=${OUT:-/tmp/ab_decode.jsonl}
declare -A DIR
for c in "$1" "$2"; do
  DIR[$c]=$(mktemp -d)/aiayn
  git -C "$HERE/.." worktree add --detach "${DIR[$c]}" "$c" >/dev/null
done
trap 'for c in "${!DIR[@]}"; do git -C "$HERE/.." worktree remove --force "${DIR[$c]}"; done' EXIT
for _ in $(seq "$ROUNDS"); do
  for case in $CASES; do
    beam=${case%%:*}; dt=${case##*:}
    for c in "$1" "$2"; do
      d=${DIR[$c]}; ad=$d/benchmarks/aiayn_adapter.py; dtype=$dt
      if [ "$dt" = int8 ]; then ad=$d/benchmarks/aiayn_int8_adapter.py; dtype=fp32; fi
      (cd "$HARNESS" && PYTHONPATH=$d "$PY" bench_infer.py --impl "$ad" --label "$c-$dt" --beam "$beam" \
        --dtype "$dtype" --threads "${THREADS:-2}" --reps "${REPS:-5}" --out "$OUT" 2>&1 | grep "==>")
    done
  done
done
