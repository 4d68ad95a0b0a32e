#!/usr/bin/env bash
# usage: DT=--weights capture.sh OUTDIR (DT=--dtype for commits before the --weights flag): prepare, train fp32 and
# bf16 from seed 1, translate with every weight format. Run it from the checkout to measure (or with PYTHONPATH=it).
set -euo pipefail
OUT=$1; rm -rf $OUT; mkdir -p $OUT; export OUT
export OMP_NUM_THREADS=2
R=$OUT/raw
python -c "from aiayn.data import builtin_corpus; builtin_corpus('$R')"
head -3000 $R/train.en > $OUT/train.en; head -3000 $R/train.es > $OUT/train.es
head -200 $R/test.en > $OUT/test200.en
aiayn prepare --src $OUT/train.en --tgt $OUT/train.es --valid-src $R/valid.en --valid-tgt $R/valid.es \
   --vocab-size 2000 --out $OUT/data > $OUT/prepare.log 2>&1
(cd $OUT/data && sha256sum $(find . -type f | sort)) > $OUT/data.sha
aiayn train --data $OUT/data --preset tiny --out $OUT/run32 --max-steps 120 --log-every 1 --max-tokens 1500 \
   --save-every-steps 60 --dtype fp32 --threads 2 --no-progress > $OUT/train32.log 2>&1
aiayn train --data $OUT/data --preset tiny --out $OUT/run16 --max-steps 60 --log-every 1 --max-tokens 1500 \
   --save-every-steps 30 --dtype bf16 --threads 2 --no-progress > $OUT/train16.log 2>&1
python -c "
import json,sys
for r in ['run32','run16']:
    L=[json.loads(l) for l in open('$OUT/'+r+'/log.jsonl')]
    with open('$OUT/'+r+'.curve','w') as f:
        for l in L: f.write(f\"{l['kind']} {l['step']} {l['loss']!r} {l.get('nll')!r}\n\")
"
for d in fp32 bf16 int8; do
  aiayn translate --checkpoint $OUT/run32 --input $OUT/test200.en --output $OUT/hyp.$d $DT $d --no-progress 2>>$OUT/translate.log
done
aiayn translate --checkpoint $OUT/run32 --input $OUT/test200.en --output $OUT/hyp.greedy --beam 1 --no-progress 2>>$OUT/translate.log
aiayn translate --checkpoint $OUT/run16 --input $OUT/test200.en --output $OUT/hyp16.bf16 $DT bf16 --no-progress 2>>$OUT/translate.log
wc -l $OUT/hyp.*
