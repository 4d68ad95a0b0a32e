"""`aiayn evaluate`: BLEU (sacreBLEU and the paper's tokenized kind), chrF, and a checkpoint's perplexity; two or more
systems compared by a paired significance test (aiayn.metrics.significance)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from aiayn.cli.common import add_device_arg, add_language_args, positive_int
from aiayn.data import load_split
from aiayn.data.vocab import MODEL_FILE
from aiayn.errors import DataError, UsageError
from aiayn.files import read_lines, sha256_file
from aiayn.metrics import chrf, corpus_bleu, perplexity, tokenized_bleu
from aiayn.metrics.significance import format_comparison, paired_significance
from aiayn.rundir import load_for_inference
from aiayn.runtime import resolve_device


def _guess_lang(ref: str) -> str:
    """Language from the reference's suffix (newstest2014.de -> de), else English."""
    suffix = Path(ref).suffix.lstrip(".")
    return suffix if len(suffix) == 2 and suffix.isalpha() else "en"


def _evaluate_parse(args: argparse.Namespace) -> int:
    from aiayn.metrics.evalb import parse_report, score_parses

    if not (args.hyp and args.ref) or len(args.hyp) > 1:
        raise UsageError("--task parse needs one --hyp TREES and --ref GOLD_TREES (one bracketed tree per line)")
    refs = read_lines(args.ref)
    hyps = _aligned(args.hyp[0], refs, args.ref)
    try:
        result = score_parses(hyps, refs)
    except ValueError as e:
        raise DataError(f"{args.hyp} / {args.ref}: {e}") from None
    print(parse_report(result), end="")
    return 0


def _aligned(hyp: str, refs: list[str], ref: str) -> list[str]:
    hyps = read_lines(hyp)
    if len(hyps) != len(refs):
        raise DataError(f"{hyp} has {len(hyps)} lines but {ref} has {len(refs)}; they must be line-aligned")
    return hyps


def _short_names(paths: list[str]) -> tuple[str, list[str]]:
    """(their common folder, the paths relative to it), so that the table stays narrow."""
    try:
        folder = os.path.commonpath([os.path.dirname(path) for path in paths])
    except ValueError:  # absolute and relative paths mixed
        return "", paths
    return folder, [os.path.relpath(path, folder) if folder else path for path in paths]


def _check_systems(args: argparse.Namespace) -> None:
    """One --hyp is scored; two or more are compared by a paired test, which needs them."""
    paired = "--paired-bs" if args.paired_bs else "--paired-ar" if args.paired_ar else None
    if paired and len(args.hyp) < 2:
        raise UsageError(f"{paired} compares two or more systems: give --hyp BASELINE --hyp SYSTEM [--hyp ...] "
                         "(the first --hyp is the baseline)")
    if len(args.hyp) > 1 and not paired:
        raise UsageError("two or more --hyp are compared by a paired test: add --paired-bs (bootstrap resampling) "
                         "or --paired-ar (approximate randomization)")
    twice = sorted({h for h in args.hyp if args.hyp.count(h) > 1})
    if twice:
        raise UsageError(f"--hyp {twice[0]} is given twice; give each system once")


def _print_metrics(hyps: list[str], refs: list[str], lang: str, split: bool) -> None:
    bleu, ch = corpus_bleu(hyps, refs), chrf(hyps, refs)
    tok = tokenized_bleu(hyps, refs, lang, compound_split=split)
    print(f"sacreBLEU       {bleu.score:6.2f}  {bleu.line}")
    print(f"  signature     {bleu.signature}")
    print(f"chrF            {ch.score:6.2f}  signature {ch.signature}")
    kind = "Moses-tokenized" + (", compound-split" if split else "")
    print(f"tokenized BLEU  {tok.score:6.2f}  ({kind}, lang {lang}; the paper's kind of number)")
    print(f"                {tok.line}")


def _evaluate_translation(args: argparse.Namespace) -> None:
    if not args.ref:
        raise UsageError("--hyp needs --ref")
    _check_systems(args)
    refs = read_lines(args.ref)
    systems = {hyp: _aligned(hyp, refs, args.ref) for hyp in args.hyp}
    lang = args.target_lang or _guess_lang(args.ref)
    split = not args.no_compound_split and lang == "de"
    if len(systems) == 1:
        _print_metrics(systems[args.hyp[0]], refs, lang, split)
        return
    folder, names = _short_names(args.hyp)
    test = "bs" if args.paired_bs else "ar"
    comparison = paired_significance({name: systems[hyp] for name, hyp in zip(names, args.hyp)}, refs,
                                     n=args.paired_bs_n if test == "bs" else args.paired_ar_n, seed=args.seed,
                                     metrics=("bleu", "chrf", "tokenized_bleu"), test=test, ci_n=args.paired_bs_n,
                                     lang=lang, compound_split=split)
    if folder:
        print(f"systems: the --hyp files in {os.path.join(folder, '')}")
    print(format_comparison(comparison))


def evaluate_command(args: argparse.Namespace) -> int:
    if args.task == "parse":
        return _evaluate_parse(args)
    if not (args.hyp or args.checkpoint):
        raise UsageError("give --hyp FILE --ref FILE (BLEU, chrF) and/or --checkpoint C --data DIR (perplexity)")
    if args.hyp:
        _evaluate_translation(args)
    if args.checkpoint:
        if not args.data:
            raise UsageError("--checkpoint needs --data DIR (a prepared-data directory)")
        pairs = load_split(args.data, args.split)
        model, vocab, _ = load_for_inference(args.checkpoint, device=resolve_device(args.device))
        if sha256_file(vocab.model_path) != sha256_file(Path(args.data) / MODEL_FILE):
            raise DataError(f"{args.data} was prepared with another vocabulary than the model's ({vocab.model_path}): "
                            "its token ids mean other pieces, so the perplexity would be meaningless; prepare the "
                            "text with `aiayn prepare ... --vocab RUN`")
        res = perplexity(model, pairs, args.max_tokens)
        print(f"perplexity      {res.ppl:6.3f}  per token on {args.data} {args.split} "
              f"({res.tokens:,} target tokens incl. EOS, mean NLL {res.nll / res.tokens:.4f} nats)")
    return 0


def register(sub) -> None:
    p = sub.add_parser("evaluate", help="BLEU (sacreBLEU and the paper's tokenized kind), chrF, perplexity",
                       description="Measure translations against references (sacreBLEU with signature, chrF, "
                                   "tokenized BLEU as in the paper) and/or a checkpoint's per-token "
                                   "perplexity; compare two or more systems on the same references with "
                                   "a paired significance test (--paired-bs, --paired-ar). Tokenized BLEU "
                                   "tokenizes as Moses does for --target-lang, the hypotheses' language (default: "
                                   "the --ref file's two-letter suffix, as test.de, else en); de also splits "
                                   "compounds, as the paper.")
    p.add_argument("--task", choices=["translation", "parse"], default="translation",
                   help="parse: --hyp/--ref are bracketed trees; prints EVALB's (COLLINS.prm) F1 and summary")
    p.add_argument("--hyp", action="append",
                   help="detokenized system output, one sentence per line; give it two or more times with "
                        "--paired-bs or --paired-ar to compare systems (the first --hyp is the baseline)")
    p.add_argument("--ref", help="detokenized reference, line-aligned with --hyp")
    test = p.add_mutually_exclusive_group()
    test.add_argument("--paired-bs", action="store_true",
                      help="compare each --hyp with the first by paired bootstrap resampling (sacreBLEU's): "
                           "scores, 95%% confidence intervals, p-values")
    test.add_argument("--paired-ar", action="store_true",
                      help="the same by paired approximate randomization (sacreBLEU's); the intervals still come "
                           "from bootstrap resampling")
    p.add_argument("--paired-bs-n", type=positive_int, default=1000,
                   help="bootstrap resamples: the test's with --paired-bs, the intervals' with --paired-ar "
                        "(default 1000)")
    p.add_argument("--paired-ar-n", type=positive_int, default=10000,
                   help="approximate randomization trials (default 10000)")
    p.add_argument("--seed", type=positive_int, default=12345,
                   help="seed of the paired test's resampling (default 12345, as sacreBLEU)")
    add_language_args(p, source=False)
    p.add_argument("--no-compound-split", action="store_true", help="no ##AT## compound splitting for German")
    p.add_argument("--checkpoint", help="run directory or checkpoint file, for --data perplexity")
    p.add_argument("--data", help="prepared-data directory (aiayn prepare)")
    p.add_argument("--split", default="test", help="split of --data to score (default test)")
    p.add_argument("--max-tokens", type=positive_int, default=4096,
                   help="padded tokens per batch, raised to the longest pair (default 4096)")
    add_device_arg(p)
    p.set_defaults(func=evaluate_command)
