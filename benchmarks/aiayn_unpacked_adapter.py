"""aiayn_adapter.py decoding with unpacked weights (AIAYN_PACKED=0: `F.linear` on the plain weight matrices, as
before aiayn.fast.PackedLinear), so that one harness run shows what packing the weights gives:

    AIAYN_EXTRA="aiayn-unpacked=$PWD/benchmarks/aiayn_unpacked_adapter.py=$(command -v python3)" \
        PARTS="infer" IMPLS="hf_marian" bash benchmarks/run_peers.sh
"""

import os
import sys
from pathlib import Path

os.environ["AIAYN_PACKED"] = "0"
sys.path.insert(0, str(Path(__file__).resolve().parent))

from aiayn_adapter import Adapter  # noqa: E402,F401  (the harness looks up `Adapter`)
