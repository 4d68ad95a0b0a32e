#!/bin/bash
# Interleaved A/B, one thread, core 0: before (worktree of 96a4600) and after (of ccbeb83) a finished sentence left
# its place to the last one going on. John beam 4 (fp32, int8); Multi30k teacher-3-2 student greedy (int8).
for r in 1 2 3; do for cell in "fp32 4 qs" "int8 4 qs" "int8 1 m30k"; do set -- $cell; for side in before after; do
  if [ $3 = qs ]; then run=/work/runs-distill/qs/run src=/work/runs-distill/qs/data/test.src.txt
  else run=/work/runs-m30k/student32 src=/work/runs-m30k/data/test.src.txt; fi
  t=/tmp/eng7/$side; o=/tmp/eng7/$side-$1-$2-$3.out; cd $t
  res=$(PYTHONPATH=$t OMP_NUM_THREADS=1 taskset -c 0 /work/main/.venv/bin/python -m benchmarks.e2e.realtext inprocess \
    --run $run --src $src --output $o --precision $1 --beam $2 --beam-patience 1 2>/dev/null | tail -n 1)
  echo "round $r $1 beam $2 $3 $side $res"
done; cmp -s /tmp/eng7/{before,after}-$1-$2-$3.out && s="the same lines" || s="lines differ"; echo "round $r $1 beam $2 $3: $s"
done; done
