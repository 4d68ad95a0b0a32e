#!/usr/bin/env bash
# A GPU lease's work, in its order, within a deadline, resumable. From the repository root:
#
#   bash benchmarks/gpu/lease.sh                 (then the same command again, on the same machine, to go on)
#
# Steps (LEASE_STEPS), each an all.sh part, in this order:
#   train      training cells beside HF Marian and torch.nn.Transformer, with MFU: base and big bf16 eager, base fp32
#              with TF32 off and on, base bf16 with a new shape every step, base and big packed compiled (~4.5 min)
#   profile    where base's and big's bf16 step spends its time, by kind, eager and compiled              (~1 min)
#   ttb-aiayn  time to BLEU on Multi30k, aiayn's part: 3 minutes of training, decoded at 1, 2 and 3     (~4 min)
#   ttb        the same for HF's Seq2SeqTrainer, then the table with paired-bootstrap p and each system's
#              start-up                                                                              (~5 min)
#   userpath   `aiayn translate` as a whole process beside HF generate, fp32 and bf16, on the quickstart model
#              carried in .lease/qs (else a 1-minute quickstart first)                                (~2.5 min)
# A step starts only while its estimate (COST below) fits in what is left of LEASE_SECONDS (default 570: a call of 600 s
# at most); the rest waits for the next call. All five are ~16 minutes of work: a lease of 15, its start included, gets
# through the first four in two calls; the user's path waits for the next lease (or goes first with LEASE_STEPS).
# TTB_BUDGETS=1,2 (with COST_TTB_AIAYN=160 COST_TTB=200) saves ~2.5 minutes. Done steps (and train's done groups,
# ttb's trained systems and decoded budgets) are kept in LEASE_STATE (default /tmp/aiayn-lease, which lasts as long as
# the machine) and skipped by the next call.
# After every step all results so far are packed into $OUT/lease.tar.gz (ttb's checkpoints left out), so a call that
# is stopped still returns what it finished.
# Inputs carried in .lease/ (made here by `bash benchmarks/gpu/lease_inputs.sh`): multi30k/ (prepared as in
# configs/multi30k.yaml's header) and qs/ (a quickstart run and its test set). SMOKE=1: the same steps on the CPU,
# tiny (tests/test_gpu_scripts.py).
set -u -o pipefail
OUT=${OUT:-gpu-out}; STATE=${LEASE_STATE:-/tmp/aiayn-lease}; INPUTS=${LEASE_INPUTS:-.lease}
mkdir -p "$OUT" "$STATE/out"
LIMIT=${LEASE_SECONDS:-570}; T0=$SECONDS
STEPS=${LEASE_STEPS:-train profile ttb-aiayn ttb userpath}
# Seconds each step is expected to take on an H100 (from the calls in benchmarks/results/*-h100)
declare -A COST=([train]=${COST_TRAIN:-260} [profile]=${COST_PROFILE:-60} [ttb-aiayn]=${COST_TTB_AIAYN:-230}
                 [ttb]=${COST_TTB:-280} [userpath]=${COST_USERPATH:-150})
export PYTHONUNBUFFERED=1
left() { echo $((LIMIT - (SECONDS - T0))); }
pack() { tar czf "$OUT/lease.tar.gz" -C "$STATE" out 2>/dev/null; }
TTB=(TTB_WORK="$STATE/ttb" TTB_DATA="$INPUTS/multi30k")
[ -n "${SMOKE:-}" ] && TTB+=(TTB_DEVICE=cpu TTB_BUDGETS="${TTB_BUDGETS:-0.4,0.75}" TTB_SAVE_EVERY=4
                              TTB_FLAGS="--average 1 --test-lines 4 --dtype fp32 $(printf -- '--aiayn-set %s ' \
                                  n_enc_layers=1 n_dec_layers=1 d_model=32 d_ff=64 n_heads=2 d_k=16 d_v=16)")
QS=$INPUTS/qs
run_step() {
    case $1 in
        train|profile) OUT="$STATE/out" bash benchmarks/gpu/all.sh "$1" ;;
        ttb-aiayn) env "${TTB[@]}" TTB_SYSTEMS=aiayn OUT="$STATE/out" bash benchmarks/gpu/all.sh ttb ;;
        ttb) env "${TTB[@]}" TTB_SYSTEMS=aiayn,hf OUT="$STATE/out" bash benchmarks/gpu/all.sh ttb ;;
        userpath)
            if [ ! -d "$QS/run" ]; then QS=$STATE/qs; QS_DIR=$QS QS_MINUTES=${QS_MINUTES:-1} OUT="$STATE/out" \
                bash benchmarks/gpu/all.sh quickstart; fi
            QS_DIR=$QS OUT="$STATE/out" bash benchmarks/gpu/all.sh userpath ;;
        *) echo "unknown step $1 (steps: ${!COST[*]})"; return 2 ;;
    esac
}
finished() {  # STEP: whether its results are all there
    local o=$STATE/out
    case $1 in
        train) for g in bf16 fp32 fp32-tf32 varied compiled; do [ -f "$o/.done-train-$g" ] || return 1; done ;;
        profile) [ -s "$o/profile/profile.jsonl" ] && ! grep -q '"error"' "$o/profile/profile.jsonl" ;;
        ttb-aiayn) grep -q '"system": "aiayn"' "$o/ttb_results.jsonl" 2>/dev/null ;;
        ttb) grep -q '"system": "hf"' "$o/ttb_results.jsonl" 2>/dev/null && [ -s "$o/ttb_startup.jsonl" ] ;;
        userpath) [ -s "$o/userpath.txt" ] && ! grep -q failed "$o/userpath.txt" ;;
        *) return 1 ;;
    esac
}
for step in $STEPS; do
    if [ -f "$STATE/done-$step" ]; then echo "== $step: done in an earlier call"; continue; fi
    if [ "$(left)" -lt "${COST[$step]:-0}" ]; then
        echo "== $step: not started, ~${COST[$step]} s estimated and $(left) s left; call again"; continue
    fi
    echo "== $step ($(left) s left of $LIMIT)"
    t=$SECONDS
    run_step "$step"
    if finished "$step"; then touch "$STATE/done-$step"; echo "== $step: $((SECONDS - t)) s"
    else echo "== $step: $((SECONDS - t)) s, results incomplete (see $STATE/out); the next call runs it again"; fi
    pack
done
missing=$(for s in $STEPS; do [ -f "$STATE/done-$s" ] || echo -n " $s"; done)
echo "== lease: $((SECONDS - T0)) s this call; $([ -n "$missing" ] && echo "not done yet:$missing" || echo "every step done")"
pack
