"""BLEU equals sacreBLEU, the paper's compound-split BLEU by hand, perplexity by hand, paired significance tests as
sacreBLEU's own, the CLI."""

import math
import os
import random

import pytest
import sacrebleu
import torch
from helpers import tiny_model
from sacrebleu.significance import PairedTest

from aiayn.cli import main
from aiayn.data import load_split
from aiayn.metrics import chrf, corpus_bleu, paired_significance, perplexity, tokenized_bleu
from aiayn.metrics.bleu import moses_tokenize, split_compounds
from aiayn.rundir import RunDir
from aiayn.training import checkpoint as ckpt

HYPS = ["The cat sat on the mat.", "He read the book, didn't he?", "It's 3.5 km to the station!",
        "A quick brown fox jumps over the lazy dog"]
REFS = ["The cat sat on a mat.", "He read the book, did he not?", "It is 3.5 km to the train station!",
        "The quick brown fox jumped over the lazy dog."]


def test_bleu_and_chrf_equal_sacrebleu():
    ours = corpus_bleu(HYPS, REFS)
    theirs = sacrebleu.corpus_bleu(HYPS, [REFS])
    assert ours.score == theirs.score and "tok:13a" in ours.signature and "version:" in ours.signature
    assert chrf(HYPS, REFS).score == sacrebleu.corpus_chrf(HYPS, [REFS]).score
    with pytest.raises(ValueError, match="line-aligned"):
        corpus_bleu(HYPS, REFS[:2])


def test_compound_split_like_perl():
    assert split_compounds("rich-text format") == "rich ##AT##-##AT## text format"
    assert split_compounds("Nord-Ost-Passage") == "Nord ##AT##-##AT## Ost ##AT##-##AT## Passage"
    assert split_compounds("a-b-c - x- -y") == "a ##AT##-##AT## b-c - x- -y"  # perl's matches do not overlap


def test_tokenized_compound_split_bleu_by_hand():
    hyp, ref = ["Der Kunde kauft das E-Book morgen."], ["Der Kunde kauft das E-Book heute."]
    assert moses_tokenize(ref[0], "de") == "Der Kunde kauft das E-Book heute ."
    # Split: "Der Kunde kauft das E ##AT##-##AT## Book heute ." -- 9 tokens each side, all but "morgen"
    # match: 1-grams 8/9, 2-grams 6/8, 3-grams 5/7, 4-grams 4/6 (those inside the first 7 tokens); BP 1.
    split = tokenized_bleu(hyp, ref, "de")
    assert split.score == pytest.approx(100 * math.exp((math.log(8 / 9) + math.log(6 / 8) + math.log(5 / 7)
                                                        + math.log(4 / 6)) / 4))
    # Unsplit: 7 tokens, the first 5 match: 6/7, 4/6, 3/5, 2/4.
    plain = tokenized_bleu(hyp, ref, "de", compound_split=False)
    assert plain.score == pytest.approx(100 * math.exp((math.log(6 / 7) + math.log(4 / 6) + math.log(3 / 5)
                                                        + math.log(2 / 4)) / 4))
    assert split.score > plain.score  # why the paper's kind of BLEU is higher
    assert tokenized_bleu(hyp, ref, "en").score == pytest.approx(plain.score)  # only German is split
    # Brevity penalty, hand-computed: hyp of 4 tokens vs ref of 5, all n-grams of hyp match.
    bp = tokenized_bleu(["a b c d"], ["a b c d e"], "en")
    assert bp.score == pytest.approx(100 * math.exp(1 - 5 / 4))


def test_perplexity_by_hand_and_against_full_forward(copy_data):
    pairs = load_split(copy_data, "test")
    model = tiny_model(120)
    with torch.no_grad():
        model.embedding.weight.zero_()  # every logit 0: a uniform distribution, perplexity = V exactly
    res = perplexity(model, pairs, max_tokens=64)
    assert res.ppl == pytest.approx(120.0, rel=1e-5)
    assert res.tokens == sum(len(t) + 1 for _, t in pairs)  # EOS counted

    model = tiny_model(120, seed=3)
    nll = 0.0
    for s, t in pairs:  # one pair at a time, full forward, no batching or padding
        s, t = s.tolist(), t.tolist()
        src = torch.tensor([s + [3]])
        tgt_in, tgt_out = torch.tensor([[2] + t]), torch.tensor(t + [3])
        with torch.no_grad():
            lp = model(src, tgt_in)[0].log_softmax(-1)
        nll -= lp.gather(1, tgt_out[:, None]).sum().item()
    res = perplexity(model, pairs, max_tokens=100)
    assert res.nll == pytest.approx(nll, rel=1e-4)
    assert res.ppl == pytest.approx(math.exp(nll / res.tokens), rel=1e-4)


def test_evaluate_cli(tmp_path, copy_data, capsys):
    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.de"
    hyp.write_text("\n".join(HYPS) + "\n")
    ref.write_text("\n".join(REFS) + "\n")
    assert main(["evaluate", "--hyp", str(hyp), "--ref", str(ref)]) == 0
    out = capsys.readouterr().out
    assert f"{sacrebleu.corpus_bleu(HYPS, [REFS]).score:6.2f}" in out and "nrefs:1|case:mixed" in out
    assert "chrF" in out and "compound-split, lang de" in out

    model = tiny_model(120)
    ckpt.save_weights(RunDir(tmp_path / "run").step(1), model.state_dict(), model.cfg, 1)
    (tmp_path / "run" / "vocab.model").write_bytes((copy_data / "vocab.model").read_bytes())
    args = ["evaluate", "--checkpoint", str(tmp_path / "run"), "--data", str(copy_data), "--split", "valid"]
    assert main(args) == 0
    expect = perplexity(model, load_split(copy_data, "valid"))
    assert f"perplexity      {expect.ppl:6.3f}" in capsys.readouterr().out

    hyp.write_text("one line\n")
    assert main(["evaluate", "--hyp", str(hyp), "--ref", str(ref)]) == 1  # line counts differ: an error


def _test_set(lines: int = 50) -> tuple[list[str], list[str], list[str]]:
    """References of 10 words from a small vocabulary, and two systems that each replace ~40 % of the words at
    random: close enough that neither is clearly better."""
    rng = random.Random(0)
    words = "Die Katze sitzt auf der Matte im roten Haus am grünen Baum und läuft schnell weg".split()
    refs = [" ".join(rng.choice(words) for _ in range(10)) + "." for _ in range(lines)]

    def corrupt() -> list[str]:
        return [" ".join(w if rng.random() < 0.6 else rng.choice(words) for w in r.split()) for r in refs]

    return refs, corrupt(), corrupt()


@pytest.mark.parametrize("test", ["bs", "ar"])
def test_paired_significance_equals_sacrebleus_paired_test(test, monkeypatch):
    refs, baseline, other = _test_set()
    systems = {"baseline": baseline, "other": other, "references": refs}
    monkeypatch.delenv("SACREBLEU_SEED", raising=False)
    ours = paired_significance(systems, refs, n=200, seed=7, test=test, ci_n=100)
    assert "SACREBLEU_SEED" not in os.environ  # the seed is an argument; the environment is left as it was
    monkeypatch.setenv("SACREBLEU_SEED", "7")
    sigs, theirs = PairedTest(list(systems.items()), {"BLEU": sacrebleu.BLEU(), "chrF": sacrebleu.CHRF()},
                              [refs], test_type=test, n_samples=200, n_ar_confidence=100 if test == "ar" else -1)()
    assert theirs["System"] == list(ours.scores["bleu"]) and ours.baseline == "baseline"
    for key, name in (("bleu", "BLEU"), ("chrf", "chrF2")):
        got = [(r.score, r.mean, r.ci, r.p_value) for r in ours.scores[key].values()]
        assert got == [(r.score, float(r.mean), float(r.ci), r.p_value) for r in theirs[name]]
        assert ours.signatures[key] == sigs[name].format() and "seed:7" in ours.signatures[key]
    assert (ours.samples, ours.ci_samples) == (200, 200 if test == "bs" else 100)
    assert ours.scores["bleu"]["other"].p_value > 0.05 and ours.scores["chrf"]["other"].p_value > 0.05  # chance
    assert ours.scores["bleu"]["references"].significant and ours.scores["chrf"]["references"].significant
    assert ours.scores["bleu"]["baseline"].score == corpus_bleu(baseline, refs).score


def test_a_copy_of_the_baseline_is_not_significant_and_the_references_are():
    refs, baseline, _ = _test_set()
    systems = {"baseline": baseline, "copy": list(baseline), "copy, spaces doubled": [h.replace(" ", "  ")
               for h in baseline], "references": refs}
    result = paired_significance(systems, refs, n=200, metrics=("bleu", "chrf", "tokenized_bleu"), lang="de")
    for key, scores in result.scores.items():
        assert scores["baseline"].p_value is None and not scores["baseline"].significant
        # sacreBLEU alone returns its floor 1/(n+1) here: every resampled difference is 0, none larger than 0
        for copy in ("copy", "copy, spaces doubled"):
            assert scores[copy].p_value == 1.0 and not scores[copy].significant, key
            assert (scores[copy].score, scores[copy].mean) == (scores["baseline"].score, scores["baseline"].mean)
        refs_row = scores["references"]
        assert refs_row.score == pytest.approx(100) and refs_row.p_value < 0.05 and refs_row.significant, key
        low, high = scores["baseline"].mean - scores["baseline"].ci, scores["baseline"].mean + scores["baseline"].ci
        assert 0 < scores["baseline"].ci and low < scores["baseline"].score < high
    assert result.scores["tokenized_bleu"]["baseline"].score == tokenized_bleu(baseline, refs, "de").score
    assert "compound-split, lang de" in result.tokenization


def test_paired_significance_says_what_is_wrong():
    refs, baseline, other = _test_set(5)
    with pytest.raises(ValueError, match="two or more systems"):
        paired_significance({"baseline": baseline}, refs)
    with pytest.raises(ValueError, match="system 'other' has 4 lines but the references have 5"):
        paired_significance({"baseline": baseline, "other": other[:4]}, refs)
    with pytest.raises(ValueError, match="seed must be an integer >= 1"):
        paired_significance({"baseline": baseline, "other": other}, refs, seed=0)
    with pytest.raises(ValueError, match="metrics must be some of"):
        paired_significance({"baseline": baseline, "other": other}, refs, metrics=("ter",))


def test_evaluate_compares_systems(tmp_path, capsys):
    refs, baseline, other = _test_set()
    files = {name: tmp_path / name for name in ("test.de", "base.hyp", "other.hyp")}
    for path, lines in zip(files.values(), (refs, baseline, other)):
        path.write_text("\n".join(lines) + "\n")
    ref, base, second = (str(p) for p in files.values())
    args = ["evaluate", "--ref", ref, "--hyp", base, "--hyp", second, "--hyp", ref, "--paired-bs-n", "200"]
    assert main([*args, "--paired-bs", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    expect = paired_significance({"base.hyp": baseline, "other.hyp": other, "test.de": refs}, refs, n=200, seed=3,
                                 metrics=("bleu", "chrf", "tokenized_bleu"), lang="de")
    assert out.startswith(f"systems: the --hyp files in {tmp_path}/\n")  # named relative to their folder
    assert "paired bootstrap resampling, 200 resamples, seed 3" in out and "compound-split, lang de" in out
    for key, label in (("bleu", "sacreBLEU"), ("chrf", "chrF"), ("tokenized_bleu", "tokenized BLEU")):
        block = out.split(label + "  (")[1].split("\n\n")[0]
        assert expect.signatures[key] in block
        b, o, r = expect.scores[key].values()
        assert f"  base.hyp   {b.score:6.2f}  {b.mean:6.2f} ± {b.ci:5.2f}     baseline" in block
        assert f"{o.score:6.2f}  {o.mean:6.2f} ± {o.ci:5.2f}     {o.p_value:.4f}\n" in block + "\n"
        assert f"{r.p_value:.4f} *" in block
    assert main([*args, "--paired-ar", "--paired-ar-n", "100"]) == 0
    assert "paired approximate randomization, 100 trials, intervals from 200 bootstrap" in capsys.readouterr().out

    files["base.hyp"].write_text("\n".join(baseline[:49]) + "\n")
    assert main([*args, "--paired-bs"]) == 1
    assert f"{base} has 49 lines but {ref} has 50" in capsys.readouterr().err
