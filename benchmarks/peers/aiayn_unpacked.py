"""aiayn_adapter.py decoding with unpacked weights (`decoding_copy(..., prepack=False)`: `F.linear` on the plain
weight matrices instead of aiayn.decoding.inference.PrepackedLinear), so that one harness run shows what packing the
weights gives. Needs the repository root on PYTHONPATH (run_peers.sh sets it):

    AIAYN_EXTRA="aiayn-unpacked=$PWD/benchmarks/peers/aiayn_unpacked.py=$(command -v python3)" \
        PARTS="infer" IMPLS="hf_marian" bash benchmarks/peers/run_peers.sh
"""

from benchmarks.peers.aiayn_adapter import Adapter as AiaynAdapter


class Adapter(AiaynAdapter):
    packed = False
