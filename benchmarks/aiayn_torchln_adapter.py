"""aiayn_adapter.py with torch's nn.LayerNorm in place of aiayn.fast.LayerNorm (whose output stays bf16 under CPU
autocast), so that one harness run shows what the 16-bit LayerNorm gives in training:

    AIAYN_EXTRA="aiayn-torchln=$PWD/benchmarks/aiayn_torchln_adapter.py=$(command -v python3)" \
        PARTS="peak train" IMPLS="fairseq_wmt" bash benchmarks/run_peers.sh
"""

import sys
from pathlib import Path

from torch import nn

import aiayn.model

aiayn.model.LayerNorm = nn.LayerNorm  # read when the model's modules are built
sys.path.insert(0, str(Path(__file__).resolve().parent))

from aiayn_adapter import Adapter  # noqa: E402,F401  (the harness looks up `Adapter`)
