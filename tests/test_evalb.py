"""The Python EVALB (aiayn.metrics.evalb) against the real program (../shared/tools/evalb, compiled with gcc):
identical summaries on EVALB's own sample and on the PTB sample's dev trees scored against perturbed copies."""

import random
import shutil
import subprocess

import pytest
from helpers import SHARED_DATA

from aiayn.metrics.evalb import COLLINS, EvalbParams, evalb
from aiayn.parsing.trees import Tree, parse_tree

EVALB_SRC = SHARED_DATA.parent / "tools" / "evalb"
PTB = SHARED_DATA / "ptb-sample"


@pytest.fixture(scope="module")
def evalb_bin(tmp_path_factory):
    if not (EVALB_SRC / "evalb.c").is_file() or shutil.which("gcc") is None:
        pytest.skip("the EVALB sources (../shared/tools/evalb) or gcc are not here")
    d = tmp_path_factory.mktemp("evalb")
    subprocess.run(["gcc", "-O2", "-w", "-o", str(d / "evalb"), str(EVALB_SRC / "evalb.c")], check=True)
    return d / "evalb"


def real_summary(binary, prm, gold, test) -> str:
    out = subprocess.run([str(binary), "-p", str(prm), str(gold), str(test)], capture_output=True, text=True).stdout
    return out[out.index("=== Summary ==="):].strip()


def test_sample_equals_evalb(evalb_bin):
    prm = EVALB_SRC / "sample.prm"
    gold, test = ((EVALB_SRC / f"sample.{x}").read_text().splitlines() for x in ("gld", "tst"))
    ours = evalb(gold, test, EvalbParams.from_prm(prm.read_text()))
    assert ours.summary().strip() == real_summary(evalb_bin, prm, EVALB_SRC / "sample.gld", EVALB_SRC / "sample.tst")
    assert (ours.all.error, ours.all.skip, ours.all.valid) == (5, 2, 17)


def perturb(tree: Tree, rng: random.Random) -> Tree:
    """Same words and tags, other brackets: relabel, flatten (children lifted) and group neighbours at random."""
    if tree.is_preterminal:
        return Tree(tree.label, word=tree.word)
    kids = [perturb(c, rng) for c in tree.children]
    flat = []
    for k in kids:
        if not k.is_preterminal and rng.random() < 0.15:
            flat.extend(k.children)
        else:
            flat.append(k)
    if len(flat) >= 3 and rng.random() < 0.2:
        i = rng.randrange(len(flat) - 1)
        flat[i:i + 2] = [Tree(rng.choice(["NP", "VP", "X", "PP"]), flat[i:i + 2])]
    label = rng.choice(["NP", "VP", "S", "ADVP", "PRT", "SBAR"]) if rng.random() < 0.1 else tree.label
    return Tree(label, flat)


def test_dev_trees_against_perturbed_equal_evalb(evalb_bin, tmp_path):
    if not (PTB / "dev.trees").is_file():
        pytest.skip("the PTB sample (../shared/data/ptb-sample) is not here")
    gold = (PTB / "dev.trees").read_text().splitlines()
    rng = random.Random(0)
    test = [str(perturb(parse_tree(line), rng)) for line in gold]
    test[3] = "(S (NN nothing))"  # a sentence whose words differ: an error sentence for both
    (tmp_path / "gold").write_text("\n".join(gold) + "\n")
    (tmp_path / "test").write_text("\n".join(test) + "\n")
    ours = evalb(gold, test, COLLINS)
    assert ours.summary().strip() == real_summary(evalb_bin, EVALB_SRC / "COLLINS.prm", tmp_path / "gold",
                                                   tmp_path / "test")
    assert 40 < ours.all.f1 < 100 and ours.all.error == 1


def test_by_hand():
    gold = ["(S (NP (DT the) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT a) (NN mat)))) (. .))"]
    test = ["(S (NP (DT the) (NN cat)) (VP (VBD sat) (PP (IN on)) (NP (DT a) (NN mat))) (. .))"]
    r = evalb(gold, test)
    # gold: S 0-6? no: '.' is deleted, so 5 words: S(0,5) NP(0,2) VP(2,5) PP(3,5) NP(3,5); test: S NP VP PP(3,4) NP(3,5)
    assert (r.all.gold, r.all.test, r.all.match) == (5, 5, 4)
    assert r.all.recall == pytest.approx(80.0) and r.all.f1 == pytest.approx(80.0) and r.all.complete == 0


def test_evaluate_parse_cli_gold_tags_and_perfect_score(tmp_path, capsys):
    from aiayn.cli import main
    from aiayn.parsing.trees import delinearize, linearize, normalize

    gold = ["( (S (NP-SBJ (DT The) (NN cat)) (VP (VBD sat) (NP (-NONE- *-1))) (. .)) )",
            "(S (NP (PRP It)) (VP (VBZ is) (ADJP (JJ red))) (. .))"]
    hyps = []
    for line in gold:
        t = normalize(parse_tree(line))
        hyps.append(str(delinearize(linearize(t), t.words())))  # placeholder tags, as the parser writes
    (tmp_path / "gold").write_text("\n".join(gold) + "\n")
    (tmp_path / "hyp").write_text("\n".join(hyps) + "\n")
    assert main(["evaluate", "--task", "parse", "--hyp", str(tmp_path / "hyp"), "--ref", str(tmp_path / "gold")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("parse F1        100.00") and "Number of Error sentence  =      0" in out
