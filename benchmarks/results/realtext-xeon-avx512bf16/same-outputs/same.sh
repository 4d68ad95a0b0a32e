#!/bin/bash
# Same outputs: TREE OUT — aiayn translate of the 879 John verses from the tree at TREE, one thread, core $CORE
TREE=$1; OUT=$2; mkdir -p $OUT
export PYTHONPATH=$TREE OMP_NUM_THREADS=1
SRC=/work/runs-distill/qs/data/test.src.txt; RUN=/work/runs-distill/qs/run
t() { name=$1; shift; (cd $TREE && taskset -c ${CORE:-1} /work/main/.venv/bin/python -m aiayn translate --checkpoint $RUN --input $SRC --output $OUT/$name.txt --no-progress "$@" 2>/dev/null) ; }
t fp32-greedy --beam 1
t fp32-beam4 --beam 4
t fp32-beam4-patience1-nbest2-scores --beam 4 --beam-patience 1 --nbest 2 --print-scores tokens
t int8-beam4 --beam 4 --precision int8
t bf16-beam4 --beam 4 --precision bf16
