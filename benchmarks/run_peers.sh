#!/usr/bin/env bash
# Speed of aiayn side by side with the peers (torch.nn.Transformer, HF Marian, fairseq, OpenNMT-py,
# CTranslate2), in one run of the shared harness (../shared/bench/peers): the same synthetic batches, the same
# timing loop, the matmul peak measured in the same run (for MFU), measurements interleaved across
# implementations. Training (base and small, fp32 and bf16) and decoding (beam 4 and greedy, batch 64, fixed
# output length). About 40 minutes on 2 cores; tables go to $RESULTS/tables.md, aiayn / peer ratios to
# $RESULTS/ratios.md (benchmarks/ratios.py).
#
#   bash benchmarks/run_peers.sh                                   # everything
#   PARTS="train" TRAIN_CASES="small:bf16" bash benchmarks/run_peers.sh   # a subset (knobs: see run_all.sh)
#   AIAYN_EXTRA="label=adapter=python ..."                          # more aiayn variants beside it (run_all.sh EXTRA)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
HARNESS=${HARNESS:-$(cd "$HERE/../../shared/bench/peers" && pwd)}
export ROOT=${PEERS:-$HOME/.cache/aiayn-peers}
export RESULTS=${RESULTS:-$ROOT/results-$(date +%Y%m%d-%H%M%S)}
PY=${PYTHON:-$(command -v python3)}   # a python that has aiayn installed (pip install -e .)
"$PY" -c "import aiayn" || { echo "aiayn is not importable by $PY: pip install -e . first" >&2; exit 1; }
[ -x "$ROOT/venv/bin/python" ] || ROOT=$ROOT bash "$HARNESS/setup_peers.sh"   # peers' venvs, ~3 min, once
EXTRA="aiayn=$HERE/aiayn_adapter.py=$PY ${AIAYN_EXTRA:-}" bash "$HARNESS/run_all.sh"
"$ROOT/venv/bin/python" "$HARNESS/summarize.py" "$RESULTS" | tee "$RESULTS/tables.md"
"$PY" "$HERE/ratios.py" "$RESULTS" | tee "$RESULTS/ratios.md"
