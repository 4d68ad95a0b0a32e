"""Decoding through a folder `aiayn export --to ct2` wrote, or through an Argos Translate package of anyone's:
`CT2Translator`, the engine of `aiayn translate --engine ct2` and of `aiayn serve` for such models, and
`translate_ct2`. It imports neither torch nor the exporter, so a command that decodes through CTranslate2 starts as
fast as CTranslate2 does.

    CT2Translator    text in, text out (translate_nbest), and Translator's id-level API for the server's batcher
    PieceVocab       an Argos package's SentencePiece model seen with aiayn's fixed special ids
    is_ct2_model     an aiayn CTranslate2 folder (is_ct2_folder) or an Argos package (is_argos_package)

How aiayn's SearchConfig maps onto CTranslate2's options, and what cannot map: DECODING_NOTES (also in the README of
every exported folder).
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import weakref
import zipfile
from collections.abc import Sequence
from copy import copy
from pathlib import Path

from aiayn.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID, ModelConfig, SearchConfig
from aiayn.data.vocab import MODEL_FILE, Vocab
from aiayn.decoding import aligner as word_aligner
from aiayn.decoding.alignment import word_links
from aiayn.decoding.batches import BATCH, Limits, limit_batches, own_limits, side_by_side, word_cap
from aiayn.decoding.lines import Translation, aligned_lines, encode_prefixes, encode_sources
from aiayn.errors import UsageError, UserError

AIAYN_FILE = "aiayn.json"  # the aiayn config, beside CTranslate2's own config.json
VMAP_FILE = "vmap.txt"  # CTranslate2's vocabulary map: the run's shortlist (aiayn.decoding.shortlist.vmap_lines)
MIN_POSITIONS = 1024  # rows of the written sinusoid table at least (CTranslate2 refuses positions past the table)

DECODING_NOTES = """\
* Length penalty: CTranslate2 divides by |Y|^alpha, aiayn's `--lp power`; the paper's GNMT penalty
  ((5 + |Y|) / 6)^alpha (aiayn's default) has no CTranslate2 equivalent. |Y| counts the EOS in both.
* Length limit: aiayn allows int(a * source tokens + b) words per sentence; CTranslate2 takes one
  `max_decoding_length` per call, so `translate_ct2` decodes batches of length-sorted sentences at the batch's
  largest limit, then decodes again alone, at its own limit, any sentence whose output reached that limit. At the
  limit aiayn forces an EOS and scores it; CTranslate2 stops without one. The words are the same in greedy search.
* PAD and BOS are never generated, EOS not before `min_len` words: CTranslate2 masks these before its
  log-softmax, aiayn after, so beam scores differ by log(1 - p(masked)): nothing for a trained model, whose
  p(PAD), p(BOS) and p(EOS first) are ~0, but it can reorder near-ties. Greedy outputs are unaffected.
* Beam search stops after `beam * patience` finished hypotheses in CTranslate2, as in aiayn with
  `--beam-patience P` (its `patience`); aiayn's default (0) stops only when no live hypothesis can still win, and
  then CTranslate2 runs with its own default, patience 1, which can miss a longer, better hypothesis that aiayn
  finds (a large patience searches as long as aiayn does, to the length limit).
* A target prefix is CTranslate2's `target_prefix` (the pieces, no EOS), and `no_repeat_ngram_size` its option of
  that name. Greedy outputs are the same; CTranslate2 leaves the prefix's log-probs out of a score (aiayn counts
  them), so its scores differ and its beam search can rank, and so choose, differently.
* Sampling does not map: aiayn draws from a generator per input line (the same samples in any batch), CTranslate2
  from one per process.
* A lexical shortlist (aiayn's `--shortlist`) is CTranslate2's `use_vmap=True` on the vmap.txt exported from the
  run's shortlist: the same pieces per source piece, the frequent ones as its always-allowed list; both take the
  union over a batch and normalize the softmax over it."""


class CT2Translator:
    """An exported CTranslate2 folder with its vocabulary and config: CTranslate2's engine
    (aiayn.decoding.engine.Engine; open it with open_engine), text in, text out, as aiayn's Translator; and
    Translator's id-level API (encode, search_ids, check_prefixes, glossary_terms), through which `aiayn serve`
    batches requests for it as for an aiayn model (aiayn.serve.batcher).

    threads: CPU threads (default_threads; CTranslate2's own default of 4 stalls on a busy 2-core machine).
    parallel_batches: on a CPU, batches decoded at once (CTranslate2's inter_threads; None: batches.side_by_side's
    default, at most the threads), each on threads // that many (its intra_threads), as aiayn's engine does.
    compute_type: CTranslate2's ("default" = as exported; "int8", ...; COMPUTE_TYPES maps aiayn's decoding precisions
    to it). use_vmap: decode with the folder's vocabulary map (the run's shortlist, VMAP_FILE), as CTranslate2's
    option of that name. search, batch_size, patience, max_input_len: what it decodes with (patience: CTranslate2's
    beam stopping rule, DECODING_NOTES; default search.beam_patience, or CTranslate2's own 1 where that is 0)."""

    COMPUTE_TYPES = {"fp32": "default", "bf16": "bfloat16", "int8": "int8"}  # aiayn.config.PRECISIONS -> CT2's

    def __init__(self, model_dir: Path | str, device: str = "cpu", compute_type: str = "default",
                 threads: int | None = None, use_vmap: bool = False, search: SearchConfig | None = None,
                 batch_size: int = BATCH, patience: float | None = None, max_input_len: int | None = None,
                 alignment: str = "auto", parallel_batches: int | None = None):
        import ctranslate2

        threads = threads or default_threads()
        side = side_by_side(parallel_batches, threads, cpu=device == "cpu")

        model_dir = Path(model_dir)
        self.package = None  # an Argos Translate package's folder (unzipped here if given as a .argosmodel file)
        if is_argos_package(model_dir):
            self.package = _unzipped(model_dir, self)
            model_dir = self.package / "model"
        elif not is_ct2_folder(model_dir):
            raise UserError(f"{model_dir} is neither a CTranslate2 folder written by `aiayn export --to ct2` nor an "
                            "Argos Translate package (a .argosmodel file, or its folder: metadata.json, model/, "
                            "sentencepiece.model)")
        if use_vmap and not (model_dir / VMAP_FILE).is_file():
            raise UsageError(f"{model_dir} has no vocabulary map ({VMAP_FILE}); export it from a run with a shortlist "
                             "(aiayn shortlist --out RUN, then aiayn export --to ct2)")
        self.model_dir, self.use_vmap, self.compute_type = model_dir, use_vmap, compute_type
        self.target_token = None
        if self.package is not None:  # a package of anyone's: its SentencePiece model, decoded as argostranslate does
            self.cfg, self.quantization = None, None
            self.vocab = PieceVocab(self.package / "sentencepiece.model")
            meta = json.loads((self.package / "metadata.json").read_text(encoding="utf-8"))
            self.target_token = meta.get("target_prefix") or None
        else:
            record = json.loads((model_dir / AIAYN_FILE).read_text())
            self.cfg, self.quantization = ModelConfig.from_dict(record["model"]), record.get("quantization")
            self.vocab = Vocab.load(model_dir / MODEL_FILE)
        self.aligner = word_aligner.for_run(model_dir, alignment)  # the run's, copied beside the export (auto: if any)
        supported = ctranslate2.get_supported_compute_types(device)
        if compute_type != "default" and compute_type not in supported:
            raise UsageError(f"CTranslate2 cannot compute in {compute_type} on this {device} (it can in "
                             f"{', '.join(sorted(supported))}): choose another --precision, or --engine aiayn")
        self.translator = ctranslate2.Translator(str(model_dir), device=device, compute_type=compute_type,
                                                 intra_threads=max(1, threads // side), inter_threads=side)
        self.device = device
        self.precision = next((p for p, c in self.COMPUTE_TYPES.items() if c == compute_type), compute_type)
        self.search, self.batch_size, self.patience = search or SearchConfig(lp="power"), batch_size, patience
        self.max_input_len = max_input_len or self._positions()
        self.shortlist = None  # aiayn's shortlist: none here (use_vmap is CTranslate2's own)

    def translate_nbest(self, lines: Sequence[str], progress: bool = False, prefixes: Sequence[str] | None = None,
                        first_line: int = 0, glossary=None, alignments: bool | Sequence[bool] = False
                        ) -> list[list[Translation]]:
        """Up to search.nbest translations per line, best first; a blank line gives one empty translation.

        search.lp must be "power" (DECODING_NOTES: what maps how). Inputs longer than max_input_len tokens (EOS
        included; default the model's max_positions) are cut, with a warning, as aiayn's Translator cuts them.
        prefixes: per line, the text its translations start with (CTranslate2's target_prefix; "" or None: none).
        alignments: each Translation's `alignment`, from CTranslate2's attention (return_attention: the top decoder
        layer's, its heads averaged as the export asks) by aiayn.decoding.alignment's recipe. progress and first_line
        change nothing here (no bar; CTranslate2 does not sample); a glossary is an error. A flag per line: those
        lines' alignments alone (aiayn.decoding.lines.aligned_lines)."""
        self.glossary_terms(lines, glossary)
        vocab = self.vocab
        sources = encode_sources(vocab, lines, self.max_input_len)  # ids + EOS; None = blank
        prefix_ids = encode_prefixes(vocab, [p or "" for p in prefixes or [""] * len(sources)])
        wanted = aligned_lines(alignments, len(lines))
        hyps = self._search(sources, prefix_ids, self.search, self.batch_size, self.patience, any(wanted))
        return [[Translation(vocab.decode(ids), score, ids, (), self._links(sources[n], ids, attn) if wanted[n]
                             else None) for ids, score, attn in hs] for n, hs in enumerate(hyps)]

    def translate(self, lines: Sequence[str], search: SearchConfig | None = None, progress: bool = False,
                  **options) -> list[str]:
        """The best translation of each line; search and options (batch_size, max_input_len, patience), where given,
        replace the engine's own for this call."""
        engine = self if search is None and not options else self.using(search, **options)
        return [hyps[0].text for hyps in engine.translate_nbest(lines, progress)]

    def using(self, search: SearchConfig | None = None, **options) -> CT2Translator:
        """The same loaded model decoding with another `search` and options (batch_size, max_input_len, patience)."""
        other = copy(self)
        other.search = search or self.search
        for name, value in options.items():
            if name not in ("batch_size", "max_input_len", "patience"):
                raise TypeError(f"CT2Translator.using() got an unexpected option {name!r}")
            setattr(other, name, value if value is not None or name == "patience" else getattr(self, name))
        if other.max_input_len is None:
            other.max_input_len = self._positions()
        return other

    def limits(self) -> Limits:
        """The longest source it takes and the most words any translation may have (the position table's)."""
        return Limits(self.max_input_len, word_cap(self._positions()))

    @classmethod
    def unsupported(cls, options) -> str | None:
        """The error for what `options` (aiayn.decoding.engine.EngineOptions) asks that CTranslate2 cannot do (or
        this engine does not map onto it), or None."""
        if options.ensemble:
            return "several --checkpoint (an ensemble) need --engine aiayn"
        if options.forced:
            return "aiayn score (forced decoding) reads aiayn's model: give a run directory or a checkpoint file"
        if options.search_impl != "auto":
            return "--search-impl chooses how aiayn's own search runs: it needs --engine aiayn"
        if options.token_scores:
            return "--print-scores tokens needs --engine aiayn (CTranslate2 gives sentence scores only)"
        if options.glossary:
            return ("--glossary needs --engine aiayn and beam or greedy search, without --print-alignment, "
                    "--sampling or target prefixes")
        if options.shortlist not in (None, True, False):
            return ("with --engine ct2, --shortlist takes no FILE: the exported folder's vocabulary map (vmap.txt) "
                    "is the shortlist")
        if options.alignments and options.alignment_layer is not None:
            return "--alignment-layer: CTranslate2 gives the attention of the top decoder layer only; leave it out"
        if options.prefixes and options.alignments:
            return "target prefixes (a tab-separated column or --prefix) do not work with --print-alignment"
        return _search_unsupported(options.search)

    # ---- aiayn.decoding.translator.Translator's id-level API, with the search given at construction (aiayn serve)

    def encode(self, lines: Sequence[str]) -> list[list[int] | None]:
        return encode_sources(self.vocab, lines, self.max_input_len)

    def search_ids(self, sources: Sequence[list[int] | None], progress: bool = False, constraint=None,
                   prefixes: Sequence[list[int]] | None = None, line_numbers: Sequence[int] | None = None,
                   terms=None) -> list:
        """As Translator.search_ids, with self.search; a constraint or glossary terms are a UsageError (CTranslate2
        has neither), and so is sampling (translate_nbest's errors)."""
        if constraint is not None or any(terms or []):
            raise UsageError("a CTranslate2 model decodes without constraints or a glossary; serve the run itself "
                             "(aiayn's search) for those")
        from aiayn.decoding.search import Hypothesis  # the server's type (torch is loaded there already)

        found = self._search(sources, prefixes or [[] for _ in sources], self.search, len(sources) or 1, self.patience)
        return [[Hypothesis(ids, score) for ids, score, _ in hyps] for hyps in found]

    def check_prefixes(self, sources: Sequence[list[int] | None], prefixes: Sequence[list[int]]) -> None:
        """A UsageError naming the first line whose prefix is longer than its translation may be."""
        self._check_prefix_lengths(own_limits(sources, self.search, self.limits().words), prefixes)

    @staticmethod
    def _check_prefix_lengths(limits: dict[int, int], prefixes: Sequence[list[int]]) -> None:
        for i, limit in limits.items():
            if len(prefixes[i]) > limit:
                raise UsageError(f"input line {i + 1}: its prefix has {len(prefixes[i])} words, more than the "
                                 f"{limit} its translation may have (--max-len-a, --max-len-b)")

    def glossary_terms(self, lines: Sequence[str], glossary) -> None:
        if glossary:
            raise UsageError("glossary: a CTranslate2 model decodes without lexical constraints; serve the run "
                             "itself (aiayn's search) to use a glossary")
        return None

    def weight_bytes(self) -> int:
        """The bytes of its weights as CTranslate2 holds them, about: model.bin's size as exported, else the
        parameters at the compute type's width (int8: 1 byte, bfloat16 and float16: 2); an Argos package's model.bin
        as it is."""
        width = {"int8": 1, "bfloat16": 2, "float16": 2}
        asked = next((w for name, w in width.items() if self.compute_type.startswith(name)), None)
        exported = next((w for name, w in width.items() if (self.quantization or "").startswith(name)), 4)
        size = (self.model_dir / "model.bin").stat().st_size
        if self.package is not None:  # whatever the package was quantized to: its file
            return size
        return size if asked is None or asked == exported else size * asked // exported

    # ---- the search

    def _positions(self) -> int:
        cfg = self.cfg
        if cfg is None:  # an Argos package: CTranslate2's own input limit
            return MIN_POSITIONS
        return cfg.max_positions if cfg.positional == "learned" else max(MIN_POSITIONS, cfg.max_positions)

    def align_ids(self, sources: Sequence[list[int] | None], targets: Sequence[list[int]]
                  ) -> list[list[tuple[int, int]]]:
        """The word links of each (source ids + EOS, or None for a blank; translation ids) pair: the lexical aligner's
        where there is one, else CTranslate2's attention (the top decoder layer's) with the translation forced as the
        target prefix: one greedy call that only decodes what it is given."""
        if self.aligner is not None:
            return self.aligner.align(sources, targets, self.vocab)
        pieces, lead = self.vocab.piece, [self.target_token] if self.target_token else []
        out: list[list[tuple[int, int]]] = [[] for _ in sources]
        todo = [n for n, (s, t) in enumerate(zip(sources, targets)) if s is not None and len(s) > 1 and t]
        if not todo:
            return out
        found = self.translator.translate_batch(
            [[pieces(i) for i in sources[n][:-1]] for n in todo],
            target_prefix=[lead + [pieces(i) for i in targets[n]] for n in todo], beam_size=1, return_attention=True,
            max_decoding_length=len(lead) + max(len(targets[n]) for n in todo) + 1, max_input_length=0)
        for n, result in zip(todo, found):
            rows = result.attention[0][len(lead):len(lead) + len(targets[n])]
            out[n] = word_links(rows, [pieces(i) for i in sources[n][:-1]], [pieces(i) for i in targets[n]])
        return out

    def _links(self, source: list[int] | None, ids: list[int], attention) -> list[tuple[int, int]]:
        """A hypothesis's word links from CTranslate2's attention (rows: its pieces; columns: the source pieces)."""
        if not source or not attention:  # a blank line, an empty translation
            return []
        if self.aligner is not None:  # the lexical aligner (aiayn.decoding.aligner) instead of the attention
            return self.aligner.links(source, ids, self.vocab)
        pieces = self.vocab.piece
        return word_links(attention, [pieces(i) for i in source[:-1]], [pieces(i) for i in ids])

    def _search(self, sources: Sequence[list[int] | None], prefix_ids: Sequence[list[int]], search: SearchConfig,
                batch_size: int, patience: float | None, attention: bool = False) -> list[list[tuple]]:
        """Up to search.nbest (word ids, score, attention rows or None) per source (ids + EOS; None = blank: one
        empty hypothesis), best first; attention: CTranslate2's return_attention, a row per word."""
        problem = _search_unsupported(search)
        if problem:
            raise UsageError(problem)
        vocab = self.vocab
        results = [[([], 0.0, None)] for _ in sources]
        for n, (source, words) in enumerate(zip(sources, prefix_ids), 1):
            if source is None and words:
                raise UsageError(f"input line {n} is blank but has a target prefix; give a source")
        cap = self.limits().words
        limits = own_limits(sources, search, cap)
        self._check_prefix_lengths(limits, prefix_ids)
        patience = patience or search.beam_patience or 1.0
        options = dict(no_repeat_ngram_size=search.no_repeat_ngram_size, beam_size=search.beam, patience=patience,
                       num_hypotheses=search.nbest, length_penalty=search.alpha, min_decoding_length=search.min_len,
                       max_input_length=0, return_scores=search.scores or search.beam > 1, use_vmap=self.use_vmap,
                       return_attention=attention)
        if self.package is None:  # aiayn's exports: PAD and BOS never generated (DECODING_NOTES)
            options["suppress_sequences"] = [[vocab.piece(PAD_ID)], [vocab.piece(BOS_ID)]]
        else:  # as argostranslate decodes a package: nothing suppressed, an unknown piece becomes a source piece
            options["replace_unknowns"] = True

        lead = [self.target_token] if self.target_token else []  # a multilingual package's target-language token

        def submit(limit: int, idx: list[int]) -> tuple[list[int], list]:
            target_prefix = [lead + [vocab.piece(t) for t in prefix_ids[i]] for i in idx] if any(prefix_ids) or \
                lead else None
            return idx, self.translator.translate_batch(  # asynchronous: inter_threads batches decode at once
                [[vocab.piece(t) for t in sources[i][:-1]] for i in idx],  # CTranslate2 appends the EOS itself
                target_prefix=target_prefix, max_decoding_length=limit + len(lead), max_batch_size=len(idx),
                asynchronous=True, **options)

        def collect(idx: list[int], out: list) -> None:
            for i, res in zip(idx, (pending.result() for pending in out)):
                rows = res.attention if attention else [None] * len(res.hypotheses)
                scores = res.scores or [math.nan] * len(res.hypotheses)  # none asked: greedy's words alone
                results[i] = [([vocab.piece_id(p) for p in h[len(lead):]], s, a and a[len(lead):]) for h, s, a in
                              zip(res.hypotheses, scores, rows)]

        # One call per batch of length-sorted sentences, at the batch's largest limit: few, full batches, as
        # CTranslate2 runs fastest. A sentence whose output reached its own, smaller limit is decoded again alone at
        # that limit, so every output is the one its own limit gives.
        batches = limit_batches(sources, search, cap, batch_size)
        for idx, out in [submit(limit, idx) for limit, idx in batches]:
            collect(idx, out)
        batch_limit = {i: limit for limit, idx in batches for i in idx}
        again = [submit(limit, [i]) for i, limit in limits.items()
                 if batch_limit[i] > limit and any(len(ids) >= limit for ids, *_ in results[i])]
        for idx, out in again:
            collect(idx, out)
        return results


def _search_unsupported(search: SearchConfig) -> str | None:
    """The error for a search CTranslate2 cannot run as aiayn's (DECODING_NOTES), or None."""
    if search.lp != "power":
        return ("CTranslate2's length penalty is |Y|^alpha: decode with --lp power (the paper's GNMT penalty "
                "((5 + |Y|) / 6)^alpha has no CTranslate2 equivalent)")
    if search.sampling:
        return ("--engine ct2 does not sample: aiayn's samples come from one generator per input line (the same in "
                "any batch), CTranslate2's from one per process; use --engine aiayn")
    return None


def ct2_device(name: str) -> str:
    """--device for CTranslate2, read without torch: "auto" is "cuda" where CTranslate2 sees a GPU, else "cpu";
    "cuda:N" is "cuda" (CTranslate2's first GPU)."""
    import ctranslate2

    gpus = ctranslate2.get_cuda_device_count()
    if name == "auto":
        return "cuda" if gpus > 0 else "cpu"
    if name.split(":")[0] == "cuda" and not gpus:
        raise UsageError(f"--device {name}: CTranslate2 sees no CUDA GPU here; use --device cpu (or auto)")
    if name == "cpu" or name.split(":")[0] == "cuda":
        return name.split(":")[0]
    raise UsageError(f"--device {name}: CTranslate2 runs on cpu or cuda")


def default_threads() -> int:
    """CTranslate2's threads where none are given: torch's count where torch is loaded (aiayn serve sets it per
    worker), else OMP_NUM_THREADS, else the cores this process may run on."""

    if "torch" in sys.modules:
        return sys.modules["torch"].get_num_threads()
    if os.environ.get("OMP_NUM_THREADS", "").isdigit() and int(os.environ["OMP_NUM_THREADS"]) > 0:
        return int(os.environ["OMP_NUM_THREADS"])
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def is_argos_package(path: Path | str) -> bool:
    """Whether `path` is an Argos Translate package: a .argosmodel file (a zip of one folder), or the folder itself
    as argostranslate installs it (metadata.json, model/ of CTranslate2, sentencepiece.model)."""
    path = Path(path)
    if path.is_file():
        return path.suffix == ".argosmodel" and zipfile.is_zipfile(path)
    return all((path / name).exists() for name in ("metadata.json", "model/model.bin", "sentencepiece.model"))


def _unzipped(path: Path, owner: object) -> Path:
    """An Argos package's folder: `path` itself, or a .argosmodel unzipped into a temporary folder that lives as
    long as `owner` does."""
    if path.is_dir():
        return path
    tmp = tempfile.TemporaryDirectory(prefix="aiayn-argos-")
    weakref.finalize(owner, tmp.cleanup)
    with zipfile.ZipFile(path) as zf:
        zf.extractall(tmp.name)
    folders = [p for p in Path(tmp.name).iterdir() if p.is_dir()]
    if len(folders) != 1 or not is_argos_package(folders[0]):
        raise UserError(f"{path} is not an Argos Translate package (a zip of one folder holding metadata.json, "
                        "model/ and sentencepiece.model)")
    return folders[0]


class PieceVocab:
    """A plain SentencePiece model (an Argos package's, whatever its special ids) seen with aiayn's: PAD 0, UNK 1,
    BOS 2, EOS 3 are aiayn's, its own pieces shifted by 4 (its <unk> is UNK), so that the code around CTranslate2
    (limits, prefixes, the server's batching) reads ids as everywhere else; CTranslate2 itself sees the pieces."""

    SHIFT = 4

    def __init__(self, path: Path | str):
        import sentencepiece as spm

        self.sp = spm.SentencePieceProcessor(model_file=str(path))
        self.specials = {PAD_ID: "<pad>", UNK_ID: self.sp.id_to_piece(self.sp.unk_id()), BOS_ID: "<s>",
                         EOS_ID: "</s>"}

    @property
    def target(self) -> PieceVocab:
        return self

    def __len__(self) -> int:
        return self.sp.get_piece_size() + self.SHIFT

    def _ours(self, i: int) -> int:
        return UNK_ID if i == self.sp.unk_id() else i + self.SHIFT

    def encode(self, text: str) -> list[int]:
        return [self._ours(i) for i in self.sp.encode(text)]

    def decode(self, ids: Sequence[int]) -> str:
        """The text of `ids` as argostranslate detokenizes: SentencePiece's, without a leading space."""
        ids = list(ids)
        ids = ids[: ids.index(EOS_ID)] if EOS_ID in ids else ids
        text = self.sp.decode([self.sp.unk_id() if i == UNK_ID else i - self.SHIFT for i in ids if i == UNK_ID
                               or i >= self.SHIFT])
        return text[1:] if text.startswith(" ") else text

    def piece(self, i: int) -> str:
        return self.specials[i] if i < self.SHIFT else self.sp.id_to_piece(i - self.SHIFT)

    def piece_id(self, piece: str) -> int:
        return self._ours(self.sp.piece_to_id(piece))


def is_ct2_model(path: Path | str) -> bool:
    """Whether CT2Translator decodes `path`: a folder `aiayn export --to ct2` wrote, or an Argos package."""
    return is_ct2_folder(path) or is_argos_package(path)


def is_ct2_folder(path: Path | str) -> bool:
    """Whether `path` is a folder `aiayn export --to ct2` wrote (model.bin beside aiayn.json)."""
    return (Path(path) / "model.bin").is_file() and (Path(path) / AIAYN_FILE).is_file()


def translate_ct2(model_dir: Path | str, lines: Sequence[str], search: SearchConfig, **options) -> list[str]:
    """The best translation of each line through an exported CTranslate2 folder, searched as `search` says
    (search.lp must be "power"; DECODING_NOTES says what maps how). Options: CT2Translator's (`batch_size`,
    `max_input_len`, `patience`, `device`, `compute_type`, `threads`, `use_vmap`)."""
    return CT2Translator(model_dir, search=search, **options).translate(lines)
