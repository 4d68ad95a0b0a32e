"""Word alignment sources against manually aligned sentences: AER and tag placement, side by side.

    python -m benchmarks.e2e.alignment_quality --gold FILE.jsonl|DIR --run RUN [--checkpoint RUN] [--seed 0]

--gold as benchmarks/e2e/markup_tags.py reads it (the references stand for the translations, teacher-forced);
--run: a run with its lexical aligner (RUN/aligner.safetensors, `aiayn shortlist --aligner --out RUN`; built here
from the run's data if missing). Rows: the gold, the diagonal, the lexical aligner (each direction alone, and both
multiplied, their best links intersected (what the engines give where the run has the file), united and grown by
grow-diag-final-and), and with --checkpoint the model's cross-attention
(the top layer, heads averaged: the engines' recipe; every layer and head averaged; with a diagonal prior, Gaussian of
--sigma over the relative positions) and the product of the lexical posteriors with the attention. Each gold word
is encoded on its own, so pieces always make the gold's words. Placement as markup_tags measures it (exact %, word
F1) and the AER of each alignment (Och and Ney 2003).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from aiayn.config import BOS_ID, EOS_ID
from aiayn.decoding import aligner as lexical
from benchmarks.e2e.markup_tags import VARIANTS, measure, read_gold


def word_pieces(vocab, text: str) -> tuple[list[int], list[int]]:
    """The ids of a sentence encoded word by word, and the word of each piece."""
    ids, owner = [], []
    for n, word in enumerate(text.split()):
        piece_ids = vocab.encode(word) or [1]
        ids += piece_ids
        owner += [n] * len(piece_ids)
    return ids, owner


def to_words(matrix: np.ndarray, rows: list[int], cols: list[int]) -> np.ndarray:
    """(target pieces, source pieces) -> (target words, source words): a column word's weight the sum of its
    pieces', a row word's row the mean of its pieces' (aiayn.decoding.alignment's recipe)."""
    rows_, cols_ = np.asarray(rows), np.asarray(cols)
    by_col = np.zeros((matrix.shape[0], cols_.max() + 1))
    np.add.at(by_col.T, cols_, matrix.T)
    out = np.zeros((rows_.max() + 1, by_col.shape[1]))
    np.add.at(out, rows_, by_col)
    return out / np.bincount(rows_)[:, None]


def argmax_links(scores: np.ndarray) -> list[tuple[int, int]]:
    return [(int(i), j) for j, i in enumerate(scores.argmax(axis=1))]


def prior(n_tgt: int, n_src: int, sigma: float) -> np.ndarray:
    rel = (np.arange(n_src) + 0.5) / n_src - ((np.arange(n_tgt) + 0.5) / n_tgt)[:, None]
    return np.exp(-(rel ** 2) / (2 * sigma ** 2))


def attention_words(checkpoint: Path, gold, encoded) -> list[dict[str, np.ndarray]]:
    """Per pair: the top layer's cross-attention (heads averaged) and every layer's and head's mean, word level."""
    import torch

    from aiayn.decoding.attention import record
    from aiayn.decoding.engine import EngineOptions, open_engine

    model = open_engine(checkpoint, EngineOptions(alignments=True)).model
    out = []
    for (s_ids, s_own), (t_ids, t_own) in encoded:
        src = torch.tensor([s_ids + [EOS_ID]])
        tgt_in = torch.tensor([[BOS_ID] + t_ids])
        _, weights = record(model, src, tgt_in)
        cross = [w[0, :, : len(t_ids), : len(s_ids)].double().numpy() for w in weights["cross"]]
        out.append({"top": to_words(cross[-1].mean(axis=0), t_own, s_own),
                    "all": to_words(np.mean([c.mean(axis=0) for c in cross], axis=0), t_own, s_own)})
    return out


def lexical_words(model: lexical.Aligner, vocab, encoded):
    """Per pair: both directions' word-level posteriors (Aligner.word_posteriors)."""
    return [model.word_posteriors(s_ids, t_ids, [vocab.piece(i) for i in s_ids], [vocab.piece(i) for i in t_ids])
            for (s_ids, _), (t_ids, _) in encoded]


def directional(fwd: np.ndarray, bwd: np.ndarray) -> tuple[set, set]:
    """Each direction's Viterbi links (NULL's words left out): target word -> source word, source word -> target."""
    f = {(int(i), j) for j, i in enumerate(fwd[:, :-1].argmax(1)) if fwd[j, :-1].max() > fwd[j, -1]}
    b = {(i, int(j)) for i, j in enumerate(bwd[:, :-1].argmax(1)) if bwd[i, :-1].max() > bwd[i, -1]}
    return f, b


def grow_diag_final_and(f: set, b: set) -> list[tuple[int, int]]:
    """Koehn et al.'s symmetrisation: the intersection, grown by union links next to it (diagonals too) whose source
    or target word is still unaligned, then union links whose source and target words are both unaligned."""
    union, links = f | b, set(f & b)
    near = [(-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1)]
    grew = True
    while grew:
        grew = False
        for i, j in sorted(links):
            for di, dj in near:
                cand = (i + di, j + dj)
                if cand in union and cand not in links and (
                        all(a != cand[0] for a, _ in links) or all(c != cand[1] for _, c in links)):
                    links.add(cand)
                    grew = True
    for direction in (f, b):
        for i, j in sorted(direction):
            if all(a != i for a, _ in links) and all(c != j for _, c in links):
                links.add((i, j))
    return sorted(links, key=lambda link: (link[1], link[0]))


def _product_links(fwd: np.ndarray, bwd: np.ndarray) -> list[tuple[int, int]]:
    """The argmax of both directions' posteriors multiplied; a target word both directions leave to NULL has none."""
    f, b = directional(fwd, bwd)
    best = (fwd[:, :-1] * bwd[:, :-1].T).argmax(axis=1)
    return [(int(i), j) for j, i in enumerate(best) if any(c == j for _, c in f | b)]


def variants(gold, encoded, lex, attn, sigma: float) -> dict[str, list]:
    """Each alignment source's links per pair (in gold order)."""
    rows: dict[str, list] = {
        "lexical, target given source (fast_align forward)": [
            [(int(i), j) for j, i in enumerate(f[:, :-1].argmax(1)) if f[j, :-1].max() > f[j, -1]] for f, _ in lex],
        "lexical, source given target, one per target word (reverse)": [
            argmax_links(b[:, :-1].T) for _, b in lex],
        "lexical, both directions' posteriors multiplied, NULL's words left out": [
            _product_links(f, b) for f, b in lex],
        "lexical, both multiplied, every target word linked": [argmax_links(f[:, :-1] * b[:, :-1].T) for f, b in lex],
        "lexical, both directions' best links intersected (the engine's)": [lexical.hard_links(f, b) for f, b in lex],
        "lexical, Viterbi links united (many-to-many)": [sorted(set.union(*directional(f, b))) for f, b in lex],
        "lexical, grow-diag-final-and (many-to-many)": [grow_diag_final_and(*directional(f, b)) for f, b in lex],
    }
    if attn:
        rows["cross-attention, top layer, heads averaged (today's)"] = [argmax_links(a["top"]) for a in attn]
        rows["cross-attention, every layer and head averaged"] = [argmax_links(a["all"]) for a in attn]
        rows[f"cross-attention, top layer x diagonal prior (sigma {sigma})"] = [
            argmax_links(a["top"] * prior(*a["top"].shape, sigma)) for a in attn]
        rows["lexical (both) x cross-attention, top layer"] = [
            argmax_links(f[:, :-1] * b[:, :-1].T * a["top"]) for (f, b), a in zip(lex, attn)]
        rows["lexical (both) x cross-attention, every layer"] = [
            argmax_links(f[:, :-1] * b[:, :-1].T * a["all"]) for (f, b), a in zip(lex, attn)]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gold", type=Path, required=True, help="as markup_tags: a .jsonl or Biçici's folder")
    parser.add_argument("--run", type=Path, required=True, help="run whose lexical aligner and vocabulary are used")
    parser.add_argument("--data", type=Path, help="prepared data to build the aligner from if the run has none")
    parser.add_argument("--checkpoint", type=Path, help="also the cross-attention of this model (same direction)")
    parser.add_argument("--sigma", type=float, default=0.05, help="width of the attention's diagonal prior")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random elements")
    parser.add_argument("--per-sentence", type=int, default=3, help="elements per sentence (at most)")
    args = parser.parse_args()
    from aiayn.data.vocab import Vocab

    gold = read_gold(args.gold)
    vocab = Vocab.load(args.run / "vocab.model")
    path = args.run / lexical.FILE
    if not path.is_file():
        start = time.perf_counter()
        lexical.build_from_prepared(args.data).save(path)
        print(f"built {path} in {time.perf_counter() - start:.1f} s")
    model = lexical.load(path)
    encoded = [(word_pieces(vocab, src), word_pieces(vocab, ref)) for src, ref, *_ in gold]
    start = time.perf_counter()
    lex = lexical_words(model, vocab, encoded)
    print(f"lexical posteriors of {len(gold)} pairs: {time.perf_counter() - start:.2f} s")
    attn = attention_words(args.checkpoint, gold, encoded) if args.checkpoint else None
    print(f"{len(gold)} sentence pairs, {sum(len(s) for *_, s, _ in gold)} sure links; seed {args.seed}, "
          f"{args.per_sentence} per sentence")
    print("| alignment | elements placed | exact | word F1 | AER |")
    print("|---|---|---|---|---|")
    table = {name: fn for name, fn in VARIANTS.items()}
    for name, links in variants(gold, encoded, lex, attn, args.sigma).items():
        by_pair = {(src, ref): pairs for (src, ref, *_), pairs in zip(gold, links)}
        table[name] = lambda sure, possible, n, m, pair=None, by_pair=by_pair: by_pair[pair]
    for name, alignment_of in table.items():
        r = measure(gold, alignment_of, args.per_sentence, args.seed)
        print(f"| {name} | {r['elements']} (+{r['no sure link']} with no sure link) | {r['exact']:.1%} | "
              f"{r['word F1']:.3f} | {r['AER']:.3f} |")


if __name__ == "__main__":
    main()
