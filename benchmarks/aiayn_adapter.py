"""aiayn as an adapter of the shared peer harness (../shared/bench/peers), so it is measured on the same
synthetic batches, with the same timing loop and FLOP model, side by side with the peers.

The harness's ids are fairseq's (BOS 0, PAD 1, EOS 2), so the model is built with pad_id=1.
Training uses aiayn's own loss path (`aiayn.train.batch_loss`): the vocabulary projection and the
label-smoothed loss run on real target tokens only -- that is part of what is being measured.
"""

import sys
from pathlib import Path

import common  # noqa: F401  (the harness's module; on sys.path when the harness loads us)
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiayn.config import ModelConfig  # noqa: E402
from aiayn.model import Transformer  # noqa: E402
from aiayn.train import batch_loss  # noqa: E402


def to_aiayn_config(cfg) -> ModelConfig:
    return ModelConfig(vocab_size=cfg.vocab, n_enc_layers=cfg.enc_layers, n_dec_layers=cfg.dec_layers,
                       d_model=cfg.d_model, d_ff=cfg.ffn, n_heads=cfg.n_heads, d_k=cfg.d_model // cfg.n_heads,
                       d_v=cfg.d_model // cfg.n_heads, dropout=cfg.dropout,
                       attention_dropout=cfg.attention_dropout, label_smoothing=cfg.label_smoothing,
                       pad_id=common.PAD)


class Adapter:
    name = "aiayn"

    def __init__(self, cfg):
        self.cfg = cfg

    def info(self):
        import aiayn

        return {"impl_version": aiayn.__version__}

    def build(self) -> torch.nn.Module:
        return Transformer(to_aiayn_config(self.cfg))

    def prepare_train(self, batch):
        return batch

    def train_loss(self, model, prepared) -> torch.Tensor:
        loss, _, _ = batch_loss(model, prepared.src, prepared.tgt_in, prepared.tgt_out,
                                self.cfg.label_smoothing, common.PAD)
        return loss

    def prepare_src(self, batch):
        return batch

    def generate(self, model, prepared, beam: int, n_tokens: int, lenpen: float):
        from aiayn.search import beam_search, greedy_search

        if beam == 1:
            hyps = greedy_search(model, prepared.src, max_len_a=0, max_len_b=n_tokens, min_len=n_tokens,
                                 bos_id=common.BOS, eos_id=common.EOS)
        else:
            hyps = beam_search(model, prepared.src, beam=beam, alpha=lenpen, max_len_a=0, max_len_b=n_tokens,
                               min_len=n_tokens, bos_id=common.BOS, eos_id=common.EOS)
        return [h[0]["tokens"] if isinstance(h, list) else h for h in hyps]
