#!/bin/bash
# Back-translation on Multi30k (not run in CI), beam against sampling (Edunov et al., 2018): the training pairs are
# split into a parallel half and a target-only half (its English thrown away); a German->English model trained on the
# parallel half for BT_MIN minutes back-translates the target-only half twice, with beam search (beam 4) and with
# unrestricted sampling (temperature 1, seeded); then English->German is trained for MT_MIN minutes each on the
# parallel half alone, on parallel + beam back-translations and on parallel + sampled ones, and scored on
# test_2016_flickr with sacreBLEU.
#   S=../shared/data OUT=runs/backtranslation BT_MIN=12 MT_MIN=12 bash benchmarks/e2e/back_translation.sh
# One vocabulary (trained on the parallel half, both sides) for all four models; one thread each (OMP_NUM_THREADS=1,
# the caller pins the core); configs/multi30k.yaml's model (small, dropout 0.3) with WARMUP (default 400) steps of
# warm-up. LINES (default all) uses the first LINES training pairs only (a smoke run). Running it again skips the
# parts already done; VOCAB (default 8000) pieces.
set -euo pipefail
S=${S:-../shared/data}; OUT=${OUT:-runs/backtranslation}; BT_MIN=${BT_MIN:-12}; MT_MIN=${MT_MIN:-12}
WARMUP=${WARMUP:-400}; SEED=${SEED:-1}; LINES=${LINES:-0}; VOCAB=${VOCAB:-8000}
M=$S/multi30k
export OMP_NUM_THREADS=1
TRAIN="--preset small --set dropout=0.3 --set init=fairseq --dtype auto --max-tokens 4096 --threads 1 --no-progress
       --max-steps 1000000 --warmup $WARMUP --save-every-minutes 3 --keep-last 5 --log-every 50"
mkdir -p $OUT/raw
R=$OUT/raw
[ "$LINES" -gt 0 ] || LINES=$(wc -l < $M/train.en)
half=$((LINES / 2))
head -n $half $M/train.en > $R/parallel.en; head -n $half $M/train.de > $R/parallel.de
head -n $LINES $M/train.de | tail -n +$((half + 1)) > $R/mono.de
echo "parallel half: $half pairs; target-only half: $(wc -l < $R/mono.de) German sentences"

prep() {  # prep OUT_DIR SRC TGT [--vocab V]: a training set with Multi30k's dev and test sets in its direction
  local out=$1 src=$2 tgt=$3; shift 3
  local s=${src##*.} t=${tgt##*.}
  [ -f $out/meta.json ] || aiayn prepare --src $src --tgt $tgt --source-lang $s --target-lang $t \
      --valid-src $M/val.$s --valid-tgt $M/val.$t --test-src $M/test_2016_flickr.$s --test-tgt $M/test_2016_flickr.$t \
      --out $out "$@"
}
train() {  # train DATA RUN MINUTES
  [ -f $2/config.json ] || aiayn train --data $1 --out $2 $TRAIN --max-minutes $3
}
prep $OUT/data-parallel $R/parallel.en $R/parallel.de --vocab-size $VOCAB
V="--vocab $OUT/data-parallel/vocab.model"
prep $OUT/data-reverse $R/parallel.de $R/parallel.en $V
train $OUT/data-reverse $OUT/reverse $BT_MIN

# The back-translations, timed; then the two synthetic corpora (parallel pairs first, synthetic pairs after).
[ -f $R/mono.beam.en ] || { /usr/bin/time -f "beam back-translation: %e s" aiayn translate --checkpoint $OUT/reverse \
    --input $R/mono.de --output $R/mono.beam.en --beam 4 --no-progress --no-split-sentences; }
[ -f $R/mono.sampled.en ] || { /usr/bin/time -f "sampled back-translation: %e s" aiayn translate --checkpoint \
    $OUT/reverse --input $R/mono.de --output $R/mono.sampled.en --sampling --seed $SEED --no-progress \
    --no-split-sentences; }
for kind in beam sampled; do
  cat $R/parallel.en $R/mono.$kind.en > $R/with-$kind.en; cat $R/parallel.de $R/mono.de > $R/with-$kind.de
  prep $OUT/data-$kind $R/with-$kind.en $R/with-$kind.de $V
done
echo "== the reverse model (German->English, parallel half), test2016"
aiayn translate --checkpoint $OUT/reverse --input $OUT/data-reverse/test.src.txt --output $OUT/reverse/test.hyp --no-progress \
    --no-split-sentences
aiayn evaluate --hyp $OUT/reverse/test.hyp --ref $OUT/data-reverse/test.tgt.txt --target-lang en
echo "== a few back-translations (German source, beam, sampled)"
paste -d '\n' <(head -3 $R/mono.de) <(head -3 $R/mono.beam.en) <(head -3 $R/mono.sampled.en)

for kind in parallel beam sampled; do
  train $OUT/data-$kind $OUT/mt-$kind $MT_MIN
  aiayn translate --checkpoint $OUT/mt-$kind --input $OUT/data-parallel/test.src.txt --output $OUT/mt-$kind/test.hyp \
      --no-progress --no-split-sentences
  echo "== English->German on $kind: test2016 ($(tail -1 $OUT/mt-$kind/log.jsonl | cut -c1-60)...)"
  aiayn evaluate --hyp $OUT/mt-$kind/test.hyp --ref $OUT/data-parallel/test.tgt.txt --target-lang de
done
