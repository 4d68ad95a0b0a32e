"""Parameter counts of every preset beside Table 3's params column (`aiayn params`)."""

from __future__ import annotations

import torch

from aiayn.config import PAPER_VOCAB, PRESETS, ModelConfig
from aiayn.experiments.paper import TABLE3
from aiayn.model import Transformer, count_parameters, expected_parameters


def parameter_table(vocab_size: int = PAPER_VOCAB) -> list[dict]:
    """One row per preset: shape, counted parameters (built on the meta device), closed form, Table 3."""
    rows = []
    for name in PRESETS:
        cfg = ModelConfig.preset(name)
        if name in TABLE3 or name == "parse":
            cfg = cfg.replace(vocab_size=vocab_size if name != "parse" else cfg.vocab_size)
        with torch.device("meta"):
            counted = count_parameters(Transformer(cfg))
        paper = TABLE3[name].params_M if name in TABLE3 else None
        rows.append({"preset": name, "N": cfg.n_enc_layers, "d_model": cfg.d_model, "d_ff": cfg.d_ff,
                     "h": cfg.n_heads, "d_k": cfg.d_k, "d_v": cfg.d_v, "vocab": cfg.vocab_size,
                     "params": counted, "closed_form": expected_parameters(cfg), "paper_M": paper})
    return rows


def format_table(rows: list[dict]) -> str:
    head = "| preset | N | d_model | d_ff | h | d_k | d_v | vocab | params | closed form | Table 3 |"
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        paper = f"{r['paper_M']}M" if r["paper_M"] else ""
        lines.append(f"| {r['preset']} | {r['N']} | {r['d_model']} | {r['d_ff']} | {r['h']} | {r['d_k']} | "
                     f"{r['d_v']} | {r['vocab']} | {r['params'] / 1e6:.1f}M | {r['closed_form']:,} | {paper} |")
    return "\n".join(lines)
