"""What each budget of `aiayn paper` runs: the options it hands to the experiments' own functions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiayn.errors import UsageError


@dataclass(frozen=True)
class Budget:
    name: str
    about: str  # one line at the top of the report
    table1: dict[str, Any]  # options of aiayn.experiments.table1.measure_table1
    translation: dict[str, Any]  # options of aiayn.quickstart.quickstart
    table3: dict[str, Any]  # options of aiayn.experiments.table3.runner.train_variations
    parser: dict[str, Any]  # with --treebank: preset, model and train overrides, prepare-parse and decoding options
    attention_beam: int = 4  # beam of the translations the attention figures are drawn on
    smoke: bool = False
    not_run: tuple[str, ...] = field(default=())  # parts this budget leaves to --from


# A model that trains a few steps in seconds on one core: every part runs end to end, nothing learns.
_TINY = {"n_enc_layers": 2, "n_dec_layers": 2, "d_model": 64, "d_ff": 128, "n_heads": 4, "d_k": 16, "d_v": 16}

# configs/ptb-parse.yaml's recipe (docs/parsing.md): words as leaves, pre-norm, P_drop 0.3, annealed; beam 21,
# alpha 0.3 (section 6.3); the average of the last 5 checkpoints.
_PARSER_CPU = {"preset": "parse-small", "model": {"dropout": 0.3, "norm_first": True}, "vocab_size": 2000,
               "beam": 21, "alpha": 0.3, "average_last": 5, "dev_sentences": None,
               "train": {"max_tokens": 2048, "warmup": 600, "lr_factor": 1.5, "anneal": 0.3, "max_minutes": 115.0,
                         "max_steps": 1_000_000, "save_every_minutes": 5.0, "keep_last": 12, "dtype": "auto"}}

BUDGETS: dict[str, Budget] = {
    "smoke": Budget(
        "smoke", "SMOKE RUN: tiny models trained for a few steps, to check that every part runs; no number here "
                 "says anything about the paper",
        table1={"quick": True, "d": 64, "r": 16, "max_n": 128, "fit_from": 64},
        translation={"max_steps": 40, "vocab_size": 1000, "test_sentences": 40, "beam": 2, "warmup": 20,
                     "max_tokens": 1024, "dtype": "fp32", "model": _TINY},
        table3={"rows": "base,C1,C2", "scale": 16, "steps": 20, "dev_sentences": 4, "threads": 1,
                "train": {"max_tokens": 1024, "warmup": 20, "dtype": "fp32"}},
        parser={"preset": "tiny", "model": {"dropout": 0.0}, "vocab_size": 60, "beam": 1, "alpha": 0.3,
                "average_last": 1, "dev_sentences": 20,
                "train": {"max_steps": 30, "max_tokens": 1024, "warmup": 20, "save_every_steps": 30,
                          "save_every_minutes": 0.0, "keep_last": 1, "threads": 1, "dtype": "fp32"}},
        attention_beam=1, smoke=True),
    "cpu": Budget(
        "cpu", "a night on 2 CPU cores: Table 1 at the paper's width, a 60-minute translation model, Table 3's 20 "
               "rows and 2 seed replicas at scale 1/8 in about 7 hours of training (with --treebank, a parser "
               "trained 115 minutes)",
        table1={},
        translation={"minutes": 60.0, "dtype": "auto"},
        table3={"rows": "all,base@seed2,base@seed3", "scale": 8, "minutes": 420.0, "jobs": 2,
                "backbone": {"norm_first": True},
                "train": {"max_tokens": 4096, "warmup": 400, "lr_factor": 0.5, "anneal": 0.3, "dtype": "fp32",
                          "save_every_minutes": 0.0, "save_every_steps": 100}},
        parser=_PARSER_CPU),
    "gpu": Budget(
        "gpu", "one GPU hour: Table 1, a 10-minute translation model, Table 3's 20 rows and 2 seed replicas at "
               "scale 1/4, 8 at a time, in about 40 minutes of training",
        table1={},
        translation={"minutes": 10.0, "dtype": "auto", "preset": "base"},
        table3={"rows": "all,base@seed2,base@seed3", "scale": 4, "minutes": 40.0, "jobs": 8,
                "backbone": {"norm_first": True},
                "train": {"max_tokens": 8192, "warmup": 1000, "anneal": 0.3, "dtype": "auto",
                          "save_every_minutes": 0.0, "save_every_steps": 100}},
        parser={**_PARSER_CPU, "preset": "parse", "train": {**_PARSER_CPU["train"], "max_minutes": 15.0,
                                                            "max_tokens": 8192}}),
}


def budget(name: str) -> Budget:
    if name not in BUDGETS:
        raise UsageError(f"--budget {name!r}: the budgets are {', '.join(BUDGETS)}")
    return BUDGETS[name]
