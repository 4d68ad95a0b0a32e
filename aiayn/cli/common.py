"""Flags shared by several commands, spelled one way everywhere; the one place numeric flags get their ranges
(`number(...)` and its shorthands positive_int, non_negative_int, ...: argparse types checked at parse time).
Commands read text lines with aiayn.files.read_lines (a bad byte names the file, or stdin, and the line).

One vocabulary in every command (tests/test_cli_vocabulary.py holds them to it): --device (add_device_arg, default
auto), --source-lang/--target-lang (add_language_args), --out for a folder and --output for a file, --precision for
decoding's number format."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections.abc import Callable
from typing import Any

from aiayn.config import DEVICE_HELP, PAPER_SEARCH, PRECISIONS, SearchConfig
from aiayn.errors import UsageError


class Parser(argparse.ArgumentParser):
    """argparse, but a mistake in the flags is one line "error: ..." and exit 2, like every other error of aiayn
    (argparse's own prints the usage first). Subcommand parsers inherit the class."""

    def error(self, message: str):
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def low_memory(args: argparse.Namespace) -> bool:
    """Whether freed memory goes back to the OS (`aiayn --low-memory ...` or AIAYN_LOW_MEMORY=1) instead of being
    kept for reuse, aiayn's default."""
    return bool(getattr(args, "low_memory", False)) or os.environ.get("AIAYN_LOW_MEMORY") == "1"


def number(kind: type, low: float | None = None, above: float | None = None, below: float | None = None
           ) -> Callable[[str], Any]:
    """An argparse type: `kind` (int or float) with value >= low, > above, < below (those given), else a one-line
    error that says the allowed range. The range is kept on the function (.low, .above, .below) for tests."""
    bounds = [f"{op} {b}" for op, b in ((">=", low), (">", above), ("<", below)) if b is not None]
    want = " ".join(["an integer" if kind is int else "a number", " and ".join(bounds)]).strip()

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {want}, got {text!r}") from None
        if (value != value or (low is not None and value < low) or (above is not None and value <= above)
                or (below is not None and value >= below)):  # value != value: NaN
            raise argparse.ArgumentTypeError(f"must be {want}, got {text}")
        return value

    parse.low, parse.above, parse.below = low, above, below
    return parse


positive_int = number(int, low=1)
non_negative_int = number(int, low=0)
positive_float = number(float, above=0)
non_negative_float = number(float, low=0)


def add_device_arg(p: argparse.ArgumentParser, default: str = "auto") -> None:
    """--device, as every command that runs a model takes it (read with aiayn.runtime.resolve_device)."""
    p.add_argument("--device", default=default, help=f"{DEVICE_HELP} (default {default})")


LANGUAGE_HELP = ("ISO 639 code of the {side} language, e.g. {example} (default: the data's, as the description above "
                 "says)")


def add_language_args(p: argparse.ArgumentParser, source: bool = True) -> dict[str, argparse.Action]:
    """--source-lang (unless source=False) and --target-lang, as every command that takes a language spells and
    explains them; {flag: its action}."""
    sides = [("source", "en")] if source else []
    return {f"--{side}-lang": p.add_argument(f"--{side}-lang", metavar="CODE",
                                             help=LANGUAGE_HELP.format(side=side, example=example))
            for side, example in [*sides, ("target", "de")]}


CHECKPOINT_HELP = "run directory (its averaged, else best, else newest checkpoint) or a checkpoint file"


def add_checkpoint_arg(p: argparse.ArgumentParser) -> None:
    """--checkpoint, as every command that loads one trained model takes it."""
    p.add_argument("--checkpoint", required=True, help=CHECKPOINT_HELP)


def add_progress_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-progress", action="store_true", help="no progress bar (in a log: no progress lines)")


def add_search_args(p: argparse.ArgumentParser, defaults: SearchConfig = PAPER_SEARCH, sampling: bool = False
                    ) -> None:
    """The decoding flags of every command that decodes (defaults: the paper's, or `defaults`); sampling: the
    sampling flags too (commands that print translations)."""
    g = p.add_argument_group("search")
    g.add_argument("--beam", type=positive_int, default=defaults.beam,
                   help=f"beam size (default {defaults.beam}); 1 = greedy")
    g.add_argument("--alpha", type=non_negative_float, default=defaults.alpha,
                   help=f"length penalty alpha (default {defaults.alpha})")
    g.add_argument("--lp", choices=["gnmt", "power"], default=defaults.lp,
                   help=f"length penalty: gnmt ((5+|Y|)/6)^alpha (paper) or power |Y|^alpha (default {defaults.lp})")
    g.add_argument("--max-len-a", type=non_negative_float, default=defaults.max_len_a,
                   help=f"max output words = a * input tokens + b (default a = {defaults.max_len_a})")
    g.add_argument("--max-len-b", type=non_negative_int, default=defaults.max_len_b,
                   help=f"(default b = {defaults.max_len_b})")
    g.add_argument("--min-len", type=non_negative_int, default=defaults.min_len,
                   help=f"EOS banned before this many words (default {defaults.min_len})")
    g.add_argument("--nbest", type=positive_int, default=defaults.nbest,
                   help="hypotheses per input (<= --beam; with --sampling: samples per input); >1 prints "
                        "'LINE ||| TEXT ||| SCORE' lines (Moses n-best)")
    g.add_argument("--beam-patience", type=non_negative_float, default=defaults.beam_patience,
                   help="stop a sentence's beam search once beam x P hypotheses have finished (fairseq's rule at 1, "
                        "CTranslate2's patience; faster, may miss a longer, better translation); default "
                        f"{defaults.beam_patience:g}: when no live hypothesis can still win (the paper's)")
    g.add_argument("--no-repeat-ngram-size", type=non_negative_int, default=defaults.no_repeat_ngram_size,
                   help="ban a token that would repeat an n-gram of this size already in the output (0: off; "
                        f"default {defaults.no_repeat_ngram_size})")
    if not sampling:
        return
    g.add_argument("--sampling", action="store_true",
                   help="draw each token from the model's distribution instead of searching (--beam is not used; "
                        "--nbest N: N samples per input)")
    g.add_argument("--top-k", type=non_negative_int, default=0,
                   help="sampling: draw from the K most probable tokens only (default 0: all)")
    g.add_argument("--top-p", type=number(float, above=0), default=1.0,
                   help="sampling: draw from the nucleus only, the fewest most probable tokens of mass >= P, "
                        "in (0, 1] (default 1: all)")
    g.add_argument("--temperature", type=non_negative_float, default=1.0,
                   help="sampling: draw from softmax(log-probs / T); 0 = greedy (default 1)")
    g.add_argument("--seed", type=non_negative_int, default=0,
                   help="sampling: input line i draws from a generator seeded by (seed, i): the same output for "
                        "any --batch-size (default 0)")


def add_precision_arg(p: argparse.ArgumentParser) -> None:
    """--precision: the number format decoding runs the model in (aiayn.decoding.inference)."""
    p.add_argument("--precision", choices=PRECISIONS, default="fp32",
                   help="decode in fp32 (the weights as trained), bf16 (a bf16 copy of them) or int8 (int8 "
                        "projections, CPU: oneDNN's GEMM with VNNI, aiayn's own on AVX2; the environment's "
                        "AIAYN_INT8_ENGINE=aiayn|fbgemm|onednn chooses) (default fp32)")


def search_config(args: argparse.Namespace) -> SearchConfig:
    """The SearchConfig the search flags describe (its checks raise UsageError)."""
    sampling = {name: getattr(args, name) for name in ("sampling", "top_k", "top_p", "temperature", "seed")
                if hasattr(args, name)}
    return SearchConfig(beam=args.beam, alpha=args.alpha, lp=args.lp, max_len_a=args.max_len_a,
                        max_len_b=args.max_len_b, min_len=args.min_len, nbest=args.nbest,
                        beam_patience=args.beam_patience,
                        no_repeat_ngram_size=args.no_repeat_ngram_size, **sampling)


_TYPES = {"int": int, "float": float, "str": str}


def add_dataclass_args(p: argparse.ArgumentParser | Any, cls: type, skip: tuple[str, ...] = ()) -> None:
    """One flag per field of a config dataclass (--field-name), default None (= not given), help and allowed range
    (metadata "low" / "above", checked at parse time) from the field: the dataclass stays the one list of options."""
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        flag, help_ = "--" + f.name.replace("_", "-"), f.metadata.get("help", "")
        ranged = {k: f.metadata[k] for k in ("low", "above", "below") if f.metadata.get(k) is not None}
        # The range in --help as the error for a value outside it words it.
        bounds = " and ".join(f"{op} {ranged[k]}" for k, op in (("low", ">="), ("above", ">"), ("below", "<"))
                              if k in ranged)
        if f.metadata.get("choices"):
            p.add_argument(flag, choices=f.metadata["choices"], default=None, help=f"{help_} (default {f.default})")
        elif f.type == "bool":
            p.add_argument(flag, action="store_true", default=None, help=help_)
        elif f.type.startswith("tuple"):
            p.add_argument(flag, type=number(float, **ranged), nargs=2, default=None, metavar=("B1", "B2"),
                           help=f"{help_} (each {bounds})")
        elif f.type in ("int", "float") and ranged:
            p.add_argument(flag, type=number(_TYPES[f.type], **ranged), default=None,
                           help=f"{help_} ({bounds}; default {f.default})")
        else:
            p.add_argument(flag, type=_TYPES[f.type], default=None, help=f"{help_} (default {f.default})")


def given_fields(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The fields of `cls` whose flags were given on the command line."""
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if getattr(args, f.name, None) is not None}


def model_overrides(pairs: list[str] | None) -> dict[str, Any]:
    """--set FIELD=VALUE ... -> {field: value}; values are read as JSON where they parse (0.3, true, [1, 2])."""
    out: dict[str, Any] = {}
    for kv in pairs or []:
        key, eq, value = kv.partition("=")
        if not eq:
            raise UsageError(f"--set takes FIELD=VALUE, e.g. dropout=0.3; got {kv!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out
