#!/usr/bin/env bash
# a longer-trained model (varied translations): usage DT=--weights capture2.sh OUTDIR (after capture.sh made
# OUTDIR/data; DT=--dtype for commits before the --weights flag)
set -euo pipefail
OUT=$1; export OMP_NUM_THREADS=2
rm -rf $OUT/runL
aiayn train --data $OUT/data --preset tiny --out $OUT/runL --max-steps 1500 --log-every 50 --max-tokens 1500 \
   --warmup 200 --lr-factor 2 --save-every-steps 750 --dtype fp32 --threads 2 --no-progress > $OUT/trainL.log 2>&1
for d in fp32 bf16 int8; do
  aiayn translate --checkpoint $OUT/runL --input $OUT/test200.en --output $OUT/hypL.$d $DT $d --no-progress 2>>$OUT/translate.log
done
aiayn translate --checkpoint $OUT/runL --input $OUT/test200.en --output $OUT/hypL.greedy --beam 1 --no-progress 2>>$OUT/translate.log
aiayn translate --checkpoint $OUT/runL --input $OUT/test200.en --output $OUT/hypL.int8greedy --beam 1 $DT int8 --no-progress 2>>$OUT/translate.log
