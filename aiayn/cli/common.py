"""Flags shared by several commands, spelled one way everywhere."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from aiayn.search import PAPER_SEARCH, SearchConfig


def add_device_arg(p: argparse.ArgumentParser, default: str = "auto") -> None:
    p.add_argument("--device", default=default,
                   help=f"auto (a CUDA GPU if there is one, else CPU), cpu, cuda, cuda:N (default {default})")


def add_progress_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_search_args(p: argparse.ArgumentParser, defaults: SearchConfig = PAPER_SEARCH) -> None:
    """The decoding flags of every command that decodes (defaults: the paper's, or `defaults`)."""
    g = p.add_argument_group("search")
    g.add_argument("--beam", type=int, default=defaults.beam, help=f"beam size (default {defaults.beam}); 1 = greedy")
    g.add_argument("--alpha", type=float, default=defaults.alpha,
                   help=f"length penalty alpha (default {defaults.alpha})")
    g.add_argument("--lp", choices=["gnmt", "power"], default=defaults.lp,
                   help=f"length penalty: gnmt ((5+|Y|)/6)^alpha (paper) or power |Y|^alpha (default {defaults.lp})")
    g.add_argument("--max-len-a", type=float, default=defaults.max_len_a,
                   help=f"max output words = a * input tokens + b (default a = {defaults.max_len_a})")
    g.add_argument("--max-len-b", type=int, default=defaults.max_len_b, help=f"(default b = {defaults.max_len_b})")
    g.add_argument("--min-len", type=int, default=defaults.min_len,
                   help=f"EOS banned before this many words (default {defaults.min_len})")
    g.add_argument("--nbest", type=int, default=defaults.nbest,
                   help="hypotheses per input; >1 prints 'LINE ||| TEXT ||| SCORE' lines (Moses n-best)")
    g.add_argument("--dtype", choices=["fp32", "bf16", "int8"], default=defaults.dtype,
                   help="fp32; bf16 (a bf16 copy of the weights); int8 (int8 projections, CPU) (default "
                        f"{defaults.dtype})")


def search_config(args: argparse.Namespace) -> SearchConfig:
    """The SearchConfig the search flags describe (its checks raise UsageError)."""
    return SearchConfig(beam=args.beam, alpha=args.alpha, lp=args.lp, max_len_a=args.max_len_a,
                        max_len_b=args.max_len_b, min_len=args.min_len, nbest=args.nbest,
                        dtype=args.dtype)


_TYPES = {"int": int, "float": float, "str": str}


def add_dataclass_args(p: argparse.ArgumentParser | Any, cls: type, skip: tuple[str, ...] = ()) -> None:
    """One flag per field of a config dataclass (--field-name), default None (= not given), help from the field's
    metadata: the dataclass stays the one list of options."""
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        flag, help_ = "--" + f.name.replace("_", "-"), f.metadata.get("help", "")
        if f.type == "bool":
            p.add_argument(flag, action="store_true", default=None, help=help_)
        elif f.type.startswith("tuple"):
            p.add_argument(flag, type=float, nargs=2, default=None, metavar=("B1", "B2"), help=help_)
        else:
            p.add_argument(flag, type=_TYPES[f.type], default=None, help=f"{help_} (default {f.default})")


def given_fields(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The fields of `cls` whose flags were given on the command line."""
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if getattr(args, f.name, None) is not None}
