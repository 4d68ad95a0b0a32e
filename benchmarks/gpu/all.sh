#!/usr/bin/env bash
# Everything this project checks on a lent GPU, results under $OUT (or ./gpu-out), in seven parts:
#   tests     the CUDA tests (tests/test_losses.py, tests/test_runtime.py, tests/test_packed.py)
#   check     benchmarks/gpu/check.py: training tokens/s and MFU, decoding, which attention kernel runs
#   packed    benchmarks/gpu/packed.py: padded against packed batches, base and big, bf16, eager and compiled
#   multi30k  the Multi30k recipe trained for 3 minutes on the GPU, averaged, decoded and scored there; needs
#             data-bin/multi30k (prepared as in configs/multi30k.yaml's header) beside the repository
#   quickstart  the README's main job as a user runs it on a GPU machine (`aiayn quickstart`, --device auto and
#             --dtype auto, so the GPU and bf16 where it has bf16), ${QS_MINUTES:-3} minutes of training, its
#             output and peak host memory in $OUT/quickstart.log
#   peers     benchmarks/gpu/peers.py: aiayn beside HF Marian and torch.nn.Transformer, base and big, bf16, eager, then
#             aiayn compiled; decoding against HF generate; the profile of aiayn's packed step; then base again with a
#             new batch shape at every step, as real data gives
#   ttb       time to BLEU on Multi30k: aiayn beside HF transformers' Seq2SeqTrainer at ${TTB_BUDGETS:-1,2,3} minutes
#             (benchmarks/peers/time_to_bleu.py --device cuda --systems aiayn,hf); needs data-bin/multi30k too
#   decode    benchmarks/gpu/decode.py: aiayn eager and graphed beside HF generate and CTranslate2, greedy and beam 4,
#             64 and 512 sentences, on the quickstart's model (run the quickstart part first in the same call) and
#             on a random `base` forced to 30 words
#   train     benchmarks/gpu/peers.py's training cells in one short list, beside HF Marian and torch.nn.Transformer:
#             base and big in bf16, packed and padded, eager; base in fp32 with TF32 off (torch's default) and on
#             (what `aiayn train` does in fp32 on a GPU; the peers then too); base bf16 with a new shape every step;
#             base and big packed compiled; fp16 too with TRAIN_FP16=1. Each group of cells once per $OUT (a second
#             call skips the groups done)
#   profile   benchmarks/gpu/profile_step.py: where base's and big's bf16 packed training step spends its time, by
#             kind (matrix products, attention, softmax and loss, layer norm, dropout, optimizer, casts, elementwise),
#             eager, then compiled (PROFILE_COMPILE=0: eager only); tables in $OUT/profile/
#   userpath  the user's path on the GPU: `aiayn translate` (device auto: the GPU; its default fixed-shape, graphed
#             search, and --search-impl eager) on the quickstart's test set as a whole process, fp32 and bf16, beside
#             HF generate on the same model exported (benchmarks/gpu/hf_generate.py); wall seconds, peak host memory
#             and BLEU in $OUT/userpath.txt (run the quickstart part first in the same call, or set QS_DIR)
#   distill   `aiayn distill --device cuda` on the quickstart's run and prepared data (QS_DIR, as for userpath): the
#             teacher's beam search and the student's training on the GPU (DISTILL_BUDGET, default `--epochs 8`: a
#             GPU's minutes are many epochs, docs/distill.md), then the teacher (beam 4) and the
#             student (greedy) on the test set, each a whole process, with BLEU; its log, recipe and table in
#             $OUT/distill.log, distill-recipe.json and distill.txt (DISTILL_FLAGS: more flags)
# benchmarks/gpu/lease.sh runs train, profile, ttb and userpath in a lease's order, within a deadline, resumable.
# All take ~31 minutes; where a command may run 10 minutes at most, run them as several (say `all.sh peers quickstart`
# with QS_MINUTES=1.5, then `all.sh ttb` with TTB_BUDGETS=1,2, then `all.sh tests check multi30k`). A lease of about
# a quarter of an hour: `QS_MINUTES=2 bash benchmarks/gpu/all.sh quickstart userpath decode train` (~9 minutes), then
# `TTB_BUDGETS=1 bash benchmarks/gpu/all.sh ttb` if time is left. From the root:
#
#   bash benchmarks/gpu/all.sh [PART ...]      (no part: the first seven)
# Where the machine lacks a Python package aiayn needs (sacremoses on some images), put its wheel in .whl/ first.
set -u -o pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
PY=${PY:-python3}
PARTS=" ${*:-tests check packed multi30k quickstart peers ttb} "
if compgen -G ".whl/*.whl" >/dev/null; then  # wheels carried to a machine without network
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && PYTHONPATH=$PYTHONPATH:/tmp/site
fi
want() { [[ "$PARTS" == *" $1 "* ]]; }
SMOKE_FLAG=""; SMOKE_CELLS=()  # SMOKE=1: the decode and train parts on the CPU, tiny, aiayn's cells alone
[ -n "${SMOKE:-}" ] && SMOKE_FLAG="--cpu" && SMOKE_CELLS=(--impls aiayn)
[ -z "$SMOKE_FLAG" ] && nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
if want tests; then
    timeout 150 $PY -m pytest -q -x tests/test_losses.py tests/test_runtime.py tests/test_packed.py \
        2>&1 | tail -5 | tee "$OUT/tests.txt"
fi
if want check; then
    timeout 200 $PY -m benchmarks.gpu.check --compile --out "$OUT/gpu_check.jsonl" 2>&1 | grep -v Warning | tail -12
fi
if want packed; then
    timeout 300 $PY -m benchmarks.gpu.packed --compile --steps 10 --out "$OUT/gpu_packed.jsonl" 2>&1 \
        | grep -v Warning | tee "$OUT/gpu_packed.txt" | tail -14
fi
if want peers; then
    timeout ${PEERS_TIMEOUT:-330} $PY -m benchmarks.gpu.peers --compile --out "$OUT/gpu_peers.jsonl" \
        --profile "$OUT/profile-base-packed-eager.txt" --profile-decode "$OUT/profile-decode-greedy.txt" 2>&1 | grep -v Warning | tee "$OUT/gpu_peers.txt" | tail -30
    timeout ${PEERS_VARIED_TIMEOUT:-120} $PY -m benchmarks.gpu.peers --vary-shapes --presets base --beams "" \
        --out "$OUT/gpu_peers.jsonl" 2>&1 | grep -v Warning | tee "$OUT/gpu_peers_varied.txt" | tail -8
fi
if want multi30k; then
    R=$(mktemp -d)/multi30k
    timeout 230 $PY -m aiayn train --config configs/multi30k.yaml --out "$R" --device cuda --threads 0 --no-progress \
        --max-minutes ${TRAIN_MINUTES:-3} --save-every-minutes 0.5 --keep-last 5 --max-tokens 8192 2>&1 | tail -4
    cp "$R"/*.jsonl "$OUT/" 2>/dev/null
    $PY -m aiayn average --run "$R" --last 5 2>&1 | tail -1
    $PY -m aiayn translate --checkpoint "$R" --input data-bin/multi30k/test.src.txt --output "$OUT/test.hyp" \
        --device cuda --no-progress --no-split-sentences 2>&1 | tail -1
    if $PY -c "import sacremoses" 2>/dev/null; then
        $PY -m aiayn evaluate --hyp "$OUT/test.hyp" --ref data-bin/multi30k/test.tgt.txt --target-lang de 2>&1 | tail -4 | tee "$OUT/bleu.txt"
    else  # the GPU image lacks sacremoses (tokenized BLEU): sacreBLEU alone here, the full evaluate where it is installed
        $PY -m sacrebleu data-bin/multi30k/test.tgt.txt -i "$OUT/test.hyp" -b | tee "$OUT/bleu.txt"
    fi
fi
if want ttb; then  # time to BLEU beside HF's Seq2SeqTrainer, one after the other; needs data-bin/multi30k (carry it)
    T=${TTB_WORK:-$(mktemp -d)/ttb}  # TTB_SYSTEMS=aiayn first, then aiayn,hf in a later call: aiayn's part is kept
    timeout ${TTB_TIMEOUT:-560} $PY -m benchmarks.peers.time_to_bleu --device ${TTB_DEVICE:-cuda} \
        --systems ${TTB_SYSTEMS:-aiayn,hf} --data "${TTB_DATA:-data-bin/multi30k}" --budgets ${TTB_BUDGETS:-1,2,3} \
        --save-every ${TTB_SAVE_EVERY:-200} ${TTB_FLAGS:-} --work "$T" --plot "$OUT/ttb.png" 2>&1 \
        | tee "$OUT/ttb.txt" | tail -9
    $PY -m benchmarks.gpu.startup "$T" --out "$OUT/ttb_startup.jsonl" 2>&1 | tee -a "$OUT/ttb.txt"  # each one's start-up
    cp "$T/results.jsonl" "$OUT/ttb_results.jsonl" 2>/dev/null
    cp "$T"/significance-*.txt "$OUT/" 2>/dev/null
fi
Q=${QS_DIR:-$(mktemp -d)/quickstart}
if want quickstart; then
    { echo "# aiayn quickstart --out $Q --minutes ${QS_MINUTES:-3} --no-progress  (device auto, dtype auto)"
      TIME=""; [ -x /usr/bin/time ] && TIME="/usr/bin/time -v"  # peak host memory, where GNU time is installed
      timeout ${QS_TIMEOUT:-400} $TIME $PY -m aiayn quickstart --out "$Q" --minutes "${QS_MINUTES:-3}" --no-progress
    } > "$OUT/quickstart.log" 2>&1
    grep -E "^\[|BLEU|sentences/s|steps at|done in|Maximum resident" "$OUT/quickstart.log"
    cp "$Q/run/log.jsonl" "$OUT/quickstart-log.jsonl" 2>/dev/null
fi
if want decode; then  # the quickstart's model (where the quickstart part ran), then a random base
    if [ -d "$Q/run" ] && [ -z "$SMOKE_FLAG" ]; then
        timeout ${DECODE_TIMEOUT:-150} $PY -m benchmarks.gpu.decode --checkpoint "$Q/run" --data "$Q/data" \
            --out "$OUT/gpu_decode.jsonl" 2>&1 | grep -v Warning | tail -20
    fi
    timeout ${DECODE_BASE_TIMEOUT:-100} $PY -m benchmarks.gpu.decode $SMOKE_FLAG --preset base --engines "aiayn,aiayn graphed,hf" \
        --out "$OUT/gpu_decode.jsonl" 2>&1 | grep -v Warning | tail -14
fi
if want train; then  # eager cells first (seconds each), the compiled cells last
    run_cells() {  # NAME LIMIT FLAGS...: one call of peers.py, skipped where an earlier call in this $OUT finished it
        local name=$1 limit=$2; shift 2
        [ -f "$OUT/.done-train-$name" ] && { echo "train $name: done earlier"; return; }
        timeout "$limit" $PY -m benchmarks.gpu.peers $SMOKE_FLAG --beams "" --steps ${TRAIN_STEPS:-10} \
            --out "$OUT/gpu_train.jsonl" "$@" "${SMOKE_CELLS[@]}" 2>&1 | grep -v Warning | tee "$OUT/train-$name.txt" \
            | tail -14 && touch "$OUT/.done-train-$name"
    }
    ALL="aiayn packed,aiayn,hf_marian,torch_nn"
    run_cells bf16 80 --presets base,big --dtype bf16 --impls "$ALL"
    run_cells fp32 50 --presets base --dtype fp32 --impls "$ALL"
    run_cells fp32-tf32 45 --presets base --dtype fp32 --tf32 --impls "$ALL"
    run_cells varied 60 --presets base --dtype bf16 --vary-shapes --impls "$ALL"
    [ -n "${TRAIN_FP16:-}" ] && run_cells fp16 70 --presets base,big --dtype fp16 --impls "aiayn packed,hf_marian,torch_nn"
    run_cells compiled 150 --presets base,big --dtype bf16 --compile --impls "aiayn packed"
fi
if want profile; then  # after train: its compiled cells leave their kernels in torch's on-disk cache
    timeout ${PROFILE_TIMEOUT:-150} $PY -m benchmarks.gpu.profile_step $SMOKE_FLAG --presets base,big --dtype bf16 \
        --layouts packed $([ "${PROFILE_COMPILE:-1}" = 1 ] && echo --compile) --out "$OUT/profile" 2>&1 \
        | grep -v Warning | tee "$OUT/profile.txt" | grep -E "^aiayn|^\| (kind|matrix|attention|softmax)"
fi
timed() {  # LABEL CMD...: wall seconds (and peak host RSS where GNU time is installed) of one whole process
    local label=$1; shift
    local t0=$EPOCHREALTIME rss=""
    if [ -x /usr/bin/time ]; then set -- /usr/bin/time -f "peak RSS %M KB" -o "$OUT/userpath-rss" "$@"; fi
    timeout ${USERPATH_TIMEOUT:-120} "$@" > "$OUT/userpath-last.json" 2> "$OUT/userpath-last.err" \
        || { echo "$label: failed"; tail -3 "$OUT/userpath-last.err"; return; }
    [ -f "$OUT/userpath-rss" ] && rss=$(tail -1 "$OUT/userpath-rss")
    echo "$label: $(awk "BEGIN {printf \"%.2f\", $EPOCHREALTIME - $t0}") s, $rss $(tail -1 "$OUT/userpath-last.json")"
}
if want userpath; then  # aiayn translate as a user runs it on a GPU, beside HF generate on the exported model
    SRC="$Q/data/test.src.txt"; REF="$Q/data/test.tgt.txt"; H=$(mktemp -d)/hf
    DEV=${SMOKE_FLAG:+--device cpu}; IMPLS="auto eager"; [ -n "$SMOKE_FLAG" ] && IMPLS="fixed eager"
    $PY -m aiayn export --checkpoint "$Q/run" --to hf "$H" > /dev/null 2>&1 || echo "export --to hf failed"
    { for p in fp32 bf16; do
          for impl in $IMPLS; do
              timed "aiayn translate --precision $p --search-impl $impl" $PY -m aiayn translate --checkpoint "$Q/run" \
                  --input "$SRC" --output "$OUT/userpath-aiayn-$p-$impl.hyp" --precision $p --lp power \
                  --search-impl $impl --no-progress --no-split-sentences $DEV
          done
          timed "HF generate $p" $PY benchmarks/gpu/hf_generate.py "$H" "$SRC" "$OUT/userpath-hf-$p.hyp" \
              --precision $p ${SMOKE_FLAG:+--device cpu}
      done
      for hyp in "$OUT"/userpath-*.hyp; do
          echo "BLEU $(basename "$hyp" .hyp): $($PY -m sacrebleu "$REF" -i "$hyp" -b 2>/dev/null)"
      done
    } 2>&1 | tee "$OUT/userpath.txt"
fi
if want distill; then  # aiayn distill with --device cuda: the teacher's beam search and the student's training there
    DD=${DISTILL_DATA:-$Q/data}; D=${DISTILL_OUT:-$(mktemp -d)/student}  # DD: the quickstart's prepared data
    FLAGS="--device cuda ${DISTILL_BUDGET:---epochs 8} ${DISTILL_FLAGS:-}"
    [ -n "$SMOKE_FLAG" ] && FLAGS="--device cpu --max-steps 2 --int8-lines 4 ${DISTILL_FLAGS:-}"
    { echo "# aiayn distill --teacher $Q/run --data $DD --out $D $FLAGS --no-progress"
      TIME=""; [ -x /usr/bin/time ] && TIME="/usr/bin/time -v"
      timeout ${DISTILL_TIMEOUT:-330} $TIME $PY -m aiayn distill --teacher "$Q/run" --data "$DD" --out "$D" $FLAGS \
          --no-progress
    } > "$OUT/distill.log" 2>&1
    grep -E "^\[|BLEU|sentences/s|steps|Maximum resident|[Ee]rror" "$OUT/distill.log"
    cp "$D/distill/recipe.json" "$OUT/distill-recipe.json" 2>/dev/null
    { for who in "teacher --beam 4" "student --beam 1"; do  # the test set, never trained on, each a whole process
          set -- $who; R=$Q/run; [ "$1" = student ] && R=$D
          timed "aiayn translate $1 $2 $3" $PY -m aiayn translate --checkpoint "$R" --input "$DD/test.src.txt" \
              --output "$OUT/distill-$1.hyp" $2 $3 --no-progress --no-split-sentences ${SMOKE_FLAG:+--device cpu}
          echo "BLEU distill-$1: $($PY -m sacrebleu "$DD/test.tgt.txt" -i "$OUT/distill-$1.hyp" -b 2>/dev/null)"
      done
    } 2>&1 | tee "$OUT/distill.txt"
fi
