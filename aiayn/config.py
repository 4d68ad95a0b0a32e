"""Configuration: the model's (one frozen dataclass, and the paper's presets by name), the search's (SearchConfig),
and the names of decoding precisions and devices. Plain Python, without torch: the command line reads it before any
model is loaded.

Every preset is a row of the paper (section 3, Table 3, section 6.3; docs/paper.md) or a small CPU size. The config is
saved inside every checkpoint (as JSON), so a checkpoint describes itself. The paper's published results (Table 3's
PPL, BLEU and parameter columns) live in aiayn.experiments.paper.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any

from aiayn.errors import UsageError

# Fixed special ids of the shared vocabulary (SentencePiece is trained with these; see aiayn.data).
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3

# The paper's shared BPE vocabulary for WMT14 EN-DE (section 5.1).
PAPER_VOCAB = 37_000


@dataclass(frozen=True)
class ModelConfig:
    """Hyper-parameters of one Transformer (names as in the paper's Table 3; docs/paper.md)."""

    vocab_size: int = PAPER_VOCAB
    n_enc_layers: int = 6  # N (encoder)
    n_dec_layers: int = 6  # N (decoder)
    d_model: int = 512
    d_ff: int = 2048
    n_heads: int = 8  # h
    d_k: int = 64  # query/key width per head; h * d_k need not equal d_model (Table 3 rows A, B)
    d_v: int = 64  # value width per head
    dropout: float = 0.1  # P_drop: sub-layer outputs and embedding + position sums
    label_smoothing: float = 0.1  # eps_ls; a training setting kept here because Table 3 row D varies it
    positional: str = "sinusoidal"  # "sinusoidal" (paper) or "learned" (Table 3 row E)
    max_positions: int = 1024  # table size for learned positions; sinusoids are computed for any length
    norm_first: bool = False  # False = post-norm LayerNorm(x + Dropout(Sublayer(x))) as the paper
    layer_norm_eps: float = 1e-5
    init: str = "xavier"  # projections' initialization (the paper gives none): "xavier" or "fairseq" (docs/model.md)
    # Imported OPUS-MT models (aiayn import; docs/import.md), not the paper's: the feed-forward activation ("relu" as
    # eq. 2, or "swish": x * sigmoid(x)) and a bias on the tied output projection (Marian's final_logits_bias).
    activation: str = "relu"
    output_bias: bool = False

    def __post_init__(self) -> None:
        check_types(self)
        if self.positional not in ("sinusoidal", "learned"):
            raise UsageError(f"positional must be 'sinusoidal' or 'learned', not {self.positional!r}")
        if self.init not in INITS:
            raise UsageError(f"init must be one of {', '.join(INITS)}, not {self.init!r}")
        if self.activation not in ACTIVATIONS:
            raise UsageError(f"activation must be one of {', '.join(ACTIVATIONS)}, not {self.activation!r}")
        if self.d_model % 2:
            raise UsageError(f"d_model must be even for sinusoidal positions, got {self.d_model}")
        for name, most in _MAX_SIZES.items():
            if not 1 <= getattr(self, name) <= most:
                raise UsageError(f"{name} must lie in 1..{most:,}, got {getattr(self, name)}")
        for name in ("dropout", "label_smoothing"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise UsageError(f"{name} must lie in [0, 1), got {getattr(self, name)}")
        if not 0.0 < self.layer_norm_eps < 1.0:
            raise UsageError(f"layer_norm_eps must lie in (0, 1), got {self.layer_norm_eps}")

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> ModelConfig:
        """A named preset (`base`, `big`, `A1`..`E`, `parse`, `tiny`, `small`) with fields overridden."""
        if name not in PRESETS:
            raise UsageError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}")
        check_fields(cls, overrides, "model config fields")
        return dataclasses.replace(cls(**PRESETS[name]), **overrides)

    def replace(self, **overrides: Any) -> ModelConfig:
        return dataclasses.replace(self, **overrides)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelConfig:
        if not isinstance(d, dict):
            raise UsageError(f"a model config is a mapping of field: value, not {type(d).__name__}")
        check_fields(cls, d, "model config fields")
        return cls(**d)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)


# How the projections start (the paper does not say; docs/model.md): "xavier" = Xavier-uniform weights and zero biases
# everywhere; "fairseq" = fairseq 0.12's transformer: W^Q/W^K/W^V Xavier-uniform with gain 1/sqrt(2), W^O
# Xavier-uniform with zero bias, and torch's nn.Linear default for the Q/K/V biases and the feed-forward layers.
INITS = ("xavier", "fairseq")

# The feed-forward activation: "relu", max(0, x) as eq. 2; "swish", x * sigmoid(x) (torch's silu), OPUS-MT's.
ACTIVATIONS = ("relu", "swish")

# Upper bounds far beyond any published Transformer (big: d_model 1024, d_ff 4096, 16 heads, 6 layers). A config read
# from a checkpoint is untrusted input: these bound what building its model allocates (the sinusoid table alone is
# max_positions x d_model), so a damaged or hostile file is refused before any tensor exists.
_MAX_SIZES = {"vocab_size": 1 << 20, "n_enc_layers": 256, "n_dec_layers": 256, "d_model": 1 << 14, "d_ff": 1 << 17,
              "n_heads": 1024, "d_k": 1 << 14, "d_v": 1 << 14, "max_positions": 1 << 16}

_TYPE_NAMES = {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false"}


def check_types(obj: Any) -> None:
    """Refuse field values of the wrong type (from JSON, YAML, --set or a checkpoint), before any comparison: an int
    field takes an int (not a bool), a float field an int or float, a str field a str, a bool field a bool."""
    for f in dataclasses.fields(obj):
        value, kind = getattr(obj, f.name), str(f.type)
        ok = {"int": isinstance(value, int) and not isinstance(value, bool),
              "float": isinstance(value, (int, float)) and not isinstance(value, bool),
              "str": isinstance(value, str), "bool": isinstance(value, bool)}.get(kind, True)
        if not ok:
            raise UsageError(f"{f.name} must be {_TYPE_NAMES[kind]}, got {value!r}")


def check_fields(cls: type, d: dict[str, Any], what: str) -> None:
    """Refuse keys that are not fields of the dataclass `cls`, naming the known ones."""
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = set(d) - known
    if unknown:
        raise UsageError(f"unknown {what}: {sorted(unknown)}; known: {sorted(known)}")


def _base(**kw: Any) -> dict[str, Any]:
    return {**dataclasses.asdict(ModelConfig()), **kw}


def _heads(h: int) -> dict[str, Any]:
    return _base(n_heads=h, d_k=512 // h, d_v=512 // h)


# Table 3 in the paper's order; blank cells = base. (C) rows that change d_model also change d_k = d_v.
PRESETS: dict[str, dict[str, Any]] = {
    "base": _base(),
    "big": _base(d_model=1024, d_ff=4096, n_heads=16, d_k=64, d_v=64, dropout=0.3),
    "A1": _heads(1),
    "A2": _heads(4),
    "A3": _heads(16),
    "A4": _heads(32),
    "B1": _base(d_k=16),
    "B2": _base(d_k=32),
    "C1": _base(n_enc_layers=2, n_dec_layers=2),
    "C2": _base(n_enc_layers=4, n_dec_layers=4),
    "C3": _base(n_enc_layers=8, n_dec_layers=8),
    "C4": _base(d_model=256, d_k=32, d_v=32),
    "C5": _base(d_model=1024, d_k=128, d_v=128),
    "C6": _base(d_ff=1024),
    "C7": _base(d_ff=4096),
    "D1": _base(dropout=0.0),
    "D2": _base(dropout=0.2),
    "D3": _base(label_smoothing=0.0),
    "D4": _base(label_smoothing=0.2),
    "E": _base(positional="learned"),
    # Section 6.3: 4 layers, d_model 1024 (h = 16 so d_k = 64 as in big), vocabulary 16K (WSJ only).
    "parse": _base(n_enc_layers=4, n_dec_layers=4, d_model=1024, d_ff=4096, n_heads=16, vocab_size=16_000),
    # Small CPU sizes (not in the paper): `tiny` for tests, `small` for training on 2 CPU cores.
    "tiny": _base(vocab_size=1000, n_enc_layers=2, n_dec_layers=2, d_model=32, d_ff=64, n_heads=4, d_k=8,
                  d_v=8, max_positions=256),
    "small": _base(vocab_size=8000, n_enc_layers=3, n_dec_layers=3, d_model=256, d_ff=1024, n_heads=4,
                   d_k=64, d_v=64),
    # `parse` on 2 CPU cores (configs/ptb-parse.yaml): the paper's 4+4 layers at `small` width, a 2,000-piece
    # vocabulary (the structure tokens are ~50 of it; a larger one mostly costs output-layer time), P_drop 0.3.
    "parse-small": _base(vocab_size=2000, n_enc_layers=4, n_dec_layers=4, d_model=256, d_ff=1024, n_heads=4,
                         d_k=64, d_v=64, dropout=0.3),
    # Students for `aiayn distill` (not in the paper): a deep encoder and a shallow decoder (Kasai et al. 2021; the
    # decoder runs once per output word, the encoder once per sentence), embeddings tied as everywhere, at small width.
    "student-6-1": _base(vocab_size=8000, n_enc_layers=6, n_dec_layers=1, d_model=256, d_ff=1024, n_heads=4,
                         d_k=64, d_v=64),
    "student-6-2": _base(vocab_size=8000, n_enc_layers=6, n_dec_layers=2, d_model=256, d_ff=1024, n_heads=4,
                         d_k=64, d_v=64),
    "student-6-1-tiny": _base(vocab_size=8000, n_enc_layers=6, n_dec_layers=1, d_model=128, d_ff=512, n_heads=4,
                              d_k=32, d_v=32),
}
# `aiayn distill`'s student when none is named: not a preset but the teacher itself cut to all its encoder layers
# and two decoder layers, then fine-tuned (aiayn.training.shrink); measured better than these presets, and than one
# decoder layer, which lost 0.67-0.76 BLEU greedy where two lost 0.10-0.40 at 3.7-3.9x the teacher's speed
# (docs/distill.md).
DEFAULT_STUDENT = "teacher-all-2"


@dataclass(frozen=True)
class SearchConfig:
    """How to search: every option a search takes, in one place (defaults are the paper's, section 6.1). The weights
    it searches with (fp32, bf16, int8) are the model's business: aiayn.decoding.inference."""

    beam: int = 4  # 1 = greedy search
    alpha: float = 0.6  # length penalty exponent
    lp: str = "gnmt"  # "gnmt": ((5 + |Y|) / 6)^alpha (the paper's); "power": |Y|^alpha (fairseq, HF, CTranslate2)
    max_len_a: float = 1.0  # at most int(a * source tokens + b) words
    max_len_b: int = 50
    min_len: int = 1  # EOS banned before this many words
    nbest: int = 1  # hypotheses returned per sentence (<= beam); with sampling: samples drawn per sentence
    beam_patience: float = 0.0  # 0: stop when nothing alive can win (the paper's); p > 0: once beam * p have finished
    no_repeat_ngram_size: int = 0  # ban a token that would repeat an n-gram of the hypothesis (0: off)
    sampling: bool = False  # draw every token instead of searching (`beam` is then not used)
    top_k: int = 0  # sampling: from the k most probable tokens only (0: all)
    top_p: float = 1.0  # sampling: from the nucleus only, the fewest most probable tokens of mass >= p
    temperature: float = 1.0  # sampling: softmax(log-probs / T); 0 = the argmax (greedy search)
    seed: int = 0  # sampling: input line i draws from a generator seeded by (seed, i)
    scores: bool = True  # False: greedy search takes the argmax of the logits, no log-softmax, and returns no
    # scores (NaN; the same words), as CTranslate2 unless asked; beam search, sampling and the fixed-shape search
    # (search_impl "fixed") score all the same

    def __post_init__(self) -> None:
        if self.beam < 1:
            raise UsageError(f"beam must be >= 1, got {self.beam}")
        if self.nbest < 1 or (self.nbest > self.beam and not self.sampling):
            raise UsageError(f"nbest must lie in 1..beam ({self.beam}), got {self.nbest}")
        if not self.beam_patience >= 0:  # NaN fails too
            raise UsageError(f"beam_patience must be >= 0 (0: stop when no live hypothesis can win), got "
                             f"{self.beam_patience}")
        if self.beam_patience and self.finished_enough < self.nbest and not self.sampling:
            raise UsageError(f"beam_patience {self.beam_patience} stops after {self.finished_enough} finished "
                             f"hypotheses, fewer than nbest {self.nbest}: make it >= {self.nbest / self.beam:g}")
        if self.no_repeat_ngram_size < 0:
            raise UsageError(f"no_repeat_ngram_size must be >= 0 (0: off), got {self.no_repeat_ngram_size}")
        if self.top_k < 0:
            raise UsageError(f"top_k must be >= 0 (0: all tokens), got {self.top_k}")
        if not 0 < self.top_p <= 1:  # NaN fails too
            raise UsageError(f"top_p must lie in (0, 1], got {self.top_p}")
        if not self.temperature >= 0:
            raise UsageError(f"temperature must be >= 0 (0: greedy), got {self.temperature}")
        unused = [name for name, value, default in (("top_k", self.top_k, 0), ("top_p", self.top_p, 1.0),
                  ("temperature", self.temperature, 1.0), ("seed", self.seed, 0)) if value != default]
        if unused and not self.sampling:
            raise UsageError(f"{', '.join(unused)} only apply to sampling: add sampling (--sampling)")
        if self.lp not in ("gnmt", "power"):
            raise UsageError(f"length penalty kind must be 'gnmt' or 'power', not {self.lp!r}")
        if self.min_len < 0 or self.max_len_b < 0 or self.max_len_a < 0:
            raise UsageError("min_len, max_len_a and max_len_b must be >= 0")


    @property
    def finished_enough(self) -> int:
        """With beam_patience p > 0: a sentence's search is over once this many hypotheses have finished."""
        return max(1, math.ceil(self.beam * self.beam_patience))

    def word_limit(self, tokens: int, cap: int | None = None) -> int:
        """The most words a translation of a source of `tokens` tokens (EOS included, padding not) may have:
        int(max_len_a * tokens + max_len_b), raised to min_len, cut to `cap` (aiayn.decoding.search.max_output_lengths
        on tensors; this is it for one sentence, in plain Python)."""
        limit = max(math.floor(self.max_len_a * tokens + self.max_len_b), self.min_len)
        return limit if cap is None else min(limit, cap)


PAPER_SEARCH = SearchConfig()  # beam 4, alpha 0.6, max length = input + 50 (section 6.1)

PRECISIONS = ("fp32", "bf16", "int8")  # the number formats decoding runs in (aiayn.decoding.inference)
# --device's help in every command (cli.common.add_device_arg, TrainConfig.device): the names runtime.resolve_device
# reads
DEVICE_HELP = "auto (a CUDA GPU if there is one, else CPU), cpu, cuda, cuda:N"
SEARCH_IMPLS = ("auto", "eager", "fixed")  # how a Translator runs its search (aiayn.decoding.translator.Translator)
