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

import torch
from tqdm import tqdm

from aiayn.config import EOS_ID, PAD_ID
from aiayn.search import Hypothesis, beam_search, greedy_search


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


def translate_ids(model, sources: Sequence[list[int] | None], beam: int = 4, alpha: float = 0.6,
                  max_len_a: float = 1.0, max_len_b: int = 50, min_len: int = 1, nbest: int = 1,
                  batch_size: int = 64, bf16: bool = False, lp_kind: str = "gnmt",
                  device: str | torch.device = "cpu", progress: bool = False) -> list[list[Hypothesis]]:
    """Search every source (ids with EOS; None = blank) in length-sorted batches; answers in input order.
    beam 1 is greedy search. A blank source gets one empty hypothesis of score 0."""
    cfg = model.cfg
    max_len = cfg.max_positions - 1 if cfg.positional == "learned" else None  # BOS + words < table size
    results: list[list[Hypothesis]] = [[Hypothesis([], 0.0, [])] for _ in sources]
    order = sorted((i for i, s in enumerate(sources) if s is not None), key=lambda i: -len(sources[i]))
    model = inference_model(model, torch.bfloat16 if bf16 else None)
    bar = tqdm(total=len(order), unit=" sent", disable=not progress, file=sys.stderr)
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            idx = order[start: start + batch_size]
            width = max(len(sources[i]) for i in idx)
            src = torch.full((len(idx), width), PAD_ID, dtype=torch.long)
            for row, i in enumerate(idx):
                src[row, : len(sources[i])] = torch.tensor(sources[i])
            src = src.to(device)
            if beam == 1:
                hyps = greedy_search(model, src, max_len_a, max_len_b, min_len, max_len, alpha, lp_kind)
            else:
                hyps = beam_search(model, src, beam, alpha, max_len_a, max_len_b, nbest, min_len, max_len,
                                   lp_kind)
            for i, h in zip(idx, hyps):  # empty only if the model gave EOS probability 0 at the limit
                results[i] = h or [Hypothesis([], float("-inf"), [])]
            bar.update(len(idx))
    bar.close()
    return results


def translate_lines(model, vocab, lines: Sequence[str], max_input_len: int | None = None,
                    **search) -> list[list[tuple[str, float]]]:
    """Detokenized (text, score) n-best lists, best first, one per input line. `search`: see translate_ids."""
    limit = max_input_len or model.cfg.max_positions
    hyps = translate_ids(model, encode_sources(vocab, lines, limit), **search)
    return [[(vocab.decode(h.tokens), h.score) for h in hs] for hs in hyps]


# ---------------------------------------------------------------------------------------------------------
# CLI


def _translate_command(args: argparse.Namespace) -> int:
    from aiayn.checkpoint import load_for_inference

    if not 1 <= args.nbest <= args.beam:
        print(f"error: --nbest must lie in 1..--beam ({args.beam}), got {args.nbest}", file=sys.stderr)
        return 2
    model, vocab, cfg = load_for_inference(args.checkpoint, device=args.device)
    if args.bf16:
        model.to(torch.bfloat16)  # in place: the fp32 weights are not needed again (translate_ids would copy)
    if args.input in (None, "-"):
        lines = [line.rstrip("\r\n") for line in sys.stdin]
    else:
        with open(args.input, encoding="utf-8") as f:
            lines = [line.rstrip("\r\n") for line in f]
    nbests = translate_lines(
        model, vocab, lines, args.max_input_len, beam=args.beam, alpha=args.alpha, max_len_a=args.max_len_a,
        max_len_b=args.max_len_b, min_len=args.min_len, nbest=args.nbest, batch_size=args.batch_size,
        bf16=args.bf16, lp_kind=args.lp, device=args.device,
        progress=args.input not in (None, "-") and not args.quiet,
    )
    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    try:
        for n, hyps in enumerate(nbests):
            if args.nbest == 1:
                out.write(hyps[0][0] + "\n")
            else:  # Moses n-best format: input line number (from 0) ||| text ||| score
                out.writelines(f"{n} ||| {text} ||| {score:.4f}\n" for text, score in hyps)
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


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
    p.add_argument("--beam", type=int, default=4, help="beam size (default 4); 1 = greedy search")
    p.add_argument("--alpha", type=float, default=0.6, help="length penalty alpha (default 0.6)")
    p.add_argument("--lp", choices=["gnmt", "power"], default="gnmt",
                   help="length penalty: gnmt ((5+|Y|)/6)^alpha (paper, default) or power |Y|^alpha")
    p.add_argument("--max-len-a", type=float, default=1.0, help="max output words = a * input tokens + b")
    p.add_argument("--max-len-b", type=int, default=50)
    p.add_argument("--min-len", type=int, default=1, help="EOS banned before this many words (default 1)")
    p.add_argument("--nbest", type=int, default=1,
                   help="hypotheses per input; >1 prints 'LINE ||| TEXT ||| SCORE' lines (Moses n-best)")
    p.add_argument("--batch-size", type=int, default=64, help="sentences per batch (default 64)")
    p.add_argument("--max-input-len", type=int, default=None,
                   help="longer inputs (subword tokens + EOS) are cut, with a warning (default: the "
                        "model's max_positions)")
    p.add_argument("--bf16", action="store_true", help="decode in bfloat16 (a bf16 copy of the weights)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_translate_command)
