"""`aiayn attention`: one sentence's attention maps as the paper's appendix draws them (aiayn.viz.attention)."""

from __future__ import annotations

import argparse
from pathlib import Path

from aiayn.cli.common import add_device_arg, add_precision_arg, add_search_args, non_negative_int, search_config
from aiayn.decoding.engine import EngineOptions, open_engine
from aiayn.errors import UsageError
from aiayn.extras import require


def parse_heads(text: str | None) -> list[int] | None:
    """'0,2,3' -> [0, 2, 3]; None -> None (all heads)."""
    if text is None:
        return None
    try:
        return [int(h) for h in text.split(",")]
    except ValueError:
        raise UsageError(f"--heads {text!r}: give head numbers separated by commas, e.g. --heads 0,1") from None


def attention_command(args: argparse.Namespace) -> int:
    require("aiayn attention", "viz")
    from aiayn.viz.attention import attention_data, write_all

    heads = parse_heads(args.heads)
    translator = open_engine(args.checkpoint, EngineOptions(engine="aiayn", search=search_config(args),
                                                            precision=args.precision, device=args.device))
    data = attention_data(translator, None, args.src, args.tgt)
    files = write_all(data, Path(args.out), args.layer, heads)
    print(f"source: {data['src']}")
    print(f"target ({data['tgt_source']}): {data['tgt']}")
    print(f"wrote {len(files)} files to {args.out}: open {files[1]} in a browser (it needs no network)")
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "attention", help="attention maps of one sentence: PNGs, attention.json, an offline HTML page",
        description="Run the model on one sentence, teacher-forced on --tgt or on its own beam-search output, and "
                    "write to --out: attention.html (one self-contained page: choose the kind, layer and heads; "
                    "line and matrix views), attention.json, {encoder,decoder,cross}_layerL.png (every head of each "
                    "layer) and lines_{kind}_layerL.png (the paper's appendix view of --layer, --heads). Layers "
                    "and heads are numbered from 0.")
    p.add_argument("--checkpoint", required=True, help="run directory or checkpoint file")
    p.add_argument("--src", required=True, help="the source sentence")
    p.add_argument("--tgt", help="the translation to show (default: the model's own, by beam search)")
    p.add_argument("--out", required=True, help="folder for the files (created if missing)")
    p.add_argument("--layer", type=non_negative_int, default=None,
                   help="layer of the line figures, from 0 (default: the second from the top, as the paper's "
                        "layer 5 of 6)")
    p.add_argument("--heads", help="heads of the line figures, e.g. 0,2 (default: all)")
    add_search_args(p)
    add_precision_arg(p)
    add_device_arg(p)
    p.set_defaults(func=attention_command)
