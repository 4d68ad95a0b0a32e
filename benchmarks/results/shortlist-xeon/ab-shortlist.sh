#!/bin/bash
# In process, one thread, core 0, the run's shortlist: Multi30k teacher-3-2 student, test2016, each cell in worktrees
# /tmp/sl/C of the commits given (default 467edfb 2e8e705 0c967b3) in turn; this tree's harness run by path.
H=/work/main/benchmarks/e2e/realtext.py; commits=${@:-467edfb 2e8e705 0c967b3}; first=${commits%% *}
for r in 1 2 3; do for cell in "int8 1" "int8 4" "fp32 4"; do set -- $cell; for c in $commits; do
  [ $1 = fp32 ] && [ $c != $first ] && [ $c != 2e8e705 ] && continue  # fp32: the same code since 2e8e705
  cd /tmp/sl/$c; o=/tmp/sl/$c-$1-$2.out
  res=$(PYTHONPATH=/tmp/sl/$c OMP_NUM_THREADS=1 taskset -c 0 /work/main/.venv/bin/python $H inprocess --shortlist \
    --run /work/runs-m30k/student32 --src /work/runs-m30k/data/test.src.txt --output $o --precision $1 --beam $2 \
    --beam-patience 1 2>/dev/null | tail -n 1)
  echo "round $r $1 beam $2 $c $res $(cmp -s $o /tmp/sl/$first-$1-$2.out && echo same-lines || echo lines-differ)"
done; done; done
