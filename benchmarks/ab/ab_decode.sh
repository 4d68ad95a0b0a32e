#!/usr/bin/env bash
# Decoding speed of two commits of aiayn, interleaved: the shared harness's bench_infer.py (base, 64 sentences, 30
# output tokens) with the aiayn adapter of each commit, alternating A, B, A, B ... so that a machine's drift hits
# both alike. Each commit is checked out in a temporary worktree and imported from there (PYTHONPATH).
#
#   bash benchmarks/ab/ab_decode.sh 567f881 HEAD                 # cases "1:fp32 4:fp32", 2 rounds
#   CASES="1:fp32 4:fp32 1:int8 4:int8 1:bf16 4:bf16" ROUNDS=3 bash benchmarks/ab/ab_decode.sh A B
#
# int8 runs the commit's int8 adapter (fp32 model, int8 decoding weights) under the harness's --dtype fp32. Commits
# from before benchmarks/peers/ keep their adapters in benchmarks/ (aiayn_adapter.py, aiayn_int8_adapter.py): both
# layouts are found. Prints the harness's "==>" lines, labelled with the commit, and appends the JSON records to
# $OUT (default /tmp/ab_decode.jsonl).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
HARNESS=${HARNESS:-$(cd "$REPO/../shared/bench/peers" && pwd)}
PY=${PYTHON:-$(command -v python3)}
CASES=${CASES:-"1:fp32 4:fp32"}
ROUNDS=${ROUNDS:-2}
OUT=${OUT:-/tmp/ab_decode.jsonl}
declare -A DIR
for c in "$1" "$2"; do
  DIR[$c]=$(mktemp -d)/aiayn
  git -C "$REPO" worktree add --detach "${DIR[$c]}" "$c" >/dev/null
done
trap 'for c in "${!DIR[@]}"; do git -C "$REPO" worktree remove --force "${DIR[$c]}"; done' EXIT
adapter() {  # worktree, fp32|int8 -> the adapter file of that commit
  local new=$1/benchmarks/peers/aiayn_adapter.py old=$1/benchmarks/aiayn_adapter.py
  if [ "$2" = int8 ]; then new=$1/benchmarks/peers/aiayn_int8.py; old=$1/benchmarks/aiayn_int8_adapter.py; fi
  if [ -f "$new" ]; then echo "$new"; else echo "$old"; fi
}
for _ in $(seq "$ROUNDS"); do
  for case in $CASES; do
    beam=${case%%:*}; dt=${case##*:}
    for c in "$1" "$2"; do
      d=${DIR[$c]}; dtype=$dt; ad=$(adapter "$d" fp32)
      if [ "$dt" = int8 ]; then ad=$(adapter "$d" int8); dtype=fp32; fi
      (cd "$HARNESS" && PYTHONPATH=$d "$PY" bench_infer.py --impl "$ad" --label "$c-$dt" --beam "$beam" \
        --dtype "$dtype" --threads "${THREADS:-2}" --reps "${REPS:-5}" --out "$OUT" 2>&1 | grep "==>")
    done
  done
done
