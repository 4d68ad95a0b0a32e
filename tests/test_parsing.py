"""PTB trees: reading (one per line and .mrg), normalization as COLLINS.prm, the linearization and its inverse
(exact on every tree of the PTB sample)."""

import pytest
from helpers import SHARED_DATA

from aiayn.errors import DataError
from aiayn.parsing.trees import delinearize, linearize, normalize, parse_tree, read_trees

PTB = SHARED_DATA / "ptb-sample"


def test_normalize_and_linearize_by_hand():
    t = parse_tree("( (S (NP-SBJ-1 (DT The) (NN cat)) (VP (VBD sat) (NP (-NONE- *-1))) (. .)) )")
    n = normalize(t)
    assert str(n) == "(S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .))"
    assert linearize(n) == ["(S", "(NP", "XX", "XX", ")NP", "(VP", "XX", ")VP", "XX", ")S"]
    back = delinearize(linearize(n), n.words(), n.tags())
    assert str(back) == str(n)
    assert str(delinearize(linearize(n), n.words())) == "(S (NP (XX The) (XX cat)) (VP (XX sat)) (XX .))"


@pytest.mark.parametrize("tokens", [["(S", "XX", ")NP"], ["(S", "XX"], ["XX"], ["(S", "XX", "XX", ")S"],
                                    ["(S", "XX", ")S", "(S", ")S"]])
def test_delinearize_refuses_ill_formed(tokens):
    with pytest.raises(DataError):
        delinearize(tokens, ["w"])


def test_mrg_files_and_one_per_line_read_alike(tmp_path):
    one = "(S (NP (DT a) (NN b)) (VP (VBZ c)))"
    mrg = "( (S (NP (DT a)\n     (NN b))\n  (VP (VBZ c))) )\n\n( (S (NP (DT a) (NN b)) (VP (VBZ c))) )\n"
    (tmp_path / "x.mrg").write_text(mrg)
    trees = [normalize(t) for t in read_trees(tmp_path / "x.mrg")]
    assert [str(t) for t in trees] == [one, one]


def test_round_trip_exact_on_the_whole_sample():
    if not (PTB / "train.trees").is_file():
        pytest.skip("the PTB sample (../shared/data/ptb-sample) is not here")
    n = 0
    for split in ("train", "dev"):
        for t in read_trees(PTB / f"{split}.trees"):
            t = normalize(t)
            assert str(delinearize(linearize(t), t.words(), t.tags())) == str(t)
            n += 1
    assert n == 3700


def _toy_treebank(path, n, seed):
    """Trees of a tiny grammar: S -> NP VP, NP -> DT NN | NNP, VP -> VBD | VBD NP."""
    import random

    rng = random.Random(seed)
    nouns, names, verbs = ["cat", "dog", "bird"], ["Ann", "Bob"], ["saw", "ran", "sang"]

    def np():
        return f"(NP (DT the) (NN {rng.choice(nouns)}))" if rng.random() < 0.6 else f"(NP (NNP {rng.choice(names)}))"

    lines = []
    for _ in range(n):
        vp = f"(VP (VBD {rng.choice(verbs)}) {np()})" if rng.random() < 0.5 else f"(VP (VBD {rng.choice(verbs)}))"
        lines.append(f"( (S {np()} {vp} (. .)) )")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("leaves", ["xx", "words"])
def test_prepare_train_parse_end_to_end(tmp_path, capsys, leaves):
    from aiayn.cli import main
    from aiayn.config import EOS_ID, ModelConfig
    from aiayn.data import Vocab, load_split
    from aiayn.parsing.parse import structure_ids
    from aiayn.training.train import TrainConfig, train

    train_trees = _toy_treebank(tmp_path / "train.trees", 300, 1)
    dev_trees = _toy_treebank(tmp_path / "dev.trees", 20, 2)
    data = tmp_path / "data"
    assert main(["prepare-parse", "--train", str(train_trees), "--valid", str(dev_trees), "--out", str(data),
                 "--vocab-size", "40", "--leaves", leaves]) == 0
    vocab = Vocab.load(data)
    structure = structure_ids(vocab)
    assert set(structure.values()) == {"XX", "(S", ")S", "(NP", ")NP", "(VP", ")VP"}
    src, tgt = load_split(data, "train")[0]
    if leaves == "xx":
        assert all(int(i) in structure for i in tgt)  # one id per structure token
    else:  # the words, as in the source, between structure tokens
        assert [int(i) for i in tgt if int(i) not in structure] == [int(i) for i in src if int(i) != EOS_ID]
    tc = TrainConfig(max_steps=60, max_tokens=600, warmup=20, lr_factor=1.0, save_every_steps=60,
                     save_every_minutes=0, log_every=20, keep_last=1, threads=1)
    train(data, tmp_path / "run", ModelConfig.preset("tiny", dropout=0.0), tc, progress=False)
    sents = (data / "valid.src.txt").read_text().splitlines()[:5]
    (tmp_path / "in.txt").write_text("\n".join(sents) + "\n")
    assert main(["parse", "--checkpoint", str(tmp_path / "run"), "--input", str(tmp_path / "in.txt"),
                 "--output", str(tmp_path / "out.trees"), "--beam", "3"]) == 0
    trees = (tmp_path / "out.trees").read_text().splitlines()
    assert len(trees) == 5
    for sentence, line in zip(sents, trees):  # always a tree with the input's words, one leaf each
        assert parse_tree(line).words() == sentence.split()
    # Without the constraint every best output is either a tree with the input's words or marked "!" and counted.
    assert main(["parse", "--checkpoint", str(tmp_path / "run"), "--input", str(tmp_path / "in.txt"),
                 "--output", str(tmp_path / "free.trees"), "--beam", "3", "--no-constraint"]) == 0
    free = (tmp_path / "free.trees").read_text().splitlines()
    bad = [line for line in free if line.startswith("! ")]
    assert f"{5 - len(bad)} of 5 best outputs are well-formed" in capsys.readouterr().err
    for sentence, line in zip(sents, free):
        if not line.startswith("! "):
            assert parse_tree(line).words() == sentence.split()


def test_words_format_round_trip_exact_on_the_whole_sample(tmp_path):
    """--leaves words: every tree's target ids hold the source's ids as its leaves, and map back to the same tree."""
    if not (PTB / "train.trees").is_file():
        pytest.skip("the PTB sample (../shared/data/ptb-sample) is not here")
    from aiayn.config import EOS_ID
    from aiayn.data import Vocab, load_split
    from aiayn.parsing.parse import output_tokens, structure_ids
    from aiayn.parsing.prepare import WORDS_MARK, prepare_parse

    prepare_parse(PTB / "train.trees", tmp_path / "d", valid=PTB / "dev.trees", vocab_size=2000, leaves="words")
    vocab = Vocab.load(tmp_path / "d")
    structure = structure_ids(vocab)
    assert WORDS_MARK in {vocab.piece(i) for i in range(len(vocab))}
    n = 0
    for split, file in (("train", "train.trees"), ("valid", "dev.trees")):
        pairs = load_split(tmp_path / "d", split)
        for (src, tgt), t in zip(pairs, read_trees(PTB / file)):
            t = normalize(t)
            src, tgt = [int(i) for i in src], [int(i) for i in tgt]
            assert [i for i in tgt if i not in structure] == src[: len(src) - (src[-1] == EOS_ID)]
            assert str(delinearize(output_tokens(tgt, structure, vocab.piece, "words"), t.words(), t.tags())) == str(t)
            n += 1
    assert n == 3700
