"""aiayn_adapter.py decoding with aiayn's int8 path (AIAYN_DECODE_DTYPE=int8: `aiayn translate --dtype int8`,
dynamically quantized projections), under a label of its own in the same harness run as the others; it is an fp32
model quantized, so run it for the harness's fp32 cases only:

    AIAYN_EXTRA="aiayn-int8=$PWD/benchmarks/aiayn_int8_adapter.py=$(command -v python3)" \
        SKIP_INFER="aiayn-int8:bf16 fairseq_wmt:bf16" PARTS="infer" IMPLS="hf_marian" bash benchmarks/run_peers.sh
"""

import os
import sys
from pathlib import Path

os.environ["AIAYN_DECODE_DTYPE"] = "int8"
sys.path.insert(0, str(Path(__file__).resolve().parent))

from aiayn_adapter import Adapter  # noqa: E402,F401  (the harness looks up `Adapter`)
