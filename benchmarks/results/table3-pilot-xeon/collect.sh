#!/bin/bash
# Copy the pilot's plans, logs and results from its run folders into this folder (run from the repository root).
# Protocol C (pre-norm) is the study itself: its rows are in ../table3-cpu (sync.sh there).
set -e
HERE=benchmarks/results/2026-11-26-table3-pilot
for pair in "A-postnorm-lr0.5:runs/table3-cpu" "B-postnorm-lr0.25:runs/t3-lr025"; do
    name=${pair%%:*}; out=${pair#*:}
    mkdir -p $HERE/$name
    cp $out/plan.json $HERE/$name/
    for row in $out/*/; do
        r=$(basename $row)
        [ -f $row/run/log.jsonl ] || continue
        mkdir -p $HERE/$name/$r
        cp $row/run/log.jsonl $HERE/$name/$r/
        for f in result.json dev.hyp worker.log; do [ -f $row/$f ] && cp $row/$f $HERE/$name/$r/; done
    done
done
