#!/bin/bash
# Fine-tuning against training from scratch for the same total budget (not run in CI): a parent trained on the
# English-German Bible for PARENT_MIN minutes, then fine-tuned on Multi30k for TOTAL_MIN - PARENT_MIN minutes
# (aiayn train --init-from), against a run trained on Multi30k alone for TOTAL_MIN minutes; both choose their
# checkpoint by dev BLEU (--best-metric bleu, --patience) and are scored on test_2016_flickr with sacreBLEU.
#   S=../shared/data OUT=runs/finetune TOTAL_MIN=95 PARENT_MIN=45 bash benchmarks/e2e/finetune.sh
# PARALLEL=1 trains the baseline at the same time as the parent and the fine-tuning (one core each: 2 cores, half the
# wall time); SAVE_MIN (default 5) minutes between checkpoints, EVAL_LINES (default all 1,014) dev sentences scored,
# PATIENCE (default 5) evaluations without a better dev BLEU before a run stops, WARMUP (default 1000) steps of warm-up
# for the parent and the baseline (the fine-tuning warms up 200).
# One vocabulary for all three runs (a fine-tuned model keeps its parent's token ids): trained on both training sets,
# then every corpus prepared with it (aiayn prepare --vocab). The model is configs/multi30k.yaml's (small, dropout 0.3).
set -euo pipefail
S=${S:-../shared/data}; OUT=${OUT:-runs/finetune}; TOTAL_MIN=${TOTAL_MIN:-95}; PARENT_MIN=${PARENT_MIN:-45}
WARMUP=${WARMUP:-1000}; SAVE_MIN=${SAVE_MIN:-5}; EVAL_LINES=${EVAL_LINES:-1014}; PATIENCE=${PATIENCE:-5}
B=$S/bible-en-de; M=$S/multi30k
export OMP_NUM_THREADS=1
mkdir -p $OUT/raw
TRAIN="--preset small --set dropout=0.3 --set init=fairseq --dtype auto --max-tokens 4096 --threads 1 --no-progress
       --max-steps 1000000 --save-every-minutes $SAVE_MIN --keep-last 10 --log-every 50"
SELECT="--eval-bleu-lines $EVAL_LINES --best-metric bleu --patience $PATIENCE"   # Multi30k's dev set, greedy

cat $B/web-elb1905.en $M/train.en > $OUT/raw/joint.en
cat $B/web-elb1905.de $M/train.de > $OUT/raw/joint.de
aiayn prepare --src $OUT/raw/joint.en --tgt $OUT/raw/joint.de --vocab-size 8000 --out $OUT/data-joint
aiayn prepare --vocab $OUT/data-joint/vocab.model --src $B/web-elb1905.en --tgt $B/web-elb1905.de --out $OUT/data-bible
aiayn prepare --vocab $OUT/data-joint/vocab.model --src $M/train.en --tgt $M/train.de --valid-src $M/val.en \
    --valid-tgt $M/val.de --test-src $M/test_2016_flickr.en --test-tgt $M/test_2016_flickr.de --out $OUT/data-m30k

# The parent (no dev split: the Bible's own dev set would not say how it does on Multi30k) and the fine-tuned run,
# a fresh optimizer with a short warm-up; then the baseline from scratch with the whole budget.
scratch() {
  [ -f $OUT/scratch/config.json ] || aiayn train --data $OUT/data-m30k --out $OUT/scratch $TRAIN $SELECT \
      --warmup $WARMUP --max-minutes $TOTAL_MIN
}
if [ -n "${PARALLEL:-}" ]; then scratch > $OUT/scratch.log 2>&1 & fi
[ -f $OUT/bible/config.json ] || aiayn train --data $OUT/data-bible --out $OUT/bible $TRAIN --warmup $WARMUP \
    --max-minutes $PARENT_MIN
[ -f $OUT/tuned/config.json ] || aiayn train --init-from $OUT/bible --data $OUT/data-m30k --out $OUT/tuned \
    $(echo $TRAIN | sed 's/--preset small//') $SELECT --warmup 200 --max-minutes $((TOTAL_MIN - PARENT_MIN))
if [ -n "${PARALLEL:-}" ]; then wait; else scratch; fi

# Each run's test2016 BLEU three ways: checkpoint_best (the dev-BLEU pick), the last checkpoint, and the average of
# the last 5; then when and why each run stopped.
for run in tuned scratch; do
  aiayn average --run $OUT/$run --last 5
  last=$(ls $OUT/$run/checkpoints/step_*.safetensors | tail -1)
  for pick in best last averaged; do
    case $pick in best) ckpt=$OUT/$run/checkpoint_best.safetensors;; last) ckpt=$last;;
                  averaged) ckpt=$OUT/$run/averaged.safetensors;; esac
    aiayn translate --checkpoint $ckpt --input $OUT/data-m30k/test.src.txt --output $OUT/$run/test.$pick.hyp --no-progress \
      --no-split-sentences
    echo "== $run $pick ($(basename $ckpt)): test2016"
    aiayn evaluate --hyp $OUT/$run/test.$pick.hyp --ref $OUT/data-m30k/test.tgt.txt --target-lang de
  done
  python - $OUT/$run/log.jsonl <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
valid = [r for r in rows if r["kind"] == "valid"]
best = max(valid, key=lambda r: r["bleu"])
print(f"   dev BLEU by evaluation: {[(r['step'], round(r['bleu'], 2)) for r in valid]}")
print(f"   best dev BLEU {best['bleu']:.2f} at step {best['step']}; last step {rows[-1].get('step')}; last record {rows[-1]}")
PY
done
