"""A lexical word aligner trained on a run's own training pairs: fast_align's model (Dyer, Chahuneau and Smith 2013,
"A Simple, Fast, and Effective Reparameterization of IBM Model 2"), in numpy, on the SentencePiece pieces the model
reads, both directions, symmetrised. What `Translation.alignment` gives where the run has its file
(RUN/aligner.safetensors, written by `aiayn shortlist --aligner`); the cross-attention otherwise.

    train(src, src_offsets, tgt, tgt_offsets, V)   the training pairs' token ids -> Aligner (deterministic)
    build_from_prepared(data_dir)                  the same from a prepared-data directory's train split
    Aligner.links(src_ids, tgt_ids, vocab)         one pair's word links, at most one per target word (fast_align form)
    save(path) / load(path)                        one safetensors file, written atomically

The model of one direction, target piece f_j given the source pieces e_0..e_{n-1} and NULL (n source, m target pieces):
    p(a_j = NULL) = p0,  p(a_j = i) = (1 - p0) * exp(-lam * |(i + .5) / n - (j + .5) / m|) / Z_j,
    p(f_j | e) = sum_i p(a_j = i) * t(f_j | e_i)
trained by EM: `ibm1` iterations without the diagonal term (IBM Model 1) from a uniform t, then `iterations` with it.
Both directions are trained (target given source, source given target); a pair's piece posteriors are merged to
words (each target word's row: the mean over its pieces, each source word's weight the sum over its pieces, as
aiayn.decoding.alignment does with attention) and its links are the intersection of both directions' best links: a
target word is linked to its best source word where that word's best target word is it (NULL winning in either
direction: no link). The intersection placed inline tags best of the symmetrisations measured (the product of both
directions' posteriors, grow-diag-final-and, the union: benchmarks/results/alignment-xeon). t is kept where
t >= PRUNE (a sorted key -> value table); an unseen pair gets FLOOR, so on words the training pairs never paired the
diagonal term decides.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aiayn.config import BOS_ID, EOS_ID, PAD_ID
from aiayn.decoding.alignment import word_ids
from aiayn.errors import CheckpointError
from aiayn.files import atomic_write

FORMAT = "aiayn-aligner-1"
FILE = "aligner.safetensors"  # beside the run's vocab.model, as the shortlist
LAMBDA = 4.0  # fast_align's default diagonal tension
P0 = 0.08  # fast_align's default NULL probability
IBM1, ITERATIONS = 2, 3
PRUNE, FLOOR = 1e-4, 1e-7
NOT_PIECES = (PAD_ID, BOS_ID, EOS_ID)  # ids that stand for no word
MAX_PAIRS = 100_000  # EM holds 8 bytes per (target piece, source piece) of its pairs: ~0.4 GB for 29,000 verses
CHUNK = 2_000  # pairs per EM step (its temporaries)


@dataclass
class Table:
    """t(f | e) of one direction: keys f * (V + 1) + e sorted (e = V is NULL), values float32."""
    keys: np.ndarray
    values: np.ndarray
    vocab_size: int

    def lookup(self, f: np.ndarray, e: np.ndarray) -> np.ndarray:
        key = f.astype(np.int64) * (self.vocab_size + 1) + e
        at = np.minimum(np.searchsorted(self.keys, key), len(self.keys) - 1)
        return np.where(self.keys[at] == key, self.values[at], FLOOR) if len(self.keys) else np.full(key.shape, FLOOR)


def diagonal(n: int, m: int, lam: float = LAMBDA, p0: float = P0) -> np.ndarray:
    """p(a_j = i) for j < m (rows), i < n source positions then NULL (n + 1 columns)."""
    d = np.exp(-lam * np.abs((np.arange(n) + 0.5) / n - ((np.arange(m) + 0.5) / m)[:, None]))
    d = (1 - p0) * d / d.sum(axis=1, keepdims=True)
    return np.concatenate([d, np.full((m, 1), p0)], axis=1)


def _pairs(e_ids, e_off, f_ids, f_off, V: int, pairs: range):
    """Every (target position, source position or NULL) of the given pairs, flat, in (pair, j, i) order: their keys
    f * (V + 1) + e, and the (n source, m target) lengths of each pair."""
    keys, shapes = [], []
    for k in pairs:
        e = np.append(np.asarray(e_ids[e_off[k]: e_off[k + 1]], dtype=np.int64), V)
        f = np.asarray(f_ids[f_off[k]: f_off[k + 1]], dtype=np.int64)
        if len(f) and len(e) > 1:
            keys.append((f[:, None] * (V + 1) + e[None, :]).ravel())
            shapes.append((len(e) - 1, len(f)))
    return (np.concatenate(keys) if keys else np.zeros(0, np.int64)), shapes


def _chunks(e_ids, e_off, f_ids, f_off, V: int, lam: float, p0: float, size: int = CHUNK):
    """The pairs in chunks, each (index into the returned sorted keys (int32), diagonal prior (float32), start and
    size of each target position's group): what EM reads each iteration, 8 bytes a position (two passes, so that
    the int64 keys of all pairs are never held at once)."""
    ranges = [range(a, min(a + size, len(e_off) - 1)) for a in range(0, len(e_off) - 1, size)]
    unique = _distinct(np.concatenate([np.zeros(0, np.int64)] + [
        _distinct(_pairs(e_ids, e_off, f_ids, f_off, V, r)[0]) for r in ranges]))
    chunks = []
    for r in ranges:
        keys, shapes = _pairs(e_ids, e_off, f_ids, f_off, V, r)
        if not shapes:
            continue
        prior = np.concatenate([diagonal(n, m, lam, p0).astype(np.float32).ravel() for n, m in shapes])
        sizes = np.concatenate([np.full(m, n + 1) for n, m in shapes])
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        chunks.append((np.searchsorted(unique, keys).astype(np.int32), prior, starts, sizes))
    return unique, chunks


def _distinct(keys: np.ndarray) -> np.ndarray:
    """The distinct keys, sorted (np.unique's sort, without its hash table: faster on these int64 keys)."""
    keys = np.sort(keys)
    return keys[np.concatenate([[True], keys[1:] != keys[:-1]])] if len(keys) else keys


def train_direction(e_ids, e_off, f_ids, f_off, V: int, ibm1: int = IBM1, iterations: int = ITERATIONS,
                    lam: float = LAMBDA, p0: float = P0) -> Table:
    """t(f | e) by EM over the pairs (f the predicted side, e the conditioning side with NULL)."""
    unique, chunks = _chunks(e_ids, e_off, f_ids, f_off, V, lam, p0)
    if len(unique) == 0:
        return Table(np.zeros(0, np.int64), np.zeros(0, np.float32), V)
    e_of = (unique % (V + 1)).astype(np.int64)
    t = np.full(len(unique), 1.0 / V)
    for it in range(ibm1 + iterations):
        counts = np.zeros(len(unique))
        for index, prior, starts, sizes in chunks:
            w = t[index] if it < ibm1 else t[index] * prior  # IBM 1: every position alike
            post = w / np.repeat(np.maximum(np.add.reduceat(w, starts), 1e-30), sizes)
            counts += np.bincount(index, weights=post, minlength=len(unique))
        totals = np.bincount(e_of, weights=counts, minlength=V + 1)
        t = counts / np.maximum(totals[e_of], 1e-30)
    keep = t >= PRUNE
    return Table(unique[keep], t[keep].astype(np.float32), V)


@dataclass
class Aligner:
    """Both directions' t: forward = t(target piece | source piece), backward = t(source piece | target piece)."""
    forward: Table
    backward: Table
    vocab_sha256: str = ""
    lam: float = LAMBDA
    p0: float = P0

    def posterior(self, table: Table, e: Sequence[int], f: Sequence[int]) -> np.ndarray:
        """p(a_j = i | e, f) (len(f), len(e) + 1): each target piece's posterior over the source pieces and NULL."""
        e_ = np.append(np.asarray(e, dtype=np.int64), table.vocab_size)
        f_ = np.asarray(f, dtype=np.int64)
        w = table.lookup(f_[:, None], e_[None, :]) * diagonal(len(e), len(f), self.lam, self.p0)
        return w / w.sum(axis=1, keepdims=True)

    def word_posteriors(self, src: Sequence[int], tgt: Sequence[int], src_pieces: Sequence[str],
                        tgt_pieces: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Both directions' word-level posteriors: forward (target words, source words + NULL) and backward
        (source words, target words + NULL)."""
        sw, tw = np.asarray(word_ids(src_pieces)), np.asarray(word_ids(tgt_pieces))
        return _words(self.posterior(self.forward, src, tgt), tw, sw), \
            _words(self.posterior(self.backward, tgt, src), sw, tw)

    def links(self, src_ids: Sequence[int], tgt_ids: Sequence[int], vocab) -> list[tuple[int, int]]:
        """Word links of one pair of id sequences (PAD, BOS, EOS left out; UNK is a piece like any other, so words
        are counted as the attention's recipe counts them), at most one per target word: where both directions' best
        links agree (hard_links)."""
        src = [i for i in src_ids if i not in NOT_PIECES]
        tgt = [i for i in tgt_ids if i not in NOT_PIECES]
        if not src or not tgt:
            return []
        fwd, bwd = self.word_posteriors(src, tgt, [vocab.piece(i) for i in src], [vocab.piece(i) for i in tgt])
        return hard_links(fwd, bwd)

    def align(self, sources: Sequence[Sequence[int] | None], targets: Sequence[Sequence[int]], vocab
              ) -> list[list[tuple[int, int]]]:
        """Word links of many pairs (a None source: none), as aiayn.decoding.attention.align gives them."""
        return [self.links(s, t, vocab) if s is not None else [] for s, t in zip(sources, targets)]

    def save(self, path: str | Path) -> Path:
        """One safetensors file, written atomically."""
        from safetensors.numpy import save

        tensors = {"forward.keys": self.forward.keys, "forward.values": self.forward.values,
                   "backward.keys": self.backward.keys, "backward.values": self.backward.values}
        meta = {"format": FORMAT, "vocab_size": str(self.forward.vocab_size), "vocab_sha256": self.vocab_sha256,
                "lambda": str(self.lam), "p0": str(self.p0)}
        return atomic_write(path, lambda p: Path(p).write_bytes(save(tensors, metadata=meta)))


def hard_links(fwd: np.ndarray, bwd: np.ndarray) -> list[tuple[int, int]]:
    """At most one link per target word from the word-level posteriors (Aligner.word_posteriors): the intersection
    of both directions' best links, target word j linked to source word i where i is j's best (not NULL) forward
    and j is i's best (not NULL) backward."""
    f_best, b_best = fwd[:, :-1].argmax(axis=1), bwd[:, :-1].argmax(axis=1)
    f_ok = fwd[:, :-1].max(axis=1) > fwd[:, -1]
    b_ok = bwd[:, :-1].max(axis=1) > bwd[:, -1]
    return [(int(i), j) for j, i in enumerate(f_best) if f_ok[j] and b_ok[i] and b_best[i] == j]


def _words(post: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Piece posteriors (pieces of `rows`, pieces of `cols` + NULL) -> word level: a row word's row is the mean of
    its pieces' rows, a column word's weight the sum of its pieces' columns; NULL stays last."""
    n_rows, n_cols = rows.max() + 1, cols.max() + 1
    by_col = np.zeros((post.shape[0], n_cols + 1))
    np.add.at(by_col.T, np.append(cols, n_cols), post.T)
    out = np.zeros((n_rows, n_cols + 1))
    np.add.at(out, rows, by_col)
    return out / np.bincount(rows, minlength=n_rows)[:, None]


def train(src, src_offsets, tgt, tgt_offsets, vocab_size: int, vocab_sha256: str = "", ibm1: int = IBM1,
          iterations: int = ITERATIONS) -> Aligner:
    """Both directions from flat token ids and offsets (the prepared-data format: pair k's source is
    src[src_offsets[k]:src_offsets[k + 1]], special ids < 4 not among them)."""
    forward = train_direction(src, src_offsets, tgt, tgt_offsets, vocab_size, ibm1, iterations)
    backward = train_direction(tgt, tgt_offsets, src, src_offsets, vocab_size, ibm1, iterations)
    return Aligner(forward, backward, vocab_sha256)


def build_from_prepared(data_dir: str | Path, ibm1: int = IBM1, iterations: int = ITERATIONS,
                        max_pairs: int = MAX_PAIRS) -> Aligner:
    """The aligner of a prepared-data directory's train split (aiayn.data.folder), for its vocabulary; of more than
    max_pairs pairs, max_pairs evenly spread (memory grows with the pairs' pieces)."""
    from aiayn.data.folder import load_split, read_meta
    from aiayn.data.vocab import Vocab
    from aiayn.files import sha256_file

    data_dir = Path(data_dir)
    read_meta(data_dir)
    split = load_split(data_dir, "train")
    src, tgt = split.ids()
    (src, src_off), (tgt, tgt_off) = (_spread(ids, off, max_pairs) for ids, off in zip((src, tgt), split.offsets))
    vocab = Vocab.load(data_dir)
    return train(src, src_off, tgt, tgt_off, len(vocab), sha256_file(vocab.model_path), ibm1, iterations)


def _spread(ids, offsets: np.ndarray, max_pairs: int) -> tuple[np.ndarray, np.ndarray]:
    """The ids and offsets of at most max_pairs of the pairs, evenly spread (all of them if there are fewer)."""
    n = len(offsets) - 1
    if n <= max_pairs:
        return np.asarray(ids), np.asarray(offsets)
    keep = np.linspace(0, n - 1, max_pairs).astype(np.int64)
    rows = [np.asarray(ids[offsets[k]: offsets[k + 1]]) for k in keep]
    return np.concatenate(rows), np.cumsum([0] + [len(r) for r in rows])


def load(path: str | Path) -> Aligner:
    """An aligner file written by Aligner.save; a damaged or foreign file is one CheckpointError line."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="numpy") as f:
            meta = f.metadata() or {}
            if meta.get("format") != FORMAT:
                raise CheckpointError(f"{path} is not an aligner file (aiayn shortlist --aligner writes one)")
            v = int(meta["vocab_size"])
            forward = Table(f.get_tensor("forward.keys"), f.get_tensor("forward.values"), v)
            backward = Table(f.get_tensor("backward.keys"), f.get_tensor("backward.values"), v)
    except (SafetensorError, OSError, KeyError, ValueError) as e:
        raise CheckpointError(f"cannot read the aligner {path}: {e}") from None
    return Aligner(forward, backward, meta.get("vocab_sha256", ""), float(meta["lambda"]), float(meta["p0"]))


ALIGNMENTS = ("auto", "attention", "lexical")


def for_run(checkpoint: str | Path, alignment: str = "auto") -> Aligner | None:
    """The aligner the engine of `checkpoint` aligns with: "auto", the run's file (beside its vocab.model) if it has
    one, else None (the cross-attention); "lexical", the run's file, an error without it; "attention", None. A file
    built for another vocabulary is an error."""
    from aiayn.errors import UsageError
    from aiayn.files import sha256_file

    if alignment not in ALIGNMENTS:
        raise UsageError(f"--alignment must be one of {', '.join(ALIGNMENTS)}, not {alignment!r}")
    if alignment == "attention":
        return None
    vocab = _run_vocab(Path(checkpoint))
    if vocab is None:  # not a run of aiayn's (an imported model keeps its own vocabularies): no aligner file
        if alignment == "lexical":
            raise UsageError(f"{checkpoint} is not in a run with a vocab.model: no lexical aligner")
        return None
    path = vocab.parent / FILE
    if not path.is_file():
        if alignment == "lexical":
            raise UsageError(f"{vocab.parent} has no lexical aligner ({path}); build it with `aiayn shortlist "
                             f"--aligner --out {vocab.parent}`")
        return None
    aligner = load(path)
    if aligner.vocab_sha256 and aligner.vocab_sha256 != sha256_file(vocab):
        raise CheckpointError(f"{path} was built for another vocabulary than {vocab}; build it again from the data "
                              f"the model was trained on (aiayn shortlist --aligner --out {vocab.parent})")
    return aligner


def run_file(checkpoint: str | Path) -> Path | None:
    """The run's aligner file (beside its vocab.model), where the run of `checkpoint` has one; else None."""
    vocab = _run_vocab(Path(checkpoint))
    path = vocab.parent / FILE if vocab is not None else None
    return path if path is not None and path.is_file() else None


def _run_vocab(checkpoint: Path) -> Path | None:
    """The vocab.model of the run a checkpoint file (or run directory) belongs to: beside it or up to two folders up,
    as the run's shortlist is found; None if there is none."""
    start = checkpoint.resolve()
    for folder in [start if start.is_dir() else start.parent, *start.parents][:3]:
        if (folder / "vocab.model").is_file():
            return folder / "vocab.model"
    return None
