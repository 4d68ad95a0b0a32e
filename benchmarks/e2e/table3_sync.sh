#!/bin/bash
# Copy what a Table 3 run's OUT holds into a results folder DEST (run from the repository root): the plan, and per
# row its result.json and worker.log (with LOGS=1 also its training log, for rows that never finished: a pilot);
# then, unless REPORT=0, rebuild the report there (table3.md, summary.json) and copy its plot to docs/img/table3_cpu.png.
# Rows still training are left out of the report; the same `aiayn variations` command resumes them from OUT.
#   bash benchmarks/e2e/table3_sync.sh runs/table3-cpu-prenorm benchmarks/results/table3-xeon
#   LOGS=1 REPORT=0 bash benchmarks/e2e/table3_sync.sh runs/t3-lr025 benchmarks/results/table3-pilot-xeon/B-postnorm-lr0.25
set -euo pipefail
OUT=$1; DEST=$2
mkdir -p "$DEST"
cp "$OUT/plan.json" "$DEST/plan.json"
for row in "$OUT"/*/; do
    name=$(basename "$row")
    if [ "${LOGS:-0}" = 1 ]; then log="$row/run/log.jsonl"; else log=/nonexistent; fi
    if [ ! -f "$row/result.json" ] && [ ! -f "$log" ]; then continue; fi
    mkdir -p "$DEST/$name"
    for f in result.json worker.log; do
        if [ -f "$row/$f" ]; then cp "$row/$f" "$DEST/$name/"; fi
    done
    if [ -f "$log" ]; then cp "$log" "$DEST/$name/"; fi
done
if [ "${REPORT:-1}" = 1 ]; then
    aiayn variations --out "$DEST" --report > /dev/null
    mv "$DEST/table3.png" docs/img/table3_cpu.png  # the plot the docs show
    rm -f "$DEST/table3_curves.png"
fi
echo "synced $(ls -d "$DEST"/*/ 2>/dev/null | wc -l) rows into $DEST"
