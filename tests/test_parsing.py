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
