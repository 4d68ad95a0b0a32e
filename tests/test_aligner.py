"""aiayn.decoding.aligner: fast_align's EM on a toy corpus whose answer is known, the two directions combined, the
file, and the engine and commands that align with it."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from helpers import labelled_run, tiny_model

from aiayn.cli import main
from aiayn.data import Vocab
from aiayn.decoding import aligner
from aiayn.decoding.attention import align
from aiayn.decoding.search import SearchConfig
from aiayn.decoding.translator import Translator
from aiayn.errors import CheckpointError, UsageError

WORDS = ["the", "a", "house", "flower", "blue", "la", "una", "casa", "flor", "azul"]
ID = {w: n + 4 for n, w in enumerate(WORDS)}  # ids 0-3 are the specials
V = len(WORDS) + 4


class Pieces:
    """A vocabulary of whole words: every piece starts a word."""

    def piece(self, i: int) -> str:
        return "\u2581" + (WORDS[i - 4] if i >= 4 else "<unk>")


def flat(sentences: list[str]) -> tuple[np.ndarray, np.ndarray]:
    ids = [[ID[w] for w in s.split()] for s in sentences]
    return np.array([i for row in ids for i in row]), np.cumsum([0] + [len(row) for row in ids])


def test_one_ibm1_iteration_gives_the_hand_computed_table():
    """Corpus {(a | x), (a b | x y)} from a uniform t, NULL included: x's posterior is 1/2 over {a, NULL} in the first
    pair, 1/3 over {a, b, NULL} in the second; so c(x|a) = 5/6, c(y|a) = 1/3 and t(x|a) = 5/7, t(x|b) = 1/2."""
    a, b, x, y = ID["the"], ID["a"], ID["la"], ID["una"]
    src, src_off = np.array([a, a, b]), np.array([0, 1, 3])
    tgt, tgt_off = np.array([x, x, y]), np.array([0, 1, 3])
    t = aligner.train_direction(src, src_off, tgt, tgt_off, V, ibm1=1, iterations=0)
    got = t.lookup(np.array([x, x, y, x]), np.array([a, b, a, V]))
    assert np.allclose(got, [5 / 7, 1 / 2, 2 / 7, 5 / 7])
    assert t.lookup(np.array([y]), np.array([ID["casa"]]))[0] == aligner.FLOOR  # never seen together


CORPUS = [("the house", "la casa"), ("the flower", "la flor"), ("a house", "una casa"), ("a flower", "una flor"),
          ("the blue flower", "la flor azul"), ("a blue house", "una casa azul"),
          ("blue", "azul"), ("house", "casa")]


def test_em_learns_the_toy_lexicon_and_aligns_a_reordered_pair():
    src, src_off = flat([s for s, _ in CORPUS])
    tgt, tgt_off = flat([t for _, t in CORPUS])
    model = aligner.train(src, src_off, tgt, tgt_off, V)
    for e, f in [("house", "casa"), ("the", "la"), ("blue", "azul")]:
        others = [w for w in WORDS[:5] if w != e]
        best = model.forward.lookup(np.array([ID[f]]), np.array([ID[e]]))[0]
        assert all(best > model.forward.lookup(np.array([ID[f]]), np.array([ID[o]]))[0] for o in others), (e, f)
    # "the blue house" -> "la casa azul": the adjective crosses, which the diagonal alone would not follow
    links = model.links(flat(["the blue house"])[0], flat(["la casa azul"])[0], Pieces())
    assert links == [(0, 0), (2, 1), (1, 2)]
    # an unknown word (UNK, id 1) counts as a word; BOS, EOS and PAD do not
    links = model.links([*flat(["the blue"])[0], 1, ID["house"], 3, 0], [2, *flat(["la casa azul"])[0], 3], Pieces())
    assert links == [(0, 0), (3, 1), (1, 2)]


def test_the_directions_are_intersected():
    """Target 0's best source is 0 and source 0's best target is 0: linked. Target 1's best is NULL: no link. Target 2's
    best source is 0 (0.5), whose best target is 0, not 2: no link, though source 2's best target is 2."""
    fwd = np.array([[0.6, 0.3, 0.0, 0.1], [0.1, 0.1, 0.0, 0.8], [0.5, 0.0, 0.4, 0.1]])  # (target, source + NULL)
    bwd = np.array([[0.7, 0.1, 0.1, 0.1], [0.1, 0.1, 0.2, 0.6], [0.0, 0.1, 0.8, 0.1]])  # (source, target + NULL)
    assert aligner.hard_links(fwd, bwd) == [(0, 0)]
    bwd[0] = [0.1, 0.1, 0.7, 0.1]  # now source 0's best target is 2: target 2 is linked to it, target 0 is not
    assert aligner.hard_links(fwd, bwd) == [(0, 2)]


def test_the_file_round_trips_and_is_checked(tmp_path, copy_data):
    model = aligner.build_from_prepared(copy_data)
    path = model.save(tmp_path / "a.safetensors")
    again = aligner.load(path)
    assert np.array_equal(again.forward.keys, model.forward.keys)
    assert np.array_equal(again.backward.values, model.backward.values)
    assert again.vocab_sha256 == model.vocab_sha256 and len(model.forward.keys) > 0
    (tmp_path / "bad.safetensors").write_bytes(b"not a file")
    with pytest.raises(CheckpointError, match="cannot read the aligner"):
        aligner.load(tmp_path / "bad.safetensors")


def test_the_engine_and_commands_align_with_the_run_aligner(copy_data, tmp_path, capsys):
    """`aiayn shortlist --aligner --out RUN` writes the aligner; translate --print-alignment then gives its links
    ('auto' and 'lexical'), the attention's with --alignment attention; a run without one, and flags that
    contradict, are one error line each."""
    vocab = Vocab.load(copy_data)
    model = tiny_model(len(vocab), eos_bias=2.0)
    run = labelled_run(model, copy_data, tmp_path, ("en", "de"))
    lines = (copy_data / "test.src.txt").read_text().splitlines()[:8]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.txt"
    translate = ["translate", "--checkpoint", str(run), "--input", str(tmp_path / "in.txt"), "--output", str(out),
                 "--max-len-b", "8", "--print-alignment"]

    def one_error(argv, says):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1 and says in err, err

    def printed():
        return [line.split(" ||| ")[1] if " ||| " in line else "" for line in out.read_text().splitlines()]

    one_error([*translate, "--alignment", "lexical"], "has no lexical aligner")
    assert main(translate) == 0  # auto without the file: the attention
    attention = printed()
    assert main(["shortlist", "--out", str(run), "--aligner"]) == 0
    assert f"wrote {run / aligner.FILE}" in capsys.readouterr().out
    lexical = aligner.load(run / aligner.FILE)
    engine = Translator(model, vocab, SearchConfig(max_len_b=8), aligner=lexical)
    hyps = [hs[0] for hs in engine.translate_nbest(lines, alignments=True)]
    sources = engine.encode(lines)
    expected = [" ".join(f"{i}-{j}" for i, j in lexical.links(s, h.tokens, vocab)) for s, h in zip(sources, hyps)]
    assert [" ".join(f"{i}-{j}" for i, j in h.alignment) for h in hyps] == expected
    for mode in ("auto", "lexical"):
        assert main([*translate, "--alignment", mode]) == 0
        assert printed() == expected
    assert main([*translate, "--alignment", "attention"]) == 0
    assert printed() == attention
    if importlib.util.find_spec("ctranslate2"):  # an export to CTranslate2 carries the aligner, so --engine ct2 uses it
        assert main(["export", "--checkpoint", str(run), "--to", "ct2", str(tmp_path / "ct2")]) == 0
        assert f"its lexical aligner as {aligner.FILE}" in capsys.readouterr().out
        assert (tmp_path / "ct2" / aligner.FILE).read_bytes() == (run / aligner.FILE).read_bytes()
    assert attention == [" ".join(f"{i}-{j}" for i, j in links) for links in align(
        model, vocab, sources, [h.tokens for h in hyps])]
    assert attention != expected  # the two sources do differ here, so the checks above can tell them apart
    one_error([*translate, "--alignment", "lexical", "--alignment-layer", "0"], "--alignment attention")
    one_error(["shortlist", "--aligner", "--data", str(copy_data), "--output", str(tmp_path / "s.st")], "--out RUN")
    with pytest.raises(UsageError, match="must be one of"):
        aligner.for_run(run, "both")
    assert aligner.for_run(run, "attention") is None


def test_of_many_pairs_an_even_spread_is_kept():
    ids, offsets = flat(["the house", "la", "a blue flower", "casa", "una"])
    kept, kept_offsets = aligner._spread(ids, offsets, 3)  # pairs 0, 2, 4
    assert kept.tolist() == [ID[w] for w in "the house a blue flower una".split()]
    assert kept_offsets.tolist() == [0, 2, 5, 6]
    assert aligner._spread(ids, offsets, 5)[0].tolist() == ids.tolist()


def test_ctranslate2s_engine_aligns_with_the_aligner_copied_beside_its_export(copy_data, tmp_path):
    """An export folder holding the run's aligner.safetensors: CTranslate2's engine gives the aligner's links ('auto'
    and 'lexical'), its attention's with 'attention'; 'lexical' without the file is one error."""
    pytest.importorskip("ctranslate2")
    import shutil

    from aiayn.decoding.ct2 import CT2Translator
    from aiayn.export.ct2 import export_ct2

    vocab = Vocab.load(copy_data)
    model = tiny_model(len(vocab), eos_bias=2.0)
    folder = export_ct2(model, vocab, tmp_path / "ct2")
    lines = (copy_data / "test.src.txt").read_text().splitlines()[:6]
    greedy = SearchConfig(beam=1, max_len_b=8, lp="power")
    attention = [h[0].alignment for h in CT2Translator(folder, search=greedy).translate_nbest(lines, alignments=True)]
    with pytest.raises(UsageError, match="has no lexical aligner"):
        CT2Translator(folder, search=greedy, alignment="lexical")
    aligner.build_from_prepared(copy_data).save(tmp_path / aligner.FILE)
    shutil.copy(tmp_path / aligner.FILE, folder / aligner.FILE)
    lexical = aligner.load(folder / aligner.FILE)
    for mode in ("auto", "lexical"):
        engine = CT2Translator(folder, search=greedy, alignment=mode)
        hyps = [h[0] for h in engine.translate_nbest(lines, alignments=True)]
        sources = engine.encode(lines)
        assert [h.alignment for h in hyps] == [lexical.links(s, h.tokens, vocab) for s, h in zip(sources, hyps)]
    assert [h.alignment for h in hyps] != attention
    again = CT2Translator(folder, search=greedy, alignment="attention").translate_nbest(lines, alignments=True)
    assert [h[0].alignment for h in again] == attention
