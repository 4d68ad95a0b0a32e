"""Table 3's rows: their names in the paper's order, the paper's columns, and each row shrunk by a scale."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiayn.config import ModelConfig
from aiayn.errors import UsageError
from aiayn.experiments.paper import TABLE3, TABLE3_STEPS

# Table 3's rows in the paper's order (the presets of aiayn.config with the same names), and their groups.
ROWS = tuple(TABLE3)
GROUPS = {"base": "base", "big": "big", "E": "(E)"} | {r: f"({r[0]})" for r in ROWS if r[0] in "ABCD"}

# The shape columns of the table: fields of ModelConfig, and the paper's headings for them.
SHAPE = ("n_enc_layers", "d_model", "d_ff", "n_heads", "d_k", "d_v", "dropout", "label_smoothing")
SHAPE_HEAD = ("N", "d_model", "d_ff", "h", "d_k", "d_v", "P_drop", "eps_ls")


def paper_row(name: str) -> dict[str, Any]:
    """The paper's columns of a row: group label, params (millions; None = blank), PPL, BLEU, steps."""
    published = TABLE3[name]
    return {"group": GROUPS[name], "params_M": published.params_M, "ppl": published.ppl, "bleu": published.bleu,
            "steps": TABLE3_STEPS.get(name, "100K")}


def scaled_preset(name: str, scale: int) -> ModelConfig:
    """Row `name` with d_model, d_ff, d_k and d_v divided by `scale` (rounded; d_model kept even, every width >= 1);
    N, h, P_drop, eps_ls and the positional encoding as the row says."""
    if name not in ROWS:
        raise UsageError(f"{name!r} is not a row of Table 3; the rows are: {', '.join(ROWS)}")
    if not isinstance(scale, int) or scale < 1:
        raise UsageError(f"scale must be a positive integer, got {scale!r}")
    cfg = ModelConfig.preset(name)

    def shrink(width: int) -> int:
        return max(1, round(width / scale))

    return cfg.replace(d_model=max(2, 2 * round(cfg.d_model / (2 * scale))), d_ff=shrink(cfg.d_ff),
                       d_k=shrink(cfg.d_k), d_v=shrink(cfg.d_v))


def parse_rows(text: str | Sequence[str] | None) -> list[str]:
    """'base,A1,C5' (or a list) -> row names in the paper's order; None -> all rows."""
    if text is None:
        return list(ROWS)
    names = [r.strip() for r in (text.split(",") if isinstance(text, str) else text) if r.strip()]
    unknown = [r for r in names if r not in ROWS]
    if unknown or not names:
        raise UsageError(f"unknown row(s) {', '.join(unknown) or '(none given)'}; the rows are: {', '.join(ROWS)}")
    return [r for r in ROWS if r in names]


def cost(cfg: ModelConfig) -> tuple[int, int, int]:
    """An ordering key for scheduling: deeper, then wider rows take longer per step (on a GPU depth rules)."""
    return (cfg.n_enc_layers + cfg.n_dec_layers, cfg.d_model, cfg.d_ff)


def shape(cfg: ModelConfig) -> list[Any]:
    return [getattr(cfg, f) for f in SHAPE]


def scaled_table(names: Sequence[str], scale: int) -> str:
    """The presets as the paper has them and as trained at this scale, one line per row."""
    head = ("| row | paper: " + " | ".join(SHAPE_HEAD) + f" | trained (1/{scale}): " + " | ".join(SHAPE_HEAD[:6])
            + " |")
    lines = [head, "|" + "---|" * (1 + len(SHAPE) + 6)]
    for n in names:
        paper, ours = shape(ModelConfig.preset(n)), shape(scaled_preset(n, scale))[:6]
        pos = " learned pos." if ModelConfig.preset(n).positional == "learned" else ""
        lines.append(f"| {n}{pos} | " + " | ".join(map(str, paper)) + " | " + " | ".join(map(str, ours)) + " |")
    return "\n".join(lines)
