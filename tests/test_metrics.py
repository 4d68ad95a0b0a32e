"""BLEU equals sacreBLEU, the paper's compound-split BLEU by hand, perplexity by hand, the CLI."""

import math

import pytest
import sacrebleu
import torch
from helpers import tiny_model

from aiayn import checkpoint as ckpt
from aiayn import rundir
from aiayn.cli import main
from aiayn.data import load_split
from aiayn.metrics import chrf, corpus_bleu, perplexity, tokenized_bleu
from aiayn.metrics.bleu import moses_tokenize, split_compounds

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
    ckpt.save_weights(rundir.step_checkpoint_path(tmp_path / "run", 1), model.state_dict(), model.cfg, 1)
    (tmp_path / "run" / "vocab.model").write_bytes((copy_data / "vocab.model").read_bytes())
    args = ["evaluate", "--checkpoint", str(tmp_path / "run"), "--data", str(copy_data), "--split", "valid"]
    assert main(args) == 0
    expect = perplexity(model, load_split(copy_data, "valid"))
    assert f"perplexity      {expect.ppl:6.3f}" in capsys.readouterr().out

    hyp.write_text("one line\n")
    assert main(["evaluate", "--hyp", str(hyp), "--ref", str(ref)]) == 1  # line counts differ: an error
