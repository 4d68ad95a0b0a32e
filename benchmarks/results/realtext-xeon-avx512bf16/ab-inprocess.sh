#!/bin/bash
# Interleaved A/B of aiayn's in-process decoding, before (655a5d8's tree) and after (this tree), one thread, core 0:
# the 879 John verses, beam 4, patience 1, batch 64; translate_cpu_s is time.process_time around translate_nbest.
for r in 1 2; do for p in fp32 int8 bf16; do for tree in /tmp/eng/before /work/main; do
  cd $tree; res=$(PYTHONPATH=$tree OMP_NUM_THREADS=1 taskset -c 0 /work/main/.venv/bin/python -m benchmarks.e2e.realtext inprocess --run /work/runs-distill/qs/run --src /work/runs-distill/qs/data/test.src.txt --output /tmp/eng/ab-$p.out --precision $p --beam-patience 1 2>/dev/null | tail -n 1)
  echo "round $r $p $([ $tree = /work/main ] && echo after || echo before) $res"
done; done; done
