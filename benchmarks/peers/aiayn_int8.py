"""aiayn_adapter.py decoding with int8 weights (`aiayn translate --precision int8`: dynamically quantized projections),
under a label of its own in the same harness run; it is an fp32 model quantized, so run it for the harness's fp32
cases only. Imports benchmarks.peers.aiayn_adapter: the repository root must be on PYTHONPATH (run_peers.sh sets it):

    AIAYN_EXTRA="aiayn-int8=$PWD/benchmarks/peers/aiayn_int8.py=$(command -v python3)" \
        SKIP_INFER="aiayn-int8:bf16 fairseq_wmt:bf16" PARTS="infer" IMPLS="hf_marian" bash benchmarks/peers/run_peers.sh
"""

from benchmarks.peers.aiayn_adapter import Adapter as AiaynAdapter


class Adapter(AiaynAdapter):
    precision = "int8"
