"""aiayn -> CTranslate2: a model folder for `ctranslate2.Translator`, and decoding through it (`translate_ct2`).

The spec is built with CTranslate2's Python spec API (`ctranslate2.specs`), not through its HF converter, so every
aiayn config exports: Table 3 rows A, B and E, and pre-norm, included.

    names.py rows (aiayn -> CT2 name)      -> `ct2_variables`: renamed, heads padded, Q/K/V fused
    the paper's sinusoids (section 3.5)    -> written out as position_encodings/encodings (CTranslate2's own are
                                              [sin | cos], another timescale, from position 1: not the paper's)
    learned positions (row E)              -> the learned table itself
    h * d_k != d_model (row B: d_k != d_v) -> one head width, max(d_k, d_v): the narrower heads padded with zero
                                              features, queries scaled by 1/sqrt(d_k) (`queries_scale`), which
                                              leaves softmax(Q K^T / sqrt(d_k)) V unchanged
    shared vocabulary                      -> the SentencePiece pieces in id order on both sides; vocab.model is
                                              copied into the folder so `translate_ct2` can tokenize
    an imported OPUS-MT model (marian.py)  -> CTranslate2's swish, its output bias as the projection's bias
    the run's lexical shortlist            -> vmap.txt, CTranslate2's vocabulary map (use_vmap)

How `translate_ct2` maps aiayn's SearchConfig onto CTranslate2's options, and what cannot map: DECODING_NOTES
(also in the README of every exported folder).
"""

from __future__ import annotations

import json
import math
import shutil
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from aiayn.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID, ModelConfig
from aiayn.data.vocab import MODEL_FILE
from aiayn.errors import UsageError, UserError
from aiayn.export.card import Provenance, fresh_folder, write_card
from aiayn.export.names import POSITIONS, parameter_map
from aiayn.model import Transformer, sinusoidal_positions
from aiayn.search import Hypothesis, SearchConfig
from aiayn.shortlist import Shortlist, vmap_lines
from aiayn.translate import Translation, encode_prefixes, encode_sources

QUANTIZATIONS = ("int8", "int8_float32", "int16", "float16", "bfloat16")
AIAYN_FILE = "aiayn.json"  # the aiayn config, beside CTranslate2's own config.json
VMAP_FILE = "vmap.txt"  # CTranslate2's vocabulary map: the run's shortlist (aiayn.shortlist.vmap_lines)
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


def head_dim(cfg: ModelConfig) -> int:
    """CTranslate2's one per-head width for queries, keys and values."""
    return max(cfg.d_k, cfg.d_v)


def _pad_heads(x: torch.Tensor, dim: int, heads: int, width: int, to: int) -> torch.Tensor:
    """Zero-pad each of the `heads` blocks of `width` along `dim` to `to`: (.., h*width, ..) -> (.., h*to, ..)."""
    if width == to:
        return x
    shape = list(x.shape)
    x = x.reshape(shape[:dim] + [heads, width] + shape[dim + 1:])
    pad = [0, 0] * (x.dim() - dim - 2) + [0, to - width]  # F.pad lists dims from the last one
    return torch.nn.functional.pad(x, pad).reshape(shape[:dim] + [heads * to] + shape[dim + 1:])


def ct2_variables(model: Transformer) -> dict[str, np.ndarray]:
    """Every CTranslate2 variable of `model` (fp32 numpy arrays), named as in names.py."""
    cfg = model.cfg
    state = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}
    params = parameter_map(cfg)
    if cfg.positional == "sinusoidal":  # the paper's table, written out: aiayn computes it, CTranslate2 reads it
        state[POSITIONS.aiayn] = sinusoidal_positions(max(MIN_POSITIONS, cfg.max_positions), cfg.d_model)
        params.append(POSITIONS)
    widths = {"qk": cfg.d_k, "v": cfg.d_v}
    parts: dict[str, dict[int, torch.Tensor]] = defaultdict(dict)  # CT2 name -> {part index: tensor}
    for p in params:
        x = state[p.aiayn]
        for dim, axis in enumerate(p.axes):
            if axis in widths:
                x = _pad_heads(x, dim, cfg.n_heads, widths[axis], head_dim(cfg))
        for name in p.ct2:
            parts[name][p.part[0]] = x
    return {name: torch.cat([ps[i] for i in sorted(ps)]).contiguous().numpy() for name, ps in parts.items()}


def _set(spec, path: str, value) -> None:
    """spec.<path> = value, for a path such as "decoder/layer_3/attention/linear_1/weight", where a scope
    "name_3" means element 3 of the list attribute `name` (layer, linear, embeddings)."""
    *scopes, leaf = path.split("/")
    for scope in scopes:
        name, _, index = scope.rpartition("_")
        items = getattr(spec, name, None) if index.isdigit() else None
        spec = items[int(index)] if isinstance(items, list) else getattr(spec, scope)
    setattr(spec, leaf, value)


def ct2_spec(model: Transformer, vocab):
    """The CTranslate2 TransformerSpec of `model`, with the shared vocabulary registered on both sides."""
    from ctranslate2.specs import TransformerSpec, common_spec, transformer_spec

    cfg = model.cfg
    activation = {"relu": common_spec.Activation.RELU, "swish": common_spec.Activation.SWISH}[cfg.activation]
    sides = dict(num_heads=cfg.n_heads, pre_norm=cfg.norm_first, activation=activation, head_dim=head_dim(cfg))
    spec = TransformerSpec(transformer_spec.TransformerEncoderSpec(cfg.n_enc_layers, **sides),
                           transformer_spec.TransformerDecoderSpec(cfg.n_dec_layers, **sides))
    for name, value in ct2_variables(model).items():
        _set(spec, name, value)
    bias = model.output_bias  # the paper's tied output has none; an imported OPUS-MT model's has one
    spec.decoder.projection.bias = np.zeros(cfg.vocab_size, dtype=np.float32) if bias is None else \
        bias.detach().float().cpu().numpy().copy()
    scale = np.float32(1 / math.sqrt(cfg.d_k))  # the paper's 1/sqrt(d_k), whatever the padded head width
    for layer in [*spec.encoder.layer, *spec.decoder.layer]:
        for attention in (layer.self_attention, getattr(layer, "attention", None)):
            if attention is not None:
                attention.queries_scale = scale
    pieces = [vocab.piece(i) for i in range(len(vocab))]
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    spec.config.add_source_eos = True  # aiayn's sources end with EOS
    spec.config.decoder_start_token = spec.config.bos_token = vocab.piece(BOS_ID)
    spec.config.eos_token, spec.config.unk_token = vocab.piece(EOS_ID), vocab.piece(UNK_ID)
    spec.config.layer_norm_epsilon = cfg.layer_norm_eps
    return spec


_USAGE = """\
```python
import ctranslate2, sentencepiece as spm

sp = spm.SentencePieceProcessor(model_file="{path}/vocab.model")
translator = ctranslate2.Translator("{path}", device="cpu")
pieces = sp.encode(["A man is riding a bike."], out_type=str)
out = translator.translate_batch(pieces, beam_size=4, length_penalty=0.6, max_decoding_length=256,
                                 suppress_sequences=[["<pad>"], ["<s>"]])
print(sp.decode(out[0].hypotheses[0]))
```

Or through aiayn: `aiayn translate --engine ct2 --checkpoint {path} --lp power` (search flags map as below)."""

# An imported OPUS-MT model (marian.py): its two SentencePiece models, written beside vocab.model (aiayn's paired file)
_PAIRED_USAGE = """\
```python
import ctranslate2, sentencepiece as spm

source = spm.SentencePieceProcessor(model_file="{path}/source.spm")
target = spm.SentencePieceProcessor(model_file="{path}/target.spm")
translator = ctranslate2.Translator("{path}", device="cpu")
pieces = source.encode(["A man is riding a bike."], out_type=str)
out = translator.translate_batch(pieces, beam_size=4, length_penalty=0.6, max_decoding_length=256,
                                 suppress_sequences=[["<pad>"], ["<s>"]])
print(target.decode_pieces(out[0].hypotheses[0]).replace("\u2581", " ").strip())
```

Or through aiayn: `aiayn translate --engine ct2 --checkpoint {path} --lp power` (search flags map as below)."""


def export_ct2(model: Transformer, vocab, out: Path, quantization: str | None = None,
               prov: Provenance | None = None, shortlist: Shortlist | None = None,
               languages: tuple[str, str] | None = None) -> Path:
    """Write `out`: a CTranslate2 folder (model.bin, config.json, shared vocabulary, vocab.model, aiayn.json,
    README.md), the weights quantized as `quantization` says (None: float32); with a `shortlist` (aiayn.shortlist),
    also its vocabulary map, vmap.txt (CTranslate2's use_vmap). aiayn.json records the model config, the
    quantization and the (source, target) `languages` (None: unknown), which `aiayn serve` reads. Returns `out`."""
    from ctranslate2.converters.converter import Converter

    if quantization is not None and quantization not in QUANTIZATIONS:
        raise UsageError(f"unknown quantization {quantization!r}; choose one of: {', '.join(QUANTIZATIONS)}")
    spec = ct2_spec(model, vocab)

    class _Given(Converter):  # CTranslate2's validate / de-duplicate / quantize / save steps, on our spec
        def _load(self):
            return spec

    with fresh_folder(out) as tmp:
        _Given().convert(str(tmp), quantization=quantization, force=True)
        shutil.copyfile(vocab.model_path, tmp / MODEL_FILE)
        paired = hasattr(vocab, "spm_bytes")  # an imported OPUS-MT model's MarianVocab
        if paired:
            for name, model_bytes in zip(("source.spm", "target.spm"), vocab.spm_bytes):
                (tmp / name).write_bytes(model_bytes)
        if shortlist is not None:  # where CTranslate2 looks for it (its converters' --vocab_mapping copies it there)
            (tmp / VMAP_FILE).write_text("\n".join(vmap_lines(shortlist, vocab)) + "\n", encoding="utf-8")
        pair = {"source": languages[0], "target": languages[1]} if languages else None
        (tmp / AIAYN_FILE).write_text(json.dumps({"model": model.cfg.to_dict(), "quantization": quantization,
                                                  "languages": pair}, indent=2) + "\n")
        usage = (_PAIRED_USAGE if paired else _USAGE).format(path=Path(out).name)
        write_card(tmp, model.cfg, prov or Provenance(), "ct2", usage, DECODING_NOTES,
                   quantization or "float32")
    return Path(out)


# ---------------------------------------------------------------------------------------------------------
# Decoding through CTranslate2.


def limit_batches(sources: Sequence[list[int] | None], search: SearchConfig, cap: int | None,
                  batch_size: int) -> list[tuple[int, list[int]]]:
    """(word limit, source indices) batches for engines that take one limit per call: the sentences sorted by length
    (so a batch holds sentences of near-equal limits), `batch_size` a batch, each batch's limit the largest of its
    sentences' limits int(a * x + b) (x = source tokens with EOS; capped at `cap`). None = skipped.
    `own_limits` gives each sentence's own limit, which a caller checks its outputs against."""
    limits = own_limits(sources, search, cap)
    order = sorted(limits, key=lambda i: (len(sources[i]), i))
    batches = [order[start: start + batch_size] for start in range(0, len(order), batch_size)]
    return [(max(limits[i] for i in idx), idx) for idx in batches]


def own_limits(sources: Sequence[list[int] | None], search: SearchConfig, cap: int | None) -> dict[int, int]:
    """{source index: its word limit int(a * x + b)} (x = tokens with EOS, raised to min_len, capped at `cap`), the
    blank (None) sources left out: aiayn.search.max_output_lengths, in plain Python."""
    limits = {}
    for i, source in enumerate(sources):
        if source is not None:
            limit = max(math.floor(search.max_len_a * len(source) + search.max_len_b), search.min_len)
            limits[i] = limit if cap is None else min(limit, cap)
    return limits


class CT2Translator:
    """An exported CTranslate2 folder with its vocabulary and config: text in, text out, as aiayn's Translator; and
    Translator's id-level API (encode, search_ids, check_prefixes, glossary_terms), through which `aiayn serve`
    batches requests for it as for an aiayn model (aiayn.serve.batcher).

    threads: CPU threads (default: as many as torch uses, torch.get_num_threads(); CTranslate2's own default of 4
    stalls on a busy 2-core machine). compute_type: CTranslate2's ("default" = as exported; "int8", ...;
    COMPUTE_TYPES maps aiayn's decoding precisions to it). use_vmap: decode with the folder's vocabulary map (the run's
    shortlist, VMAP_FILE), as CTranslate2's option of that name. search, batch_size, patience, max_input_len: what
    search_ids decodes with (translate_nbest takes its own)."""

    COMPUTE_TYPES = {"fp32": "default", "bf16": "bfloat16", "int8": "int8"}  # aiayn.inference.PRECISIONS -> CT2's

    def __init__(self, model_dir: Path | str, device: str = "cpu", compute_type: str = "default",
                 threads: int | None = None, use_vmap: bool = False, search: SearchConfig | None = None,
                 batch_size: int = 64, patience: float | None = None, max_input_len: int | None = None):
        import ctranslate2

        from aiayn.data import Vocab

        model_dir = Path(model_dir)
        if not is_ct2_folder(model_dir):
            raise UserError(f"{model_dir} is not a CTranslate2 folder written by `aiayn export --to ct2`")
        if use_vmap and not (model_dir / VMAP_FILE).is_file():
            raise UsageError(f"{model_dir} has no vocabulary map ({VMAP_FILE}); export it from a run with a shortlist "
                             "(aiayn shortlist --out RUN, then aiayn export --to ct2)")
        self.model_dir, self.use_vmap, self.compute_type = model_dir, use_vmap, compute_type
        record = json.loads((model_dir / AIAYN_FILE).read_text())
        self.cfg, self.quantization = ModelConfig.from_dict(record["model"]), record.get("quantization")
        self.vocab = Vocab.load(model_dir / MODEL_FILE)
        supported = ctranslate2.get_supported_compute_types(device)
        if compute_type != "default" and compute_type not in supported:
            raise UsageError(f"CTranslate2 cannot compute in {compute_type} on this {device} (it can in "
                             f"{', '.join(sorted(supported))}): choose another --precision, or --engine aiayn")
        self.translator = ctranslate2.Translator(str(model_dir), device=device, compute_type=compute_type,
                                                 intra_threads=threads or torch.get_num_threads())
        self.device = torch.device(device)
        self.precision = next((p for p, c in self.COMPUTE_TYPES.items() if c == compute_type), compute_type)
        self.search, self.batch_size, self.patience = search, batch_size, patience
        self.max_input_len = max_input_len or self.cfg.max_positions
        self.shortlist = None  # aiayn's shortlist: none here (use_vmap is CTranslate2's own)

    def translate_nbest(self, lines: Sequence[str], search: SearchConfig, batch_size: int = 64,
                        max_input_len: int | None = None, patience: float | None = None,
                        prefixes: Sequence[str | None] | None = None) -> list[list[Translation]]:
        """Up to search.nbest translations per line, best first; a blank line gives one empty translation.

        search.lp must be "power" (DECODING_NOTES: what maps how). Inputs longer than max_input_len tokens (EOS
        included; default the model's max_positions) are cut, with a warning, as aiayn's Translator cuts them.
        patience: CTranslate2's beam stopping rule (DECODING_NOTES; default search.beam_patience, or CTranslate2's
        own 1 where that is 0). prefixes: per line, the text its translations
        start with (CTranslate2's target_prefix; "" or None: none)."""
        vocab = self.vocab
        sources = encode_sources(vocab, lines, max_input_len or self.cfg.max_positions)  # ids + EOS; None = blank
        prefix_ids = encode_prefixes(vocab, [p or "" for p in prefixes or [""] * len(sources)])
        hyps = self._search(sources, prefix_ids, search, batch_size, patience)
        return [[Translation(vocab.decode(h.tokens), h.score, h.tokens) for h in hs] for hs in hyps]

    def translate(self, lines: Sequence[str], search: SearchConfig, **options) -> list[str]:
        """The best translation of each line (options: those of `translate_nbest`)."""
        return [hyps[0].text for hyps in self.translate_nbest(lines, search, **options)]

    # ---- aiayn.translate.Translator's id-level API, with the search given at construction (aiayn serve)

    def encode(self, lines: Sequence[str]) -> list[list[int] | None]:
        return encode_sources(self.vocab, lines, self.max_input_len)

    def search_ids(self, sources: Sequence[list[int] | None], progress: bool = False, constraint=None,
                   prefixes: Sequence[list[int]] | None = None, line_numbers: Sequence[int] | None = None,
                   terms=None) -> list[list[Hypothesis]]:
        """As Translator.search_ids, with self.search; a constraint or glossary terms are a UsageError (CTranslate2
        has neither), and so is sampling (translate_nbest's errors)."""
        if constraint is not None or any(terms or []):
            raise UsageError("a CTranslate2 model decodes without constraints or a glossary; serve the run itself "
                             "(aiayn's search) for those")
        return self._search(sources, prefixes or [[] for _ in sources], self.search, len(sources) or 1,
                            self.patience)

    def check_prefixes(self, sources: Sequence[list[int] | None], prefixes: Sequence[list[int]]) -> None:
        """A UsageError naming the first line whose prefix is longer than its translation may be."""
        limits = own_limits(sources, self.search, self._positions() - 1)
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
        parameters at the compute type's width (int8: 1 byte, bfloat16 and float16: 2)."""
        width = {"int8": 1, "bfloat16": 2, "float16": 2}
        asked = next((w for name, w in width.items() if self.compute_type.startswith(name)), None)
        exported = next((w for name, w in width.items() if (self.quantization or "").startswith(name)), 4)
        size = (self.model_dir / "model.bin").stat().st_size
        return size if asked is None or asked == exported else size * asked // exported

    # ---- the search

    def _positions(self) -> int:
        cfg = self.cfg
        return cfg.max_positions if cfg.positional == "learned" else max(MIN_POSITIONS, cfg.max_positions)

    def _search(self, sources: Sequence[list[int] | None], prefix_ids: Sequence[list[int]], search: SearchConfig,
                batch_size: int, patience: float | None) -> list[list[Hypothesis]]:
        """Up to search.nbest hypotheses per source (ids + EOS; None = blank: one empty hypothesis), best first."""
        if search.lp != "power":
            raise UsageError("CTranslate2's length penalty is |Y|^alpha: decode with --lp power (the paper's GNMT "
                             "penalty ((5 + |Y|) / 6)^alpha has no CTranslate2 equivalent)")
        if search.sampling:
            raise UsageError("--engine ct2 does not sample: aiayn's samples come from one generator per input line "
                             "(the same in any batch), CTranslate2's from one per process; use --engine aiayn")
        vocab = self.vocab
        results = [[Hypothesis([], 0.0)] for _ in sources]
        for n, (source, words) in enumerate(zip(sources, prefix_ids), 1):
            if source is None and words:
                raise UsageError(f"input line {n} is blank but has a target prefix; give a source")
        limits = own_limits(sources, search, self._positions() - 1)
        for i, limit in limits.items():
            if len(prefix_ids[i]) > limit:
                raise UsageError(f"input line {i + 1}: its prefix has {len(prefix_ids[i])} words, more than the "
                                 f"{limit} its translation may have (--max-len-a, --max-len-b)")
        patience = patience or search.beam_patience or 1.0
        options = dict(no_repeat_ngram_size=search.no_repeat_ngram_size, beam_size=search.beam, patience=patience,
                       num_hypotheses=search.nbest, length_penalty=search.alpha, min_decoding_length=search.min_len,
                       max_input_length=0, suppress_sequences=[[vocab.piece(PAD_ID)], [vocab.piece(BOS_ID)]],
                       return_scores=True, use_vmap=self.use_vmap)

        def decode(limit: int, idx: list[int]) -> None:
            target_prefix = [[vocab.piece(t) for t in prefix_ids[i]] for i in idx] if any(prefix_ids) else None
            out = self.translator.translate_batch(
                [[vocab.piece(t) for t in sources[i][:-1]] for i in idx],  # CTranslate2 appends the EOS itself
                target_prefix=target_prefix, max_decoding_length=limit, max_batch_size=len(idx), **options)
            for i, res in zip(idx, out):
                results[i] = [Hypothesis([vocab.piece_id(p) for p in h], s) for h, s in zip(res.hypotheses, res.scores)]

        # One call per batch of length-sorted sentences, at the batch's largest limit: few, full batches, as
        # CTranslate2 runs fastest. A sentence whose output reached its own, smaller limit is decoded again alone at
        # that limit, so every output is the one its own limit gives.
        batch_limit = {}
        for limit, idx in limit_batches(sources, search, self._positions() - 1, batch_size):
            decode(limit, idx)
            batch_limit.update(dict.fromkeys(idx, limit))
        for i, limit in limits.items():
            if batch_limit[i] > limit and any(len(h.tokens) >= limit for h in results[i]):
                decode(limit, [i])
        return results


def is_ct2_folder(path: Path | str) -> bool:
    """Whether `path` is a folder `aiayn export --to ct2` wrote (model.bin beside aiayn.json)."""
    return (Path(path) / "model.bin").is_file() and (Path(path) / AIAYN_FILE).is_file()


def translate_ct2(model_dir: Path | str, lines: Sequence[str], search: SearchConfig, **options) -> list[str]:
    """The best translation of each line through an exported CTranslate2 folder, searched as `search` says
    (search.lp must be "power"; DECODING_NOTES says what maps how). Options: `batch_size`, `max_input_len`,
    `patience` (CT2Translator.translate_nbest); `device`, `compute_type`, `threads`, `use_vmap` (CT2Translator)."""
    loading = {k: options.pop(k) for k in ("device", "compute_type", "threads", "use_vmap") if k in options}
    return CT2Translator(model_dir, **loading).translate(lines, search, **options)
