#!/bin/bash
# The quickstart's bf16 recipe replayed for the steps a 2-core AMD EPYC with native 2x bf16 trained in its 12 minutes
# (1,664, 2026-11-24): same model, data, schedule (annealed over the last 30 % of the steps) and bf16 arithmetic, on
# whatever CPU runs this; peak memory from /usr/bin/time, resident memory sampled every 10 s.
# Run from the repository root: bash benchmarks/results/2026-11-26-quickstart-bf16-replay/run.sh [OUT]
set -uo pipefail
HERE=benchmarks/results/2026-11-26-quickstart-bf16-replay
OUT=${1:-runs/qs-bf16-replay}
lscpu | grep -E 'Model name|^CPU\(s\)' > "$HERE/machine.txt"
grep -o 'avx512[a-z_0-9]*\|amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ' >> "$HERE/machine.txt"
/usr/bin/time -v aiayn quickstart --dtype bf16 --max-steps 1664 --out "$OUT" --no-progress > "$HERE/quickstart.log" 2>&1 &
pid=$!
: > "$HERE/rss.txt"
while kill -0 $pid 2>/dev/null; do
    for p in $(pgrep -f "aiayn quickstart --dtype bf16 --max-steps 1664 --out $OUT" | grep -v "^$pid$"); do
        echo "$(date -u +%H:%M:%S) $(ps -o rss= -p "$p" 2>/dev/null)" >> "$HERE/rss.txt"
    done
    sleep 10
done
wait $pid; echo "# exit $?" >> "$HERE/quickstart.log"
