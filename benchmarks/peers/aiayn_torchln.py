"""aiayn_adapter.py with aiayn's LayerNorms returning fp32 under autocast, as torch's nn.LayerNorm
(`aiayn.fast.set_layer_norm_output(model, autocast=False)`), so that one harness run shows what the 16-bit LayerNorm
gives in training. Needs the repository root on PYTHONPATH (run_peers.sh sets it):

    AIAYN_EXTRA="aiayn-torchln=$PWD/benchmarks/peers/aiayn_torchln.py=$(command -v python3)" \
        PARTS="peak train" IMPLS="fairseq_wmt" bash benchmarks/peers/run_peers.sh
"""

from benchmarks.peers.aiayn_adapter import Adapter as AiaynAdapter


class Adapter(AiaynAdapter):
    torch_layer_norm = True
