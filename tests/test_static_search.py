"""The static-shape decoder (aiayn.decoding.static_search) against aiayn.decoding.search: the same hypotheses, tokens,
scores and positional scores, on tiny random models whose EOS logit is raised so that sentences finish at different
steps."""

import functools

import pytest
import torch
from helpers import tiny_model

from aiayn.config import EOS_ID, PAD_ID
from aiayn.decoding.search import SearchConfig, beam_search, greedy_search
from aiayn.decoding.static_search import StaticDecoder, static_search
from aiayn.errors import UsageError


def _sources(n: int = 8, seed: int = 1) -> torch.Tensor:
    """n sentences of 1-9 tokens (EOS last), right-padded."""
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, 10, (n,), generator=g).tolist()
    src = torch.full((n, max(lens)), PAD_ID)
    for i, m in enumerate(lens):
        src[i, : m - 1] = torch.randint(4, 1000, (m - 1,), generator=g)
        src[i, m - 1] = EOS_ID
    return src


def _assert_same(got, want):
    assert [[h.tokens for h in s] for s in got] == [[h.tokens for h in s] for s in want]
    for gs, ws in zip(got, want):
        for g, w in zip(gs, ws):
            assert g.score == pytest.approx(w.score, rel=1e-6, abs=1e-5)  # fp32 sums in another order
            assert g.positional_scores == pytest.approx(w.positional_scores, rel=1e-6, abs=1e-5)


MODELS = {"post-norm": {}, "pre-norm": {"norm_first": True}, "learned": {"positional": "learned"}}


@functools.cache
def _model(name: str, eos_bias: float):
    """The tiny preset with random weights and the EOS logit raised by eos_bias, so that output lengths vary."""
    model = tiny_model(1000, seed=0, **MODELS[name])
    with torch.no_grad():
        eos = model.embedding.weight[EOS_ID]
        last = model.decoder.norm if model.cfg.norm_first else model.decoder.layers[-1].sublayers[-1].norm
        last.bias += eos_bias * eos / eos.dot(eos)
    return model


@pytest.fixture(scope="module", params=list(MODELS))
def model(request):
    return _model(request.param, 3.2)


SEARCHES = [
    SearchConfig(beam=1, max_len_b=12),
    SearchConfig(beam=1, max_len_a=0.5, max_len_b=2, min_len=3, lp="power", alpha=1.0),
    SearchConfig(beam=4, max_len_b=12),
    SearchConfig(beam=2, nbest=2, max_len_b=12),
    SearchConfig(beam=4, nbest=3, max_len_a=0.5, max_len_b=2, min_len=3, lp="power", alpha=1.0),
    SearchConfig(beam=3, nbest=2, max_len_b=10, alpha=0.0),
    SearchConfig(beam=4, max_len_b=12, beam_patience=1.0),
    SearchConfig(beam=4, nbest=2, max_len_b=12, beam_patience=0.5, lp="power"),
]


@pytest.mark.parametrize("search", SEARCHES,
                         ids=lambda s: f"beam{s.beam}-nbest{s.nbest}-{s.lp}-min{s.min_len}-p{s.beam_patience}")
@pytest.mark.parametrize("name", list(MODELS))
def test_static_search_equals_search(name, search):
    model, src = _model(name, 5.5 if search.beam == 1 else 3.2), _sources()  # beam search ends sooner
    want = (greedy_search if search.beam == 1 else beam_search)(model, src, search)
    lengths = {len(h.tokens) for s in want for h in s}
    assert len(lengths) > 2  # sentences finish at different steps: masked rows must not disturb the live ones
    _assert_same(static_search(model, src, search), want)


def test_limits_respected(model):
    src = _sources()
    search = SearchConfig(beam=4, nbest=4, max_len_a=0.5, max_len_b=2, min_len=2)
    for s, hyps in zip(src, static_search(model, src, search)):
        limit = max(int(0.5 * int(s.ne(PAD_ID).sum()) + 2), 2)
        assert hyps and all(2 <= len(h.tokens) <= limit for h in hyps)


def test_one_decoder_many_batches_and_the_hard_cap(model):
    """A decoder reused across batches of other shapes and searches; max_len caps words as the eager search does."""
    decoder = StaticDecoder(model, max_len=24)
    for seed, search in [(1, SearchConfig(beam=4, max_len_b=12)), (2, SearchConfig(beam=1, max_len_b=12)),
                         (1, SearchConfig(beam=4, max_len_b=12))]:
        src = _sources(5 + seed, seed)
        _assert_same(decoder.search(src, search), beam_search(model, src, search) if search.beam > 1
                     else greedy_search(model, src, search))
    src = _sources()
    _assert_same(decoder.search(src, SearchConfig(beam=2, max_len_b=50), max_len=4),
                 beam_search(model, src, SearchConfig(beam=2, max_len_b=50), max_len=4))
    with pytest.raises(UsageError, match="max_len"):
        decoder.search(src, SearchConfig(beam=2, max_len_b=50))
    with pytest.raises(UsageError, match="constrained"):
        decoder.search(src, SearchConfig(beam=2), constraint=lambda rows, prefix: None)
    for search, options, says in [(SearchConfig(beam=1, sampling=True), {}, "sampling"),
                                  (SearchConfig(beam=2, no_repeat_ngram_size=2), {}, "no_repeat_ngram_size"),
                                  (SearchConfig(beam=2), {"prefixes": [[5]] * src.size(0)}, "target prefixes")]:
        with pytest.raises(UsageError, match=f"^{says}: not supported by the static"):
            decoder.search(src, search, **options)


def test_decode_speed_graphed_smoke():
    from benchmarks.gpu.check import decode_speed

    for beam in (1, 2):
        rec = decode_speed("tiny", "fp32", beam, 3, 5, torch.device("cpu"), graphed=True)
        assert rec["graphed"] and rec["sent_s"] > 0


def test_fixed_shape_steps_run_the_models_own_attention_and_keep_few_states(model):
    """The fixed-shape step runs the model's own decoder layers and MultiHeadAttention modules (FixedLayerCache), so
    an attention swapped into a module (as aiayn.viz's recorder) is the one that runs; states are kept per batch
    shape, the least recently used dropped past MAX_STATES."""
    from aiayn.decoding import static_search as ss
    from aiayn.model import attention

    calls = {"self": 0, "cross": 0}
    for layer in model.decoder.layers:
        for kind, module in (("self", layer.self_attn), ("cross", layer.cross_attn)):
            module.attention = functools.partial(_counting, calls, kind)
    try:
        src, search = _sources(), SearchConfig(beam=2, max_len_b=6)
        _assert_same(static_search(model, src, search), beam_search(model, src, search))
    finally:
        for layer in model.decoder.layers:
            layer.self_attn.attention = layer.cross_attn.attention = attention
    steps = calls["self"] // len(model.decoder.layers)
    assert steps >= 2 and calls["cross"] == calls["self"]

    decoder = StaticDecoder(model, max_len=24)
    for n in range(1, ss.MAX_STATES + 3):
        decoder.search(_sources(n, seed=n)[:, :9], SearchConfig(beam=1, max_len_a=0, max_len_b=3))
    assert len(decoder.states) == ss.MAX_STATES


def _counting(calls, kind, *args):
    from aiayn.model import attention

    calls[kind] += 1
    return attention(*args)


def test_bf16_decoding_copy_runs_the_fixed_shape_search():
    """The bf16 decoding copy (what `--precision bf16` runs) through the fixed-shape steps: its attention takes the
    fused kernel, whose mask must broadcast; the hypotheses are the eager search's up to bf16 rounding."""
    from aiayn.decoding.inference import decoding_copy

    model, src = decoding_copy(_model("post-norm", 3.2), "bf16"), _sources()
    search = SearchConfig(beam=2, max_len_b=12)
    got, want = static_search(model, src, search), beam_search(model, src, search)
    same = sum(g[0].tokens == w[0].tokens for g, w in zip(got, want))
    assert same >= len(want) - 1
    table = model.sinusoids.size(0)  # a decoder sized past the sinusoid table computes the rest in bf16 too
    long = StaticDecoder(model, max_len=table + 10)
    assert long.positions.dtype == torch.bfloat16 and long.positions.size(0) == table + 11
    _assert_same(long.search(src, search), got)
