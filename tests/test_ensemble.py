"""Ensembles (aiayn.decoding.ensemble): the mixed distribution is the members' mean probability, incremental decoding
equals full decoding, a search over the ensemble takes the hand-computed argmax, an ensemble of one model twice is that
model, and mismatched vocabularies are refused."""

import math

import pytest
import torch
from helpers import save_run, tiny_model

from aiayn.cli import main
from aiayn.config import BOS_ID, EOS_ID, PAD_ID
from aiayn.data import Vocab
from aiayn.decoding.ensemble import Ensemble, check_same_vocabulary
from aiayn.decoding.search import SearchConfig, beam_search, greedy_search
from aiayn.decoding.translator import Translator
from aiayn.errors import UsageError

V = 40


def _src() -> torch.Tensor:
    torch.manual_seed(3)
    src = torch.randint(4, V, (3, 7))
    src[1, 5:] = PAD_ID
    src[2, 3:] = PAD_ID
    src[:, -1].masked_fill_(src[:, -1].ne(PAD_ID), EOS_ID)
    return src


def _members():
    # different seeds and shapes: the second wider (its memory splits off at another width) with a deeper decoder
    return [tiny_model(V, seed=1, eos_bias=2.0), tiny_model(V, seed=2, eos_bias=2.0, d_model=48, n_dec_layers=3)]


def test_step_distribution_is_the_mean_of_the_members_probabilities():
    members, src = _members(), _src()
    ens = Ensemble(members).eval()
    tgt = torch.cat([torch.full((3, 1), BOS_ID), torch.randint(4, V, (3, 5))], dim=1)
    with torch.no_grad():
        got = ens.decode(tgt, ens.encode(src), src.eq(PAD_ID))
        probs = [torch.softmax(m(src, tgt), -1) for m in members]
    want = torch.log((probs[0] + probs[1]) / 2)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got.exp().sum(-1), torch.ones(3, 6), atol=1e-5, rtol=0)  # normalized


def test_incremental_decoding_equals_full_decoding():
    members, src = _members(), _src()
    ens = Ensemble(members).eval()
    tgt = torch.cat([torch.full((3, 1), BOS_ID), torch.randint(4, V, (3, 6))], dim=1)
    with torch.no_grad():
        memory, pad = ens.encode(src), src.eq(PAD_ID)
        full = ens.decode(tgt, memory, pad)
        cache = ens.new_cache()
        steps = [ens.decode(tgt[:, t: t + 1], memory, pad, cache=cache) for t in range(tgt.size(1))]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)


def test_greedy_search_takes_the_argmax_of_the_mixture_by_hand():
    members, src = _members(), _src()
    ens = Ensemble(members).eval()
    hyps = greedy_search(ens, src, SearchConfig(beam=1, max_len_a=0, max_len_b=8))
    for i in range(src.size(0)):
        row = src[i: i + 1, : int(src[i].ne(PAD_ID).sum())]
        prefix, total = [BOS_ID], 0.0
        with torch.no_grad():
            for _ in range(9):
                tgt = torch.tensor([prefix])
                mix = sum(torch.softmax(m(row, tgt)[0, -1], -1) for m in members) / 2
                mix[[PAD_ID, BOS_ID]] = 0
                if len(prefix) == 1:  # min_len 1: no empty output
                    mix[EOS_ID] = 0
                if len(prefix) == 9:  # at the word limit only EOS
                    nxt = EOS_ID
                else:
                    nxt = int(mix.argmax())
                total += math.log(float(mix[nxt]))
                prefix.append(nxt)
                if nxt == EOS_ID:
                    break
        assert hyps[i][0].tokens == prefix[1:-1], i
        assert sum(hyps[i][0].positional_scores) == pytest.approx(total, abs=1e-4)


def test_an_ensemble_of_one_model_twice_is_that_model():
    model, src = tiny_model(V, seed=5, eos_bias=2.0), _src()
    search = SearchConfig(beam=3, nbest=3, max_len_a=0, max_len_b=10)
    alone = beam_search(model, src, search)
    twice = beam_search(Ensemble([model, model]).eval(), src, search)
    for a, b in zip(alone, twice):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-4)


def test_members_must_share_a_vocabulary():
    with pytest.raises(UsageError, match="share one vocabulary"):
        Ensemble([tiny_model(V), tiny_model(V + 1)])
    with pytest.raises(UsageError, match="two or more"):
        Ensemble([tiny_model(V)])

    class Pieces:
        def __init__(self, pieces):
            self.pieces = pieces

        def __len__(self):
            return len(self.pieces)

        def piece(self, i):
            return self.pieces[i]

    check_same_vocabulary([Pieces("abc"), Pieces("abc")], ["a", "b"])
    with pytest.raises(UsageError, match="b: its vocabulary differs from a's .*first difference at id 1"):
        check_same_vocabulary([Pieces("abc"), Pieces("axc")], ["a", "b"])


def test_translate_cli_decodes_several_checkpoints_as_an_ensemble(copy_data, tmp_path, capsys):
    vocab = copy_data / "vocab.model"
    n = len(Vocab.load(vocab))
    runs = [save_run(tiny_model(n, seed=s, eos_bias=3.0), vocab, tmp_path / f"run{s}") for s in (1, 2)]
    src = tmp_path / "in.txt"
    src.write_text("a b c\n\nd e\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    assert main(["translate", "--checkpoint", *map(str, runs), "--input", str(src), "--output", str(out),
                 "--no-progress"]) == 0
    got = out.read_text(encoding="utf-8").splitlines()
    want = Translator.load(runs).translate(["a b c", "", "d e"])
    assert got == want and got[1] == ""
    assert main(["translate", "--checkpoint", *map(str, runs), "--print-alignment"]) == 2
    assert "an ensemble" in capsys.readouterr().err
