#!/bin/bash
# Copy what the CPU study's OUT holds into this folder (run from the repository root), then rebuild the report here:
# the plan, and per finished row its result.json, dev.hyp, training log (run/log.jsonl) and worker.log; the plot then
# goes to docs/img/table3_cpu.png. Rows still
# training are left out (their checkpoints stay in OUT, from where the same `aiayn variations` command resumes them).
#   bash benchmarks/results/table3-cpu/sync.sh [OUT]     (OUT default: runs/table3-cpu-prenorm)
set -euo pipefail
OUT=${1:-runs/table3-cpu-prenorm}
HERE=benchmarks/results/table3-cpu
cp "$OUT/plan.json" "$HERE/plan.json"
for row in "$OUT"/*/; do
    name=$(basename "$row")
    [ -f "$row/result.json" ] || continue
    mkdir -p "$HERE/$name/run"
    cp "$row/result.json" "$row/dev.hyp" "$HERE/$name/"
    cp "$row/run/log.jsonl" "$HERE/$name/run/"
    [ -f "$row/worker.log" ] && cp "$row/worker.log" "$HERE/$name/"
done
aiayn variations --out "$HERE" --report > /dev/null
cp "$HERE/table3.png" docs/img/table3_cpu.png  # the plot the docs show
echo "synced $(ls -d "$HERE"/*/ 2>/dev/null | wc -l) finished rows into $HERE"
