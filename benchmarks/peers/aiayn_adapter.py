"""aiayn as an adapter of the shared peer harness (../shared/bench/peers), for training and decoding, so it is
measured on the same synthetic batches, with the same timing loop and FLOP model, side by side with the peers.
Self-contained (it imports only aiayn and the harness's `common`), so the harness can load it by path:

    python bench_train.py --impl /path/to/aiayn/benchmarks/peers/aiayn_adapter.py --config base --dtype bf16
    python bench_infer.py --impl /path/to/aiayn/benchmarks/peers/aiayn_adapter.py --config base --beam 4

The variants are class attributes of `Adapter`, each an explicit parameter of aiayn (the small files beside this one
subclass it with one attribute set, because the harness takes a file and looks up `Adapter` in it):

    precision         None: decode as `aiayn translate --precision fp32`, or bf16 when the harness autocasts (its
                      --dtype bf16); "int8": `--precision int8` (run it with the harness's --dtype fp32)
                      -> aiayn.decoding.inference.decoding_copy(model, precision, packed, consume=True)
    packed            None: aiayn's default (packed on CPU); False: F.linear on plain weight matrices
    torch_layer_norm  True: aiayn's LayerNorms return fp32 under autocast, as torch's nn.LayerNorm
                      -> aiayn.fast.set_layer_norm_output(model, autocast=False)

The harness's ids are fairseq's (BOS 0, PAD 1, EOS 2, words from 4); aiayn's are PAD 0, BOS 2, EOS 3. Words
keep their ids; the special ids are remapped in prepare_train/prepare_src (untimed) and EOS back in generate.
Training uses aiayn's own loss path (`aiayn.training.losses.batch_loss`: the vocabulary projection and the
label-smoothed loss on real target tokens only) -- that is part of what is measured.
"""

from __future__ import annotations

import common  # the harness's module, on sys.path when the harness loads this file
import torch

from aiayn.config import BOS_ID, EOS_ID, PAD_ID, ModelConfig
from aiayn.decoding.inference import decoding_copy
from aiayn.decoding.search import SearchConfig, beam_search, greedy_search
from aiayn.fast import keep_freed_memory, set_layer_norm_output
from aiayn.model import Transformer
from aiayn.training.losses import batch_loss


def to_aiayn_ids(x: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    for theirs, ours in ((common.PAD, PAD_ID), (common.BOS, BOS_ID), (common.EOS, EOS_ID)):
        out[x.eq(theirs)] = ours
    return out


class Adapter:
    name = "aiayn"
    precision: str | None = None
    packed: bool | None = None
    torch_layer_norm: bool = False

    def __init__(self, cfg):
        self.cfg = cfg
        self._copy, self._copy_of = None, None

    def info(self):
        import aiayn

        return {"impl_version": aiayn.__version__, "precision": self.precision, "packed": self.packed,
                "torch_layer_norm": self.torch_layer_norm}

    def build(self) -> torch.nn.Module:
        keep_freed_memory()  # as every `aiayn` command does (aiayn/fast.py)
        c = self.cfg
        if c.attention_dropout:
            raise ValueError("aiayn has no attention dropout (the paper uses none); set the harness's to 0")
        d_head = c.d_model // c.n_heads
        model = Transformer(ModelConfig(
            vocab_size=c.vocab, n_enc_layers=c.enc_layers, n_dec_layers=c.dec_layers, d_model=c.d_model,
            d_ff=c.ffn, n_heads=c.n_heads, d_k=d_head, d_v=d_head, dropout=c.dropout,
            label_smoothing=c.label_smoothing))
        return set_layer_norm_output(model, autocast=False) if self.torch_layer_norm else model

    def prepare_train(self, batch):
        return to_aiayn_ids(batch.src), to_aiayn_ids(batch.tgt_in), to_aiayn_ids(batch.tgt_out)

    def train_loss(self, model, prepared) -> torch.Tensor:
        src, tgt_in, tgt_out = prepared
        loss, _, _ = batch_loss(model, src, tgt_in, tgt_out, self.cfg.label_smoothing)
        return loss

    def prepare_src(self, batch):
        return to_aiayn_ids(batch.src)

    def generate(self, model, src, beam: int, n_tokens: int, lenpen: float):
        # Decoding runs on aiayn's decoding copy (weights converted once, and on CPU every projection's weight packed
        # once for oneDNN's GEMM), made at the first (warm-up) call, as CTranslate2 converts its model beforehand.
        # The harness's model is consumed by the conversion (`consume=True`), as `aiayn translate` consumes the model
        # it loads: the process never holds the weights twice (CTranslate2's holds only its converted model).
        precision = self.precision or ("bf16" if torch.is_autocast_enabled("cpu") else "fp32")
        if self._copy_of != (model, precision):
            if self._copy_of is not None:
                raise RuntimeError("the decoding copy consumed the model it was made from; build a new adapter")
            self._copy, self._copy_of = decoding_copy(model, precision, self.packed, consume=True), (model, precision)
        with torch.autocast("cpu", enabled=False):
            # n_tokens decoder steps: n_tokens - 1 words (EOS banned before), then the forced EOS (as fairseq).
            n = n_tokens - 1
            if beam == 1:
                hyps = greedy_search(self._copy, src, SearchConfig(beam=1, max_len_a=0.0, max_len_b=n, min_len=n))
            else:
                hyps = beam_search(self._copy, src, SearchConfig(beam=beam, alpha=lenpen, max_len_a=0.0,
                                                                 max_len_b=n, min_len=n))
        return [h[0].tokens + [common.EOS] for h in hyps]
