"""The lexical shortlist (Marian's --shortlist, CTranslate2's vocabulary map): decoding computes the output projection
only for the target pieces that the batch's source pieces translate to.

    build(src, src_offsets, tgt, tgt_offsets, V)   the training pairs' token ids -> Shortlist (deterministic)
    build_from_prepared(data_dir)                  the same from a prepared-data directory's train split
    Shortlist.save(path) / load(path, vocab)       one small safetensors file, RUN/shortlist.safetensors
                                                   (aiayn.rundir.SHORTLIST) beside the model
    Shortlist.allowed(src, prefixes)               a batch's target pieces: the union of its source pieces' lists, the
                                                   frequent pieces, the specials and its target prefixes' pieces
    Shortlist.restrict(model, src, prefixes)       the model whose logits are computed for those pieces only
                                                   (`Shortlisted`); every other piece's logit is -inf
    vmap_lines(shortlist, vocab)                   the same lists as CTranslate2's vocabulary map (vmap.txt)

How the pieces are chosen: over the training pairs, c(s) and c(t) count the pairs whose source holds piece s and whose
target holds piece t, c(s, t) the pairs holding both. Each source piece keeps the `per_source` target pieces of the
highest Dice coefficient 2 c(s, t) / (c(s) + c(t)) (ties: more co-occurrences first, then the lower id); Dice rather
than p(t | s) = c(s, t) / c(s), which ranks the frequent target pieces first for every source piece, and those are
kept anyway: the `frequent` most frequent target pieces (by token count) are always allowed. Specials are not
counted.

The searches rank the allowed pieces alone: a Shortlisted model's `decode_pieces` gives logits (N, V') for them, the
log-softmax normalizes over the shortlist (as Marian and CTranslate2 do), and what a search picks, column j, is piece
ids[j] (aiayn.decoding.search.shortlist_pieces); masks over the vocabulary (prefixes, n-gram bans, constraints) are
cut to those columns. Its `decode` gives the same logits as (N, V), -inf outside them, for any other caller (an
ensemble of shortlisted models, the glossary's constrained search). PAD and BOS are projected too and banned by the
search as ever, and the specials keep their columns, so a shortlist that holds every piece decodes exactly as the
full vocabulary.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from safetensors.torch import save as safetensors_bytes
from torch import Tensor, nn

from aiayn.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from aiayn.data.folder import load_split, read_meta
from aiayn.data.vocab import Vocab
from aiayn.decoding.ensemble import Ensemble
from aiayn.errors import CheckpointError, DataError, UsageError
from aiayn.files import atomic_write, sha256_file
from aiayn.rundir import RunDir

PER_SOURCE = 50  # target pieces kept per source piece (as the Bergamot translators' lex.50.50 shortlists)
FREQUENT = 100  # most frequent target pieces always allowed (docs/decoding.md: why these two)
SPECIALS = (PAD_ID, UNK_ID, BOS_ID, EOS_ID)  # always projected; the search bans PAD and BOS as ever
FORMAT = "aiayn-shortlist-1"
SCORE = "dice"
_CHUNK_PAIRS = 100_000  # pairs counted at once (memory: their (source piece, target piece) products)


# ---------------------------------------------------------------------------------------------------------
# Building.


@dataclass(frozen=True)
class Shortlist:
    """Per source piece the target pieces it may translate to, and the pieces always allowed."""

    per_source: Tensor  # (V, K) long: the target pieces of each source piece, best first, -1 past its last
    frequent: Tensor  # (F,) long: the most frequent target pieces, most frequent first
    vocab_sha256: str = ""  # the SentencePiece model's SHA-256 whose ids these are ("": not recorded)

    @property
    def vocab_size(self) -> int:
        return self.per_source.size(0)

    def describe(self) -> dict:
        """What /info and the CLI say about it."""
        return {"per_source": self.per_source.size(1), "frequent": self.frequent.numel(), "score": SCORE}

    def allowed(self, src: Tensor, prefixes: Sequence[Sequence[int]] | None = None) -> Tensor:
        """The sorted target ids a batch may produce: the lists of the pieces of src (B, S) (padded), the frequent
        pieces, the specials and every piece of the batch's target prefixes. (V',) long on src's device."""
        rows = self.per_source[src.unique().cpu()].flatten()
        parts = [rows, self.frequent, torch.tensor(SPECIALS)]
        parts += [torch.tensor(list(p), dtype=torch.long) for p in prefixes or () if p]
        ids = torch.cat(parts)
        return ids[ids.ge(0)].unique().to(src.device)

    def restrict(self, model: nn.Module, src: Tensor, prefixes: Sequence[Sequence[int]] | None = None) -> nn.Module:
        """`model` (a DecodingTransformer, or an Ensemble of them) with its logits computed for the batch's allowed
        pieces only: what the searches are given instead of it."""
        ids = self.allowed(src, prefixes)
        if isinstance(model, Ensemble):
            return Ensemble([Shortlisted(m, ids) for m in model.members])
        return Shortlisted(model, ids)

    def save(self, path: str | Path) -> Path:
        """One safetensors file, written atomically: int32 tables, how they were made in its metadata."""
        tensors = {"per_source": self.per_source.int().contiguous(), "frequent": self.frequent.int().contiguous()}
        meta = {"format": FORMAT, "score": SCORE, "vocab_sha256": self.vocab_sha256, **{
            k: str(v) for k, v in self.describe().items() if k != "score"}}
        return atomic_write(path, lambda p: Path(p).write_bytes(_same_bytes(safetensors_bytes(tensors, metadata=meta))))


def _same_bytes(data: bytes) -> bytes:
    """A safetensors file with its JSON header's keys sorted: safetensors writes them in a hash map's random order,
    so the same tables would otherwise give different bytes on every save."""
    n = int.from_bytes(data[:8], "little")
    header = json.dumps(json.loads(data[8:8 + n]), sort_keys=True, separators=(",", ":")).encode()
    return data[:8] + header.ljust(n) + data[8 + n:]


def pair_counts(src: np.ndarray, src_offsets: np.ndarray, tgt: np.ndarray, tgt_offsets: np.ndarray, vocab_size: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(codes s * V + t, c(s, t), c(s) (V,), c(t) (V,)) over the pairs: pair i's source is src[src_offsets[i]:
    src_offsets[i + 1]], its target likewise; each piece counts once per pair, specials not at all."""
    n, V = len(src_offsets) - 1, vocab_size
    codes, counts = np.zeros(0, np.int64), np.zeros(0, np.int64)
    c_src, c_tgt = np.zeros(V, np.int64), np.zeros(V, np.int64)
    for start in range(0, n, _CHUNK_PAIRS):
        end = min(n, start + _CHUNK_PAIRS)
        s_pair, s_ids = _pieces_per_pair(src, src_offsets, start, end, V)
        t_pair, t_ids = _pieces_per_pair(tgt, tgt_offsets, start, end, V)
        c_src += np.bincount(s_ids, minlength=V)
        c_tgt += np.bincount(t_ids, minlength=V)
        # every (source piece, target piece) of each pair: source piece j of pair i repeated for i's b_i targets
        b = np.bincount(t_pair, minlength=end - start)
        first = np.concatenate([[0], np.cumsum(b)[:-1]])  # where pair i's targets start in t_ids
        reps = b[s_pair]
        within = np.arange(reps.sum()) - np.repeat(np.cumsum(reps) - reps, reps)
        chunk = np.repeat(s_ids, reps) * V + t_ids[np.repeat(first[s_pair], reps) + within]
        codes, inverse = np.unique(np.concatenate([codes, chunk]), return_inverse=True)
        counts = np.bincount(inverse, weights=np.concatenate([counts, np.ones(len(chunk), np.int64)]),
                             minlength=len(codes)).astype(np.int64)
    return codes, counts, c_src, c_tgt


def _pieces_per_pair(ids: np.ndarray, offsets: np.ndarray, start: int, end: int, V: int
                     ) -> tuple[np.ndarray, np.ndarray]:
    """(pair index from `start`, piece) of the distinct non-special pieces of pairs start..end-1, by pair then id."""
    lengths = np.diff(offsets[start: end + 1])
    chunk = np.asarray(ids[offsets[start]: offsets[end]], dtype=np.int64)
    pair = np.repeat(np.arange(end - start), lengths)
    keep = chunk >= len(SPECIALS)
    code = np.unique(pair[keep] * V + chunk[keep])
    return code // V, code % V


def build(src: np.ndarray, src_offsets: np.ndarray, tgt: np.ndarray, tgt_offsets: np.ndarray, vocab_size: int,
          per_source: int = PER_SOURCE, frequent: int = FREQUENT, vocab_sha256: str = "") -> Shortlist:
    """The shortlist of training pairs given as flat token ids and their offsets (the prepared-data format: pair i's
    source is src[src_offsets[i]:src_offsets[i + 1]]): per source piece the `per_source` target pieces of best Dice
    coefficient, and the `frequent` most frequent target pieces (see the module docstring)."""
    V = vocab_size
    codes, both, c_src, c_tgt = pair_counts(src, src_offsets, tgt, tgt_offsets, V)
    s, t = codes // V, codes % V
    dice = 2.0 * both / (c_src[s] + c_tgt[t])
    order = np.lexsort((t, -both, -dice, s))  # by source piece, then Dice, co-occurrences, id
    s, t = s[order], t[order]
    rank = np.arange(len(s)) - np.searchsorted(s, s)  # place within its source piece's list
    keep = rank < per_source
    table = np.full((V, per_source), -1, dtype=np.int64)
    table[s[keep], rank[keep]] = t[keep]
    tokens = np.bincount(np.asarray(tgt, dtype=np.int64), minlength=V)[:V]
    tokens[: len(SPECIALS)] = 0
    top = np.argsort(-tokens, kind="stable")[:frequent]
    return Shortlist(torch.from_numpy(table), torch.from_numpy(top[tokens[top] > 0].copy()), vocab_sha256)


def build_from_prepared(data_dir: str | Path, per_source: int = PER_SOURCE, frequent: int = FREQUENT) -> Shortlist:
    """The shortlist of a prepared-data directory's train split (aiayn.data.folder), for its vocabulary."""
    data_dir = Path(data_dir)
    read_meta(data_dir)  # a run directory or anything else given here is named
    train = load_split(data_dir, "train")
    src, tgt = train.ids()
    vocab = Vocab.load(data_dir)
    return build(src, train.offsets[0], tgt, train.offsets[1], len(vocab), per_source, frequent,
                 sha256_file(vocab.model_path))


# ---------------------------------------------------------------------------------------------------------
# Loading.


def load(path: str | Path, vocab=None) -> Shortlist:
    """A shortlist file, checked against `vocab` (aiayn.data.Vocab: its size and, where recorded, its file)."""
    path = _existing(Path(path))
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{path} is not a shortlist file ({e}); build it again with `aiayn shortlist`") from None
    per_source, frequent = tensors.get("per_source"), tensors.get("frequent")
    if meta.get("format") != FORMAT or per_source is None or per_source.dim() != 2 or frequent is None:
        raise CheckpointError(f"{path} is not a shortlist written by `aiayn shortlist` (format {FORMAT})")
    shortlist = Shortlist(per_source.long(), frequent.long(), meta.get("vocab_sha256", ""))
    if vocab is not None:
        _check_vocab(shortlist, path, vocab)
    return shortlist


def run_file(checkpoint: str | Path, path: str | Path | None = None) -> Path:
    """The shortlist file to decode `checkpoint` with: `path`, or else the one of the run the checkpoint belongs to
    (RUN/shortlist.safetensors). One that does not exist is a UsageError that says how to build it."""
    if path is not None:
        return _existing(Path(path))
    path = RunDir.of(checkpoint).shortlist
    if not path.is_file():
        raise UsageError(f"{checkpoint} has no shortlist ({path}); build it with `aiayn shortlist --out "
                         f"{path.parent}` (from the data the run was trained on), or give --shortlist FILE")
    return path


def _existing(path: Path) -> Path:
    if not path.is_file():
        raise UsageError(f"no shortlist at {path}; build one with `aiayn shortlist --data DATA --output {path}`")
    return path


def _check_vocab(shortlist: Shortlist, path: Path, vocab) -> None:
    ids = torch.cat([shortlist.per_source.flatten(), shortlist.frequent])
    other = shortlist.vocab_size != len(vocab) or bool(ids.ge(len(vocab)).any())
    if not other and shortlist.vocab_sha256 and Path(vocab.model_path).is_file():
        other = shortlist.vocab_sha256 != sha256_file(vocab.model_path)
    if other:
        raise DataError(f"{path} was built for another vocabulary than the model's ({vocab.model_path}); build it "
                        "again from the data the model was trained on (aiayn shortlist --data DATA --out RUN)")


# ---------------------------------------------------------------------------------------------------------
# Decoding with it.


class Shortlisted(nn.Module):
    """A decoding model (aiayn.decoding.inference.DecodingTransformer) whose logits are computed for `ids` only: the
    rows of the tied output projection for those pieces, in the model's precision (`output_rows`); every other piece's
    logit is -inf. It has the three methods the searches call (encode, decode, new_cache) and the model's cfg."""

    def __init__(self, model: nn.Module, ids: Tensor):
        super().__init__()
        if ids[: len(SPECIALS)].tolist() != sorted(SPECIALS):
            raise ValueError("a shortlist's pieces are sorted and hold the specials: they keep their columns")
        self.model, self.cfg, self.ids = model, model.cfg, ids
        self.project = model.output_rows(ids)

    def encode(self, src: Tensor) -> Tensor:
        return self.model.encode(src)

    def new_cache(self):
        return self.model.new_cache()

    def decode_pieces(self, tgt_in: Tensor, memory: Tensor, src_pad: Tensor | None, cache=None) -> Tensor:
        """Logits (N, T, V') of the allowed pieces `ids` alone (column j: piece ids[j]): what the searches rank."""
        return self.project(self.model.decode_hidden(tgt_in, memory, src_pad, cache))

    def decode(self, tgt_in: Tensor, memory: Tensor, src_pad: Tensor | None, cache=None) -> Tensor:
        """Logits (N, T, V): the allowed pieces' as the model computes them, -inf elsewhere."""
        sub = self.decode_pieces(tgt_in, memory, src_pad, cache)  # (N, T, V')
        logits = sub.new_full((*sub.shape[:-1], self.cfg.vocab_size), float("-inf"))
        return logits.index_copy_(-1, self.ids, sub)


# ---------------------------------------------------------------------------------------------------------
# CTranslate2's vocabulary map.


def vmap_lines(shortlist: Shortlist, vocab) -> list[str]:
    """CTranslate2's vocabulary map (vmap.txt) of the shortlist: one line "SOURCE_PIECE<TAB>TARGET_PIECE ..." per
    source piece with a list, and "<TAB>FREQUENT ..." (the empty source: always allowed). CTranslate2 adds UNK, BOS
    and EOS itself (BOS is then suppressed by the search, as aiayn bans it)."""
    piece = [vocab.piece(i) for i in range(len(vocab))]
    bad = next((p for p in piece if not p or any(c.isspace() for c in p)), None)
    if bad is not None:
        raise UsageError(f"the vocabulary holds the piece {bad!r}, which CTranslate2's vocabulary map cannot write "
                         "(it splits on spaces and tabs); export from a run without a shortlist")
    lines = ["\t" + " ".join(piece[t] for t in shortlist.frequent.tolist())]
    for s, row in enumerate(shortlist.per_source.tolist()):
        targets = [piece[t] for t in row if t >= 0]
        if targets and s >= len(SPECIALS):
            lines.append(f"{piece[s]}\t{' '.join(targets)}")
    return lines


def coverage(shortlist: Shortlist, sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]]) -> float:
    """The share of the target pieces (specials not counted) that lie in their own source's allowed set: how much of
    a reference translation a shortlist leaves reachable."""
    found = total = 0
    for s, t in zip(sources, targets):
        allowed = set(shortlist.allowed(torch.tensor([list(s) or [PAD_ID]])).tolist())
        words = [w for w in t if w >= len(SPECIALS)]
        found, total = found + sum(w in allowed for w in words), total + len(words)
    return found / max(1, total)
