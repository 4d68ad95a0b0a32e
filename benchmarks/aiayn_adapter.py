"""aiayn as an adapter of the shared peer harness (../shared/bench/peers), for training and decoding, so it is
measured on the same synthetic batches, with the same timing loop and FLOP model, side by side with the peers.

    python bench_train.py --impl /path/to/aiayn/benchmarks/aiayn_adapter.py --config base --dtype bf16
    python bench_infer.py --impl /path/to/aiayn/benchmarks/aiayn_adapter.py --config base --beam 4

The harness's ids are fairseq's (BOS 0, PAD 1, EOS 2, words from 4); aiayn's are PAD 0, BOS 2, EOS 3. Words
keep their ids; the special ids are remapped in prepare_train/prepare_src (untimed) and EOS back in generate.
Training uses aiayn's own loss path (`aiayn.losses.batch_loss`: the vocabulary projection and the
label-smoothed loss on real target tokens only) -- that is part of what is measured.
"""

import os
import sys
from pathlib import Path

import common  # the harness's module, on sys.path when the harness loads this file
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiayn.config import BOS_ID, EOS_ID, PAD_ID, ModelConfig  # noqa: E402
from aiayn.fast import inference_copy, keep_freed_memory  # noqa: E402
from aiayn.losses import batch_loss  # noqa: E402
from aiayn.model import Transformer  # noqa: E402
from aiayn.search import SearchConfig, beam_search, greedy_search  # noqa: E402


def to_aiayn_ids(x: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    for theirs, ours in ((common.PAD, PAD_ID), (common.BOS, BOS_ID), (common.EOS, EOS_ID)):
        out[x.eq(theirs)] = ours
    return out


class Adapter:
    name = "aiayn"

    def __init__(self, cfg):
        self.cfg = cfg

    def info(self):
        import aiayn

        return {"impl_version": aiayn.__version__}

    def build(self) -> torch.nn.Module:
        keep_freed_memory()  # as every `aiayn` command does (aiayn/fast.py)
        c = self.cfg
        if c.attention_dropout:
            raise ValueError("aiayn has no attention dropout (the paper uses none); set the harness's to 0")
        d_head = c.d_model // c.n_heads
        return Transformer(ModelConfig(
            vocab_size=c.vocab, n_enc_layers=c.enc_layers, n_dec_layers=c.dec_layers, d_model=c.d_model,
            d_ff=c.ffn, n_heads=c.n_heads, d_k=d_head, d_v=d_head, dropout=c.dropout,
            label_smoothing=c.label_smoothing))

    def prepare_train(self, batch):
        return to_aiayn_ids(batch.src), to_aiayn_ids(batch.tgt_in), to_aiayn_ids(batch.tgt_out)

    def train_loss(self, model, prepared) -> torch.Tensor:
        src, tgt_in, tgt_out = prepared
        loss, _, _ = batch_loss(model, src, tgt_in, tgt_out, self.cfg.label_smoothing)
        return loss

    def prepare_src(self, batch):
        return to_aiayn_ids(batch.src)

    def generate(self, model, src, beam: int, n_tokens: int, lenpen: float):
        if os.environ.get("AIAYN_DECODE_DTYPE") == "int8":
            # aiayn's int8 path (`aiayn translate --dtype int8`: dynamically quantized projections), measured with
            # the harness's --dtype fp32 and a label of its own; the quantized copy is made once, untimed (warm-up).
            if getattr(self, "_int8_of", None) is not model:
                self._int8, self._int8_of = inference_copy(model, "int8"), model
            return self._search(self._int8, src, beam, n_tokens, lenpen)
        # aiayn decodes as `aiayn translate --dtype fp32|bf16` does, on its inference copy (aiayn.fast.inference_copy:
        # bf16 weights converted once, and on CPU every projection's weight packed once for oneDNN's GEMM), made at the
        # first (warm-up) call, as CTranslate2 converts its model beforehand. The harness's bf16 is autocast around
        # generate; AIAYN_PACKED=0 decodes with unpacked weights (to measure what packing gives).
        packed = os.environ.get("AIAYN_PACKED", "1") != "0"
        dtype = "bf16" if torch.is_autocast_enabled("cpu") else "fp32"
        if getattr(self, "_copy_of", None) != (model, dtype):
            self._copy, self._copy_of = inference_copy(model, dtype, packed=packed), (model, dtype)
        with torch.autocast("cpu", enabled=False):
            return self._search(self._copy, src, beam, n_tokens, lenpen)

    @staticmethod
    def _search(model, src, beam: int, n_tokens: int, lenpen: float):
        # n_tokens decoder steps: n_tokens - 1 words (EOS banned before), then the forced EOS (as fairseq).
        n = n_tokens - 1
        if beam == 1:
            hyps = greedy_search(model, src, SearchConfig(beam=1, max_len_a=0.0, max_len_b=n, min_len=n))
        else:
            hyps = beam_search(model, src, SearchConfig(beam=beam, alpha=lenpen, max_len_a=0.0, max_len_b=n, min_len=n))
        return [h[0].tokens + [common.EOS] for h in hyps]
