#!/usr/bin/env bash
# Speed of aiayn side by side with the peers (torch.nn.Transformer, HF Marian, fairseq, OpenNMT-py,
# CTranslate2), in one run of the shared harness (../shared/bench/peers): the same synthetic batches, the same
# timing loop, the matmul peak measured in the same run (for MFU), measurements interleaved across
# implementations. Training (base and small, fp32 and bf16) and decoding (beam 4 and greedy, batch 64, fixed
# output length). About 40 minutes on 2 cores; tables go to $RESULTS/tables.md, aiayn / peer ratios to
# $RESULTS/ratios.md (benchmarks/peers/ratios.py).
#
#   bash benchmarks/peers/run_peers.sh                                         # everything
#   PARTS="train" TRAIN_CASES="small:bf16" bash benchmarks/peers/run_peers.sh  # a subset (knobs: see run_all.sh)
#   PARTS="infer" IMPLS="hf_marian fairseq_wmt" bash benchmarks/peers/run_peers.sh   # decoding only
#   AIAYN_EXTRA="label=adapter=python ..."      # aiayn variants beside it (run_all.sh EXTRA), e.g.
#       AIAYN_EXTRA="aiayn-int8=$PWD/benchmarks/peers/aiayn_int8.py=$(command -v python3)"
#
# The variant adapters (aiayn_int8.py, aiayn_unpacked.py, aiayn_torchln.py) subclass aiayn_adapter.py's Adapter:
# the repository root goes on PYTHONPATH so that they import it as benchmarks.peers.aiayn_adapter.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
HARNESS=${HARNESS:-$(cd "$REPO/../shared/bench/peers" && pwd)}
export ROOT=${PEERS:-$HOME/.cache/aiayn-peers}
export RESULTS=${RESULTS:-$ROOT/results-$(date +%Y%m%d-%H%M%S)}
export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH}
PY=${PYTHON:-$(command -v python3)}   # a python that has aiayn installed (pip install -e .)
"$PY" -c "import aiayn" || { echo "aiayn is not importable by $PY: pip install -e . first" >&2; exit 1; }
[ -x "$ROOT/venv/bin/python" ] || ROOT=$ROOT bash "$HARNESS/setup_peers.sh"   # peers' venvs, ~3 min, once
EXTRA="aiayn=$HERE/aiayn_adapter.py=$PY ${AIAYN_EXTRA:-}" bash "$HARNESS/run_all.sh"
"$ROOT/venv/bin/python" "$HARNESS/summarize.py" "$RESULTS" | tee "$RESULTS/tables.md"
(cd "$REPO" && "$PY" -m benchmarks.peers.ratios "$RESULTS") | tee "$RESULTS/ratios.md"
