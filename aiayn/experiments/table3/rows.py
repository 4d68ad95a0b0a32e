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


# A replica: a row trained again at another seed, everything else as the plan says ("base@seed2"), to measure how
# much the scores move with the seed alone (the run's noise). Its folder is OUT/<row>@seed<N>.
REPLICA = "@seed"


def row_of(name: str) -> str:
    """The Table 3 row a name stands for: itself, or the row a replica repeats."""
    return name.split(REPLICA)[0]


def replica_seed(name: str) -> int | None:
    """The seed of a replica ("base@seed2" -> 2); None for a row of the table itself."""
    if REPLICA not in name:
        return None
    seed = name.split(REPLICA, 1)[1]
    if not seed.isdigit():
        raise UsageError(f"{name!r}: a replica is written ROW{REPLICA}N with N a seed, e.g. base{REPLICA}2")
    return int(seed)


def paper_row(name: str) -> dict[str, Any]:
    """The paper's columns of a row (or of the row a replica repeats): group label, params (millions; None =
    blank), PPL, BLEU, steps."""
    name = row_of(name)
    published = TABLE3[name]
    return {"group": GROUPS[name], "params_M": published.params_M, "ppl": published.ppl, "bleu": published.bleu,
            "steps": TABLE3_STEPS.get(name, "100K")}


def scaled_preset(name: str, scale: int) -> ModelConfig:
    """Row `name` (or the row a replica repeats) with d_model, d_ff, d_k and d_v divided by `scale` (rounded;
    d_model kept even, every width >= 1); N, h, P_drop, eps_ls and the positional encoding as the row says."""
    replica_seed(name)  # a malformed replica fails here
    name = row_of(name)
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
    """'base,A1,C5,base@seed2' (or a list) -> row names in the paper's order, each replica after its row; None ->
    all rows; 'all' among them stands for the 20 rows ('all,base@seed2,base@seed3')."""
    if text is None:
        return list(ROWS)
    names = [r.strip() for r in (text.split(",") if isinstance(text, str) else text) if r.strip()]
    names = [n for r in names for n in (ROWS if r == "all" else (r,))]
    unknown = [r for r in names if row_of(r) not in ROWS]
    if unknown or not names:
        raise UsageError(f"unknown row(s) {', '.join(unknown) or '(none given)'}; the rows are: {', '.join(ROWS)} "
                         f"(and replicas at other seeds, e.g. base{REPLICA}2)")
    return sorted(dict.fromkeys(names), key=lambda n: (ROWS.index(row_of(n)), -1 if replica_seed(n) is None
                                                       else replica_seed(n)))


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
        paper, ours = shape(ModelConfig.preset(row_of(n))), shape(scaled_preset(n, scale))[:6]
        pos = " learned pos." if ModelConfig.preset(row_of(n)).positional == "learned" else ""
        lines.append(f"| {n}{pos} | " + " | ".join(map(str, paper)) + " | " + " | ".join(map(str, ours)) + " |")
    return "\n".join(lines)
