"""`aiayn translate`: stdin or --input, one sentence per line -> detokenized translations, same order."""

from __future__ import annotations

import argparse
from dataclasses import replace

from aiayn.cli.common import (
    CHECKPOINT_HELP,
    add_device_arg,
    add_precision_arg,
    add_progress_arg,
    add_search_args,
    non_negative_int,
    number,
    positive_int,
    search_config,
)
from aiayn.config import SEARCH_IMPLS
from aiayn.decoding.alignment import format_alignment
from aiayn.decoding.engine import ENGINES, EngineOptions, open_engine
from aiayn.decoding.lines import SCORE_KINDS, join_lines, score_columns, split_lines, split_prefixes, token_scores
from aiayn.documents.command import check_document_args, is_document, translate_file_command
from aiayn.errors import UsageError
from aiayn.files import atomic_text_output, check_output_path, line_buffers, read_lines


def translate_command(args: argparse.Namespace) -> int:
    search = search_config(args)
    if args.print_scores is None and search.nbest == 1:  # greedy search then skips the log-softmax (same words)
        search = replace(search, scores=False)
    if args.alignment_layer is not None and not args.print_alignment:
        raise UsageError("--alignment-layer needs --print-alignment")
    if args.alignment_layer is not None and args.alignment == "lexical":
        raise UsageError("--alignment-layer chooses an attention layer: give --alignment attention, not lexical")
    if args.output not in (None, "-"):
        check_output_path(args.output)  # before the work, not after it
    prefix_lines = read_lines(args.prefix) if args.prefix else None
    options = engine_options(args, search, prefixes=prefix_lines is not None)
    if is_document(args.input):  # .docx, .srt ...: translated whole in its own format (docs/documents.md)
        check_document_args(args)
        return translate_file_command(args, open_engine(args.checkpoint, replace(options, alignments=True)))
    engine = open_engine(args.checkpoint, options)  # a feature the engine lacks: its one error, before loading
    if args.glossary and args.print_alignment:
        raise UsageError("--glossary changes the model's words, which --print-alignment describes: give one of them")
    glossary = None
    if args.glossary:
        from aiayn.decoding.glossary import Glossary  # imports torch: not for every --engine ct2

        glossary = Glossary.read(args.glossary)
    from aiayn.markup.lines import carry_nbests, needs_alignment, term_translations
    progress = args.input not in (None, "-") and not args.no_progress
    split = args.split_sentences and not args.print_alignment  # alignments are of whole lines
    # stdin: as lines arrive (a bad byte names the line); --prefix FILE: all at once, its lines aligned with them
    buffers = [read_lines(args.input)] if prefix_lines is not None else line_buffers(args.input, args.buffer_size)
    with atomic_text_output(args.output) as out:  # a file appears complete or not at all
        done = sentences = 0  # lines answered so far (the n-best format numbers lines across buffers); sentences
        for lines in buffers:
            lines, prefixes = split_prefixes(lines, prefix_lines)  # source<TAB>prefix
            if prefixes is not None and prefix_lines is None:  # a tab-separated column: the engine may lack it
                problem = engine.unsupported(replace(options, prefixes=True))
                if problem:
                    raise UsageError(problem)
            parts, part_prefixes, layouts = split_lines(lines, prefixes) if split else (lines, prefixes, None)
            # the lines with spans to carry ask for their alignments (--print-alignment: every line)
            ask = args.print_alignment or (needs_alignment(parts, glossary) if len(args.checkpoint) == 1 else False)
            nbests = engine.translate_nbest(parts, progress, part_prefixes, sentences, None, ask)
            if not args.print_alignment:  # numbers, symbols, terms carried (docs/decoding.md)
                nbests = carry_nbests(parts, nbests, glossary, lexicon=term_translations(engine, parts, glossary))
            nbests = join_lines(nbests, layouts) if split else nbests
            sentences += len(parts)
            for n, hyps in enumerate(nbests, done):
                out.writelines(_output_lines(n, hyps, search.nbest, args.print_scores))
            out.flush()  # a line typed into a pipe is answered now, not when stdin closes
            done += len(lines)
    return 0


def engine_options(args: argparse.Namespace, search, prefixes: bool = False) -> EngineOptions:
    """What `aiayn translate`'s flags ask of an engine (aiayn.decoding.engine.open_engine)."""
    return EngineOptions(engine=args.engine, search=search, precision=args.precision, device=args.device,
                         batch_size=args.batch_size, max_input_len=args.max_input_len, shortlist=args.shortlist,
                         search_impl=args.search_impl, parallel_batches=args.parallel_batches,
                         alignments=args.print_alignment,
                         alignment_layer=args.alignment_layer, alignment=args.alignment, prefixes=prefixes,
                         token_scores=args.print_scores == "tokens")


def _output_lines(n: int, hyps, nbest: int, print_scores: str | None) -> list[str]:
    """The output lines of input line n (from 0): the best text, or Moses n-best lines 'n ||| text ||| score', each
    followed by its alignment (' ||| 0-0 1-2 ...', Marian/OpenNMT style) and the --print-scores columns."""
    tails = [" ||| " + format_alignment(h.alignment) if h.alignment is not None else "" for h in hyps]
    if nbest == 1:
        h = hyps[0]
        return [h.text + tails[0] + (score_columns(h, print_scores) if print_scores else "") + "\n"]
    # the n-best line has its sentence score already; --print-scores tokens adds ' ||| token log-probs'
    tokens = [token_scores(h) if print_scores == "tokens" else None for h in hyps]
    return [f"{n} ||| {h.text} ||| {h.score:.4f}{t}" + (f" ||| {p}" if p is not None else "") + "\n"
            for h, t, p in zip(hyps, tails, tokens)]


def register(sub) -> None:
    p = sub.add_parser("translate", help="translate text with a trained model (beam search as the paper)",
                       description="Translate stdin or --input, one sentence per line, to detokenized text "
                                   "(one line per input line, same order). Defaults are the paper's: beam 4, "
                                   "length penalty alpha 0.6, max output length = input length + 50.")
    p.add_argument("--checkpoint", required=True, nargs="+",
                   help=f"{CHECKPOINT_HELP}; "
                        "several: decoded as an ensemble (their probabilities averaged at each step, as fairseq's "
                        "--path A:B; one vocabulary); with --engine ct2, a folder written by `aiayn export --to "
                        "ct2`, or an Argos Translate package (.argosmodel or its folder)")
    p.add_argument("--engine", choices=ENGINES, default="aiayn",
                   help="ct2: decode with CTranslate2 (needs --lp power: its length penalty is |Y|^alpha; "
                        "--precision bf16/int8 pick its compute type, fp32 keeps the exported one); default aiayn")
    p.add_argument("--input", help="input file (default: stdin); a progress bar is shown for files; a document "
                                   "(.docx .pptx .odt .odp .epub .srt .md .html) is translated whole into --output "
                                   "in its own format (docs/documents.md)")
    p.add_argument("--output", help="output file (default: stdout); written whole or not at all")
    p.add_argument("--batch-size", type=positive_int, default=None,
                   help="sentences per batch (default 64; 128 for greedy search on aiayn's engine)")
    p.add_argument("--buffer-size", type=positive_int, default=None,
                   help="translate, write and flush at most N lines at a time (default: a file at once; stdin as its "
                        "lines arrive, so a line written into a pipe is answered before the next; 1 = fairseq-"
                        "interactive's line by line)")
    p.add_argument("--print-scores", nargs="?", const="sentence", choices=SCORE_KINDS, default=None,
                   help="append TAB the sentence score (sum of token log-probs / length penalty: what the search "
                        "ranked by); 'tokens': also TAB each token's log-prob, EOS last (with --nbest > 1: ' ||| "
                        "token log-probs' after the Moses score); without it greedy search (--beam 1) ranks the "
                        "logits and computes no log-probs (the same words, sooner); docs/decoding.md")
    p.add_argument("--max-input-len", type=number(int, low=2), default=None,
                   help="longer inputs (subword tokens + EOS) are cut, with a warning (default: the model's "
                        "max_positions)")
    p.add_argument("--print-alignment", action="store_true",
                   help="append ' ||| i-j ...' to each output line: source word i aligned to output word j (from 0, "
                        "words split on spaces), from the averaged heads of one cross-attention layer, with either "
                        "engine (docs/attention.md)")
    p.add_argument("--alignment-layer", type=non_negative_int, default=None,
                   help="decoder layer whose cross-attention gives the alignment, from 0 (default: the top one, the "
                        "best on our Multi30k model; docs/attention.md)")
    p.add_argument("--alignment", choices=("auto", "attention", "lexical"), default="auto",
                   help="what aligns the words of --print-alignment and of tags and numbers carried: "
                        "'lexical', the run's lexical aligner (aligner.safetensors: aiayn shortlist --aligner); "
                        "'attention', the cross-attention; 'auto' (default), the aligner where the run has one, "
                        "else the attention; docs/attention.md")
    p.add_argument("--prefix", help="target prefixes, one per input line (an empty line: none): each translation "
                                    "starts with its line's pieces and the search goes on from there; or give "
                                    "them as a second input column, source<TAB>prefix")
    p.add_argument("--glossary", metavar="FILE",
                   help="terms that replace their translation: a TSV of 'source term<TAB>target term' lines (# "
                        "comments and blank lines allowed; one target term per source term); a source term found in a "
                        "sentence as whole words (case as written) has its target term put in place of the words "
                        "aligned to it in the plain translation (either engine); docs/decoding.md")
    p.add_argument("--no-split-sentences", dest="split_sentences", action="store_false",
                   help="translate each input line whole (default: a line of several sentences is translated "
                        "sentence by sentence, as aiayn serve does, and joined back into one output line; lines with "
                        "a target prefix, and all lines with --print-alignment, are never split)")
    p.add_argument("--shortlist", nargs="?", const=True, default=None, metavar="FILE",
                   help="decode with a lexical shortlist (faster: each batch's output projection covers only the "
                        "target pieces its source pieces translate to): the run's (built by `aiayn shortlist`), or "
                        "FILE; with --engine ct2, the exported folder's vocabulary map (use_vmap); docs/decoding.md")
    add_search_args(p, sampling=True)
    add_precision_arg(p)
    p.add_argument("--search-impl", choices=SEARCH_IMPLS, default="auto",
                   help="how the search runs: eager (finished sentences leave the batch; fastest on CPUs), fixed "
                        "(fixed-shape steps, replayed as CUDA graphs on a GPU; the same translations) or auto "
                        "(default: fixed on a GPU, eager on a CPU); fixed covers greedy, beam and n-best search, other "
                        "options run eager (said once); docs/decoding.md")
    p.add_argument("--parallel-batches", type=positive_int, default=None, metavar="N",
                   help="on a CPU, search N batches at once, each in a thread of its own on 1/N of torch's threads "
                        "(default 2, at most the threads; 1: one batch at a time on every thread); each batch "
                        "translated as on its own threads alone; aiayn's eager search, or CTranslate2's "
                        "inter_threads; docs/decoding.md")
    add_device_arg(p)
    add_progress_arg(p)
    p.set_defaults(func=translate_command, needs_torch=lambda args: args.engine != "ct2",
                   defers_registrations=True)  # torch imported without what a CPU translation never runs
