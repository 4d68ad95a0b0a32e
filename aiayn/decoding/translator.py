"""Translation: text in, detokenized translations out, one per input line, in input order (`Translator`).

Sentences are sorted by length and searched in batches (less padding); the answers are put back in
input order. The text side (lines, sentences, prefixes, the rules for awkward input) is aiayn.decoding.lines'.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import torch

from aiayn.config import SEARCH_IMPLS
from aiayn.decoding import aligner as word_aligner
from aiayn.decoding import inference
from aiayn.decoding.attention import align, padded
from aiayn.decoding.batches import Limits, default_batch_size, length_sorted, side_by_side, word_cap
from aiayn.decoding.ensemble import Ensemble, check_same_vocabulary
from aiayn.decoding.glossary import Glossary, Term, constrained_beam_search, encode_terms
from aiayn.decoding.lines import Translation, aligned_lines, encode_prefixes, encode_sources, warn
from aiayn.decoding.search import (
    PAPER_SEARCH,
    Constraint,
    Hypothesis,
    SearchConfig,
    search_function,
)
from aiayn.decoding.shortlist import Shortlist, run_file
from aiayn.decoding.shortlist import load as load_shortlist
from aiayn.decoding.static_search import StaticDecoder
from aiayn.errors import UsageError
from aiayn.progress import Progress
from aiayn.runtime import set_threads_here


def translation_of(vocab, hyp: Hypothesis) -> Translation:
    """A search's hypothesis as text, with its scores."""
    return Translation(vocab.decode(hyp.tokens), hyp.score, hyp.tokens, hyp.positional_scores)


class Translator:
    """A model (decoded in `precision`: aiayn.decoding.inference), its vocabulary and how to search: text in, text out.
    What the CLI, the quickstart, the server, the attention views and the exporters share.

    aiayn's engine (aiayn.decoding.engine.Engine; open it with open_engine). Sentences are sorted by length and
    searched in batches of `batch_size` (less padding; batches.length_sorted; None: batches.default_batch_size);
    answers come back in input order. On a CPU the eager search runs `parallel_batches` batches at once (None:
    batches.PARALLEL_BATCHES), each in a thread of its own on its share of torch's threads (`_parallel`, `in_parallel`).
    `model` may be a list of models of one vocabulary: they are decoded as an ensemble (aiayn.decoding.ensemble).
    `shortlist` (aiayn.decoding.shortlist): each batch computes the output projection for its source pieces' target
    pieces only.

    search_impl: "eager" (aiayn.decoding.search: finished sentences leave the batch, each step's shapes new; the fastest
    on CPUs), "fixed" (aiayn.decoding.static_search: fixed-shape steps, replayed as CUDA graphs on a GPU; the same
    hypotheses) or "auto" (the default: fixed on CUDA, eager elsewhere). The fixed-shape search does greedy, beam and
    n-best search of one model without a shortlist; a batch that asks for more (sampling, target prefixes, n-gram
    blocking, a constraint, a shortlist, an ensemble) runs the eager search, and the first such batch says so on
    stderr."""

    SEARCH_IMPLS = SEARCH_IMPLS

    def __init__(self, model, vocab, search: SearchConfig = PAPER_SEARCH, precision: str = "fp32",
                 device: str | torch.device = "cpu", batch_size: int | None = None, max_input_len: int | None = None,
                 prepack: bool | None = None, shortlist: Shortlist | None = None, search_impl: str = "auto",
                 alignment_layer: int | None = None, aligner: word_aligner.Aligner | None = None,
                 parallel_batches: int | None = None):
        self.alignment_layer = alignment_layer  # the decoder layer whose cross-attention aligns (None: the top one)
        self.aligner = aligner  # a lexical aligner aligns instead of the cross-attention (aiayn.decoding.aligner)
        self.vocab, self.search, self.device = vocab, search, torch.device(device)
        self.precision = precision
        # aiayn.decoding.inference: the formats; a model already in the asked one (Translator.load's) is taken as it is
        members = [inference.decoding_copy(m.to(self.device), self.precision, prepack)
                   for m in (model if isinstance(model, (list, tuple)) else [model])]
        self.model = members[0] if len(members) == 1 else Ensemble(members)
        self.cfg = self.model.cfg
        self.batch_size = batch_size
        self.max_input_len = max_input_len or self.cfg.max_positions
        if shortlist is not None and shortlist.vocab_size != self.cfg.vocab_size:
            raise UsageError(f"the shortlist covers {shortlist.vocab_size:,} pieces but the model has "
                             f"{self.cfg.vocab_size:,}; build it from the model's own data (aiayn shortlist)")
        self.shortlist = shortlist
        if search_impl not in self.SEARCH_IMPLS:
            raise UsageError(f"search_impl must be one of {', '.join(self.SEARCH_IMPLS)}, not {search_impl!r}")
        self.fixed_asked = search_impl == "fixed" or (search_impl == "auto" and self.device.type == "cuda")
        self.fixed_shape = self._fixed_shape_decoder() if self.fixed_asked else None
        self._fell_back = False  # the eager fallback has been announced
        self.parallel_batches = parallel_batches
        self._parallel(1)  # checked now

    def _fixed_shape_decoder(self) -> StaticDecoder | None:
        """The fixed-shape decoder for this model (None for an ensemble), sized for the longest output the search
        allows (its buffers hold each batch's positions only: aiayn.decoding.static_search)."""
        if isinstance(self.model, Ensemble):
            return None
        return StaticDecoder(self.model, self.limits().word_limit(self.search, self.max_input_len))

    def _decode_function(self, constraint, prefixes, terms):
        """The search to run a batch with: the fixed-shape decoder's where it was asked for and covers the batch's
        options, else aiayn.decoding.search's (the fallback said once); with glossary terms,
        aiayn.decoding.glossary's."""
        eager = partial(constrained_beam_search, terms=terms) if terms else search_function(self.search)
        if not self.fixed_asked:
            return eager
        unsupported = StaticDecoder.unsupported(self.search, constraint, prefixes) + ["a glossary"] * bool(terms)
        unsupported += ["a shortlist"] * (self.shortlist is not None) + ["an ensemble"] * (self.fixed_shape is None)
        if not unsupported:  # the model is the Translator's own (no shortlist): the decoder holds it
            return lambda model, src, search, max_len, *_, **__: self.fixed_shape.search(src, search, max_len)
        if not self._fell_back:
            warn(f"the fixed-shape search does not do {', '.join(unsupported)}: decoding with the eager search")
            self._fell_back = True
        return eager

    @classmethod
    def load(cls, checkpoint: str | Path | Sequence[str | Path], search: SearchConfig = PAPER_SEARCH,
             precision: str = "fp32", device: str | torch.device = "cpu", prepack: bool | None = None,
             shortlist: bool | str | Path | None = None, **kw) -> Translator:
        """From a run directory (the checkpoint aiayn.rundir.inference_checkpoint picks) or a checkpoint file; from
        several, an ensemble of them (one vocabulary). Each is loaded and converted once, by
        aiayn.decoding.inference.load. shortlist: True, the shortlist of the (first) checkpoint's run; a path, that
        file; None or False, none."""
        paths = [checkpoint] if isinstance(checkpoint, (str, Path)) else list(checkpoint)
        lexical = run_file(paths[0], None if shortlist is True else shortlist) if shortlist else None
        loaded = [inference.load(path, precision, device, prepack) for path in paths]
        if len(loaded) > 1:
            check_same_vocabulary([vocab for _, vocab in loaded], [str(path) for path in paths])
        vocab = loaded[0][1]
        kw["aligner"] = word_aligner.for_run(paths[0], kw.pop("alignment", "auto"))  # auto: the run's if any
        return cls([model for model, _ in loaded], vocab, search, precision, device=device, prepack=prepack,
                   shortlist=lexical and load_shortlist(lexical, vocab), **kw)

    def limits(self) -> Limits:
        """The longest source it takes and the most words any translation may have (a learned position table's)."""
        cfg = self.cfg
        return Limits(self.max_input_len, word_cap(cfg.max_positions if cfg.positional == "learned" else None))

    @classmethod
    def unsupported(cls, options) -> str | None:
        """The error for what `options` (aiayn.decoding.engine.EngineOptions) asks that this engine cannot do, or
        None."""
        if options.alignments and options.ensemble:
            return "several --checkpoint (an ensemble) decode without --print-alignment: give one model"
        if options.glossary and (options.alignments or options.prefixes or options.search.sampling):
            return ("--glossary needs --engine aiayn and beam or greedy search, without --print-alignment, "
                    "--sampling or target prefixes")
        if options.prefixes and options.alignments:
            return "target prefixes (a tab-separated column or --prefix) do not work with --print-alignment"
        return None

    def weight_bytes(self) -> int:
        """Bytes of the weights its model holds in its decoding format (aiayn.decoding.inference.weight_bytes; an
        ensemble: every member's)."""
        return inference.weight_bytes(self.model)

    def encode(self, lines: Sequence[str]) -> list[list[int] | None]:
        return encode_sources(self.vocab, lines, self.max_input_len)

    def search_ids(self, sources: Sequence[list[int] | None], progress: bool = False,
                   constraint: Constraint | None = None, prefixes: Sequence[list[int]] | None = None,
                   line_numbers: Sequence[int] | None = None, terms: Sequence[Sequence[Term]] | None = None
                   ) -> list[list[Hypothesis]]:
        """Search every source (ids with EOS; None = blank) in length-sorted batches; answers in input order.
        A blank source gets one empty hypothesis of score 0. `constraint` (see aiayn.decoding.search.Constraint, called
        with input line numbers) restricts what the search may generate. prefixes: per source, the word ids its
        translations start with ([]: none). Sampling seeds each source by its input line number: line_numbers[i]
        (from 0; default i). terms: per source, the target terms (piece ids) its translations must hold
        (`glossary_terms`; aiayn.decoding.glossary)."""
        search, max_len = self.search, self.limits().words
        results: list[list[Hypothesis]] = [[Hypothesis([], 0.0, [])] for _ in sources]
        batches = length_sorted(sources, self.batch_size or default_batch_size(search), longest_first=True)
        if prefixes is not None:
            if len(prefixes) != len(sources):
                raise UsageError(f"{len(prefixes)} prefixes for {len(sources)} sources; give one per source")
            blank = next((n for n, (s, p) in enumerate(zip(sources, prefixes), 1) if s is None and p), None)
            if blank is not None:
                raise UsageError(f"input line {blank} is blank but has a target prefix; give a source")
        bar = Progress("translate", sum(map(len, batches)), "sentences", enabled=progress)

        def search_batch(idx: list[int], stop: threading.Event | None) -> list[list[Hypothesis]]:
            with torch.inference_mode():  # per thread
                src = padded([sources[i] for i in idx])
                on_lines = None
                if constraint is not None:  # the constraint sees input line numbers, not batch rows
                    on_lines = partial(_on_lines, constraint, torch.tensor(idx, device=self.device))
                lines = torch.tensor(idx if line_numbers is None else [line_numbers[i] for i in idx])
                src, batch_prefixes = src.to(self.device), prefixes and [prefixes[i] for i in idx]
                model = self.model if self.shortlist is None else self.shortlist.restrict(self.model, src,
                                                                                          batch_prefixes)
                batch_terms = [terms[i] for i in idx] if terms and any(terms[i] for i in idx) else None
                decode = self._decode_function(on_lines, batch_prefixes, batch_terms)
                model = model if stop is None else _Stoppable(model, stop)
                return decode(model, src, search, max_len, on_lines, prefixes=batch_prefixes, lines=lines)

        for idx, hyps in zip(batches, in_parallel(search_batch, batches, self._parallel(len(batches)))):
            for i, h in zip(idx, hyps):  # empty only if the model gave EOS probability 0 at the limit
                results[i] = h or [Hypothesis([], float("-inf"), [])]
            bar.update(len(idx))
        bar.close()
        return results

    def _parallel(self, n_batches: int) -> int:
        """How many of `n_batches` batches search at once: batches.side_by_side's on a CPU with the eager search (at
        most torch's threads); 1 on a GPU or with the fixed-shape search, whose buffers are the decoder's."""
        cpu = self.device.type == "cpu" and not self.fixed_asked
        return min(side_by_side(self.parallel_batches, torch.get_num_threads(), cpu), n_batches)

    def check_prefixes(self, sources: Sequence[list[int] | None], prefixes: Sequence[list[int]]) -> None:
        """A UsageError naming the first line whose prefix is longer than its translation may be (before searching:
        the server checks a request before queuing it)."""
        limits = self.limits()
        for n, (source, words) in enumerate(zip(sources, prefixes), 1):
            if source is None or not words:
                continue
            most = limits.word_limit(self.search, len(source))
            if len(words) > most:
                raise UsageError(f"input line {n}: its prefix has {len(words)} words, more than the {most} its "
                                 "translation may have (--max-len-a, --max-len-b)")

    def glossary_terms(self, lines: Sequence[str], glossary) -> list[list[Term]] | None:
        """Per line, the piece ids of the target terms `glossary` asks for in it (a Glossary, a {source: target}
        dict or pairs; None: no glossary): what search_ids takes as `terms` (a server: per request)."""
        return None if glossary is None else encode_terms(self.vocab, Glossary.of(glossary), lines)

    def translate_nbest(self, lines: Sequence[str], progress: bool = False, prefixes: Sequence[str] | None = None,
                        first_line: int = 0, glossary=None, alignments: bool | Sequence[bool] = False
                        ) -> list[list[Translation]]:
        """Up to search.nbest translations per line, best first; prefixes: per line, the text its translations start
        with ("" or None: no prefix). first_line: the input line number (from 0) of lines[0], when `lines` is one
        buffer of a longer input: sampling seeds each line by its number in the whole input. glossary: terms each
        translation must hold (glossary_terms; aiayn.decoding.glossary). alignments: each Translation's
        `alignment`, its word links from the lexical `aligner` where there is one (aiayn.decoding.aligner), else from
        the cross-attention of `alignment_layer` (aiayn.decoding.attention.align); a flag per line: those lines'
        alone (aiayn.decoding.lines.aligned_lines)."""
        prefix_ids = None if prefixes is None else encode_prefixes(self.vocab, [p or "" for p in prefixes])
        numbers = range(first_line, first_line + len(lines))
        sources = self.encode(lines)
        hyps = self.search_ids(sources, progress, prefixes=prefix_ids, line_numbers=numbers,
                               terms=self.glossary_terms(lines, glossary))
        nbests = [[translation_of(self.vocab, h) for h in hs] for hs in hyps]
        wanted = aligned_lines(alignments, len(lines))
        if any(wanted):
            rows = [(n, k) for n, hs in enumerate(hyps) if wanted[n] for k in range(len(hs))]  # one list
            links = self.align_ids([sources[n] for n, _ in rows], [hyps[n][k].tokens for n, k in rows])
            for (n, k), pairs in zip(rows, links):
                nbests[n][k] = nbests[n][k]._replace(alignment=pairs)
        return nbests

    def align_ids(self, sources: Sequence[list[int] | None], targets: Sequence[list[int]]
                  ) -> list[list[tuple[int, int]]]:
        """The word links of each (source ids + EOS, or None for a blank; translation ids) pair: the lexical
        `aligner`'s where there is one (aiayn.decoding.aligner), else the cross-attention of `alignment_layer` over
        the translation teacher-forced (aiayn.decoding.attention.align)."""
        if self.aligner is not None:
            return self.aligner.align(sources, targets, self.vocab)
        return align(self.model, self.vocab, sources, targets, self.alignment_layer)

    def translate(self, lines: Sequence[str], progress: bool = False, glossary=None) -> list[str]:
        """The best translation of each line (glossary: as translate_nbest's)."""
        return [hs[0].text for hs in self.translate_nbest(lines, progress, glossary=glossary)]


def in_parallel(work: Callable[[list[int], threading.Event | None], list], batches: list[list[int]], n: int
                ) -> Iterator[list]:
    """work(batch, stop) for each batch, in order; n > 1: n batches at a time, each in a thread of its own on
    1/n of torch's threads (their count as it was afterwards). A step's operator calls and its Python are serial
    within a batch; a batch beside it fills its gaps, where one batch on every thread leaves all but one idle
    between its products. torch's operators release the GIL while they compute. `stop` (None when n is 1) is set
    when the caller stops early (an error, Ctrl-C): the batches still searching end at their next step
    (_Stoppable), and those not started never start."""
    if n == 1:
        yield from (work(batch, None) for batch in batches)
        return
    threads, stop = torch.get_num_threads(), threading.Event()
    each = max(1, threads // n)

    def run(batch: list[int]) -> list:
        set_threads_here(each)
        return work(batch, stop)

    pool = ThreadPoolExecutor(n, thread_name_prefix="aiayn-batch")
    try:
        yield from pool.map(run, batches)
    finally:
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
        set_threads_here(threads)


class _Stopped(Exception):
    """A batch's search ended early because the caller of in_parallel stopped."""


class _Stoppable:
    """A model as a search sees it, whose every decoder call first checks `stop` (set: _Stopped); all else is the
    model's own."""

    def __init__(self, model, stop: threading.Event):
        self._model, self._stop = model, stop

    def __getattr__(self, name: str):
        found = getattr(self._model, name)
        if name not in ("decode", "decode_pieces"):
            return found

        def checked(*args, **kwargs):
            if self._stop.is_set():
                raise _Stopped
            return found(*args, **kwargs)
        return checked


def _on_lines(constraint: Constraint, lines: torch.Tensor, sent: torch.Tensor, prefix: torch.Tensor) -> torch.Tensor:
    return constraint(lines[sent], prefix)
