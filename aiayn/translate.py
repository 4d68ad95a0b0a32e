"""`aiayn translate`: text in, detokenized translations out, one line per input line, in input order.

Sentences are sorted by length and searched in batches (less padding); the answers are put back in
input order. Rules for awkward input (docs/decoding.md):
    * an empty (or all-blank) line gives an empty line, without running the model;
    * a line longer than --max-input-len subword tokens (EOS included; default the model's max_positions)
      is cut to that length, with a warning naming the line on stderr; it is never an error.
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import torch
from tqdm import tqdm

from aiayn.config import EOS_ID, PAD_ID
from aiayn.search import PAPER_SEARCH, Constraint, Hypothesis, SearchConfig, beam_search, greedy_search


def _warn(msg: str) -> None:
    print(f"warning: {msg}", file=sys.stderr)


def encode_sources(vocab, lines: Sequence[str], max_input_len: int) -> list[list[int] | None]:
    """Source ids (+ EOS) per line, cut to max_input_len tokens; None for a blank line."""
    out: list[list[int] | None] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            out.append(None)
            continue
        ids = vocab.encode(line) + [EOS_ID]
        if len(ids) > max_input_len:
            _warn(f"input line {n} has {len(ids)} tokens, more than --max-input-len {max_input_len}; "
                  f"translating its first {max_input_len - 1} tokens only")
            ids = ids[: max_input_len - 1] + [EOS_ID]
        out.append(ids)
    return out


def inference_model(model, dtype: torch.dtype | None = None):
    """The model to decode with, in eval mode: `model` itself, or for another dtype (bf16) a copy with every
    weight converted once. Decoding a bf16 copy instead of running fp32 weights under autocast saves the
    weight casts autocast repeats at every step (it cannot keep them across steps under inference_mode):
    ~13 % of a bf16 beam-search batch (benchmarks/profile_step.py --what beam). LayerNorm and the final
    log-softmax still accumulate in fp32; the attention softmax runs in fp32 (model.scaled_dot_product_attention)."""
    if dtype is None or next(model.parameters()).dtype == dtype:
        return model.eval()
    return copy.deepcopy(model).to(dtype).eval()


class Translation(NamedTuple):
    """One hypothesis for one input line: detokenized text, normalized score, subword ids (no BOS/EOS)."""

    text: str
    score: float
    tokens: list[int]


class Translator:
    """A model, its vocabulary and how to search: text in, text out. What the CLI, the quickstart, the server,
    the attention views and the exporters share.

    Sentences are sorted by length and searched in batches of `batch_size` (less padding); answers come back in
    input order. `constraint` (see aiayn.search.Constraint) restricts what the search may generate."""

    def __init__(self, model, vocab, search: SearchConfig = PAPER_SEARCH, device: str | torch.device = "cpu",
                 batch_size: int = 64, max_input_len: int | None = None, constraint: Constraint | None = None):
        self.vocab, self.search, self.device = vocab, search, torch.device(device)
        self.model = inference_model(model.to(self.device), torch.bfloat16 if search.dtype == "bf16" else None)
        self.cfg = model.cfg
        self.batch_size = batch_size
        self.max_input_len = max_input_len or self.cfg.max_positions
        self.constraint = constraint

    @classmethod
    def load(cls, checkpoint: str | Path, search: SearchConfig = PAPER_SEARCH, device: str = "cpu",
             **kw) -> Translator:
        """From a run directory (its averaged, else best, else newest checkpoint) or a checkpoint file."""
        from aiayn.checkpoint import load_for_inference

        model, vocab, _ = load_for_inference(checkpoint, device=device)
        if search.dtype == "bf16":
            model.to(torch.bfloat16)  # in place: the fp32 weights are not needed again
        return cls(model, vocab, search, device=device, **kw)

    def encode(self, lines: Sequence[str]) -> list[list[int] | None]:
        return encode_sources(self.vocab, lines, self.max_input_len)

    def search_ids(self, sources: Sequence[list[int] | None], progress: bool = False) -> list[list[Hypothesis]]:
        """Search every source (ids with EOS; None = blank) in length-sorted batches; answers in input order.
        A blank source gets one empty hypothesis of score 0."""
        cfg, search = self.cfg, self.search
        max_len = cfg.max_positions - 1 if cfg.positional == "learned" else None  # BOS + words < table size
        results: list[list[Hypothesis]] = [[Hypothesis([], 0.0, [])] for _ in sources]
        order = sorted((i for i, s in enumerate(sources) if s is not None), key=lambda i: -len(sources[i]))
        decode = greedy_search if search.beam == 1 else beam_search
        bar = tqdm(total=len(order), unit=" sent", disable=not progress, file=sys.stderr)
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                idx = order[start: start + self.batch_size]
                width = max(len(sources[i]) for i in idx)
                src = torch.full((len(idx), width), PAD_ID, dtype=torch.long)
                for row, i in enumerate(idx):
                    src[row, : len(sources[i])] = torch.tensor(sources[i])
                constraint = None
                if self.constraint is not None:  # the constraint sees original line numbers
                    rows = torch.tensor(idx, device=self.device)
                    constraint = (lambda c, r: lambda sent, prefix: c(r[sent], prefix))(self.constraint, rows)
                hyps = decode(self.model, src.to(self.device), search, max_len, constraint)
                for i, h in zip(idx, hyps):  # empty only if the model gave EOS probability 0 at the limit
                    results[i] = h or [Hypothesis([], float("-inf"), [])]
                bar.update(len(idx))
        bar.close()
        return results

    def translate_nbest(self, lines: Sequence[str], progress: bool = False) -> list[list[Translation]]:
        """Up to search.nbest translations per line, best first."""
        hyps = self.search_ids(self.encode(lines), progress)
        return [[Translation(self.vocab.decode(h.tokens), h.score, h.tokens) for h in hs] for hs in hyps]

    def translate(self, lines: Sequence[str], progress: bool = False) -> list[str]:
        """The best translation of each line."""
        return [hs[0].text for hs in self.translate_nbest(lines, progress)]


# ---------------------------------------------------------------------------------------------------------
# CLI


def _translate_command(args: argparse.Namespace) -> int:
    try:
        search = search_config_from_args(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    translator = Translator.load(args.checkpoint, search, device=args.device, batch_size=args.batch_size,
                                 max_input_len=args.max_input_len)
    if args.input in (None, "-"):
        lines = [line.rstrip("\r\n") for line in sys.stdin]
    else:
        with open(args.input, encoding="utf-8") as f:
            lines = [line.rstrip("\r\n") for line in f]
    nbests = translator.translate_nbest(lines, progress=args.input not in (None, "-") and not args.quiet)
    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    try:
        for n, hyps in enumerate(nbests):
            if search.nbest == 1:
                out.write(hyps[0].text + "\n")
            else:  # Moses n-best format: input line number (from 0) ||| text ||| score
                out.writelines(f"{n} ||| {h.text} ||| {h.score:.4f}\n" for h in hyps)
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


def add_search_args(p: argparse.ArgumentParser, defaults: SearchConfig = PAPER_SEARCH) -> None:
    """The decoding flags, one spelling for every command that decodes (defaults: the paper's, or `defaults`)."""
    g = p.add_argument_group("search")
    g.add_argument("--beam", type=int, default=defaults.beam, help=f"beam size (default {defaults.beam}); 1 = greedy")
    g.add_argument("--alpha", type=float, default=defaults.alpha,
                   help=f"length penalty alpha (default {defaults.alpha})")
    g.add_argument("--lp", choices=["gnmt", "power"], default=defaults.lp,
                   help="length penalty: gnmt ((5+|Y|)/6)^alpha (paper) or power |Y|^alpha "
                        f"(default {defaults.lp})")
    g.add_argument("--max-len-a", type=float, default=defaults.max_len_a,
                   help="max output words = a * input tokens + b")
    g.add_argument("--max-len-b", type=int, default=defaults.max_len_b)
    g.add_argument("--min-len", type=int, default=defaults.min_len,
                   help=f"EOS banned before this many words (default {defaults.min_len})")
    g.add_argument("--nbest", type=int, default=defaults.nbest,
                   help="hypotheses per input; >1 prints 'LINE ||| TEXT ||| SCORE' lines (Moses n-best)")
    g.add_argument("--bf16", action="store_true", help="decode in bfloat16 (a bf16 copy of the weights)")


def search_config_from_args(args: argparse.Namespace) -> SearchConfig:
    return SearchConfig(beam=args.beam, alpha=args.alpha, lp=args.lp, max_len_a=args.max_len_a,
                        max_len_b=args.max_len_b, min_len=args.min_len, nbest=args.nbest,
                        dtype="bf16" if args.bf16 else "fp32")


def register_cli(sub) -> None:
    p = sub.add_parser("translate", help="translate text with a trained model (beam search as the paper)",
                       description="Translate stdin or --input, one sentence per line, to detokenized text "
                                   "(one line per input line, same order). Defaults are the paper's: beam 4, "
                                   "length penalty alpha 0.6, max output length = input length + 50.")
    p.add_argument("--checkpoint", required=True,
                   help="run directory (its averaged, else best, else newest checkpoint) or a checkpoint "
                        "file")
    p.add_argument("--input", help="input file (default: stdin); a progress bar is shown for files")
    p.add_argument("--output", help="output file (default: stdout)")
    p.add_argument("--batch-size", type=int, default=64, help="sentences per batch (default 64)")
    p.add_argument("--max-input-len", type=int, default=None,
                   help="longer inputs (subword tokens + EOS) are cut, with a warning (default: the "
                        "model's max_positions)")
    add_search_args(p)
    p.add_argument("--device", default="cpu")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_translate_command)
