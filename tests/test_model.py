"""The model against the paper: masks, padding, caching, attention formula, positions, tying, counts, and an
independent implementation (torch.nn.Transformer)."""

import math

import pytest
import torch
from torch import nn

from aiayn.config import PAD_ID, PRESETS, ModelConfig
from aiayn.errors import UsageError
from aiayn.experiments.paper import TABLE3
from aiayn.model import (
    MultiHeadAttention,
    Transformer,
    count_parameters,
    expected_parameters,
    scaled_dot_product_attention,
    sinusoidal_positions,
)

V = 50


def tiny(**kw) -> ModelConfig:
    return ModelConfig.preset("tiny", vocab_size=V, **kw)


def make_model(seed: int = 0, **kw) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(tiny(**kw)).eval()


def rand_tokens(b: int, n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, V, (b, n), generator=g)


def test_causal_mask_no_future_leak():
    model = make_model()
    src, tgt = rand_tokens(2, 7, 1), rand_tokens(2, 9, 2)
    base = model(src, tgt)
    for j in range(tgt.size(1)):
        changed = tgt.clone()
        changed[:, j] = (changed[:, j] + 1 - 4) % (V - 4) + 4
        out = model(src, changed)
        torch.testing.assert_close(out[:, :j], base[:, :j], rtol=0, atol=1e-6)
        assert not torch.allclose(out[:, j:], base[:, j:])  # the change is visible from j on


@pytest.mark.parametrize("norm_first", [False, True])
def test_padding_changes_nothing(norm_first):
    model = make_model(norm_first=norm_first)
    src, tgt = rand_tokens(3, 6, 3), rand_tokens(3, 5, 4)
    base = model(src, tgt)
    pad = lambda x, k: torch.cat([x, torch.full((x.size(0), k), PAD_ID)], dim=1)  # noqa: E731
    torch.testing.assert_close(model(pad(src, 4), tgt), base, rtol=0, atol=1e-5)
    torch.testing.assert_close(model(src, pad(tgt, 3))[:, :5], base, rtol=0, atol=1e-5)
    # Ragged batch: each sentence alone equals its row in a padded batch.
    lens = [6, 3, 4]
    ragged = src.clone()
    for i, n in enumerate(lens):
        ragged[i, n:] = PAD_ID
    batched = model(ragged, tgt)
    for i, n in enumerate(lens):
        alone = model(src[i: i + 1, :n], tgt[i: i + 1])
        torch.testing.assert_close(batched[i: i + 1], alone, rtol=0, atol=1e-5)


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_incremental_decoding_equals_full(positional):
    model = make_model(positional=positional)
    src, tgt = rand_tokens(3, 6, 5), rand_tokens(3, 8, 6)
    src[1, 4:] = PAD_ID
    memory = model.encode(src)
    src_pad = src.eq(PAD_ID)
    full = model.decode(tgt, memory, src_pad)
    cache = model.new_cache()
    steps = [model.decode(tgt[:, t: t + 1], memory, src_pad, cache=cache) for t in range(tgt.size(1))]
    assert cache.length == tgt.size(1)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-5)
    # Cross-attention keys/values were computed once: the cache holds one copy of source length.
    assert cache.layers[0].cross_k.shape[2] == src.size(1)
    # ... and stored as the steps read them, so that no step copies them again (a speed property: docs/speed-design.md;
    # K contiguous for torch's matmuls, beams of 4 or more K^T, aiayn.native's kernel K^T padded:
    # aiayn.decoding.cache.keys_for_queries).
    from aiayn import native

    assert all((native.reads_keys(c.cross_k) if native.available() else c.cross_k.is_contiguous())
               and c.cross_v.is_contiguous() for c in cache.layers)
    # A prefix of several positions at once, then single steps.
    cache = model.new_cache()
    first = model.decode(tgt[:, :3], memory, src_pad, cache=cache)
    rest = model.decode(tgt[:, 3:5], memory, src_pad, cache=cache)
    torch.testing.assert_close(torch.cat([first, rest], 1), full[:, :5], rtol=0, atol=1e-5)


@pytest.mark.parametrize("bf16", [False, True])
def test_beam_rows_share_their_sentence_memory(bf16):
    """g decoder rows per sentence (beam search's layout) against memory kept once per sentence give what the
    same rows give against memory repeated per row; reordering rows within sentences and dropping a sentence
    keep that true."""
    model = make_model()
    src = rand_tokens(3, 6, 9)
    src[1, 4:] = PAD_ID
    g = 4
    tgt = rand_tokens(3 * g, 5, 10)
    memory, src_pad = model.encode(src), src.eq(PAD_ID)
    per_row = memory.repeat_interleave(g, 0), src_pad.repeat_interleave(g, 0)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        cache = model.new_cache()
        model.decode(tgt[::g, :1], memory, src_pad, cache=cache)  # first step: one row per sentence
        cache.reorder(torch.arange(3).repeat_interleave(g))  # then g rows each, sentence-major
        grouped = model.decode(tgt[:, 1:3], memory, src_pad, cache=cache)
        prefix = torch.cat([tgt[::g, :1].repeat_interleave(g, 0), tgt[:, 1:3]], 1)
        ref = model.decode(prefix, *per_row)[:, 1:]
        # bf16: the steps' attention is torch's fused kernel, the reference's two matmuls, rounded differently
        torch.testing.assert_close(grouped, ref, rtol=0, atol=4e-2 if bf16 else 1e-5)
        # beams move within their sentence, and sentence 1 leaves the batch
        rows = torch.tensor([1, 1, 0, 3, 11, 8, 8, 9])
        cache.reorder(rows, torch.tensor([0, 2]))
        step = model.decode(tgt[rows, 3:4], memory[[0, 2]], src_pad[[0, 2]], cache=cache)
        prefix = torch.cat([prefix[rows], tgt[rows, 3:4]], 1)
        ref = model.decode(prefix, per_row[0][rows], per_row[1][rows])[:, -1:]
        torch.testing.assert_close(step, ref, rtol=0, atol=4e-2 if bf16 else 1e-5)
    with pytest.raises(ValueError, match="do not group evenly"):
        model.decode(tgt[:5, :1], memory, src_pad, cache=model.new_cache())


def naive_multihead(mha: MultiHeadAttention, q_in, kv_in, mask=None):
    """MultiHead = Concat(head_1..head_h) W^O with head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V), one head at a
    time, straight from the formula."""
    h, dk, dv = mha.h, mha.d_k, mha.d_v
    wq, wk, wv = mha.w_q.weight, mha.w_k.weight, mha.w_v.weight
    bq, bk, bv = mha.w_q.bias, mha.w_k.bias, mha.w_v.bias
    heads = []
    for i in range(h):
        sq, sv = slice(i * dk, (i + 1) * dk), slice(i * dv, (i + 1) * dv)
        Q = q_in @ wq[sq].T + bq[sq]
        K = kv_in @ wk[sq].T + bk[sq]
        Vh = kv_in @ wv[sv].T + bv[sv]
        scores = Q @ K.transpose(-1, -2) / math.sqrt(dk)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        heads.append(torch.softmax(scores, -1) @ Vh)
    return torch.cat(heads, -1) @ mha.w_o.weight.T + mha.w_o.bias


@pytest.mark.parametrize("h,dk,dv", [(4, 8, 8), (4, 5, 3), (1, 32, 32), (8, 16, 4)])
@pytest.mark.parametrize("self_attention", [True, False])
def test_multihead_equals_per_head_loop(h, dk, dv, self_attention):
    torch.manual_seed(0)
    d = 32
    mha = MultiHeadAttention(d, h, dk, dv, self_attention)
    for p in mha.parameters():
        nn.init.normal_(p, std=0.3)
    x, mem = torch.randn(2, 5, d), torch.randn(2, 7, d)
    kv = x if self_attention else mem
    key_mask = torch.ones(2, 1, 1, kv.size(1), dtype=torch.bool)
    key_mask[1, ..., -2:] = False
    expected = naive_multihead(mha, x, kv, key_mask[:, 0])
    got = mha(x, mask=key_mask) if self_attention else mha(x, mem, mask=key_mask)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    weights = []  # the reference path as `attention` gives the same output and weights that sum to 1

    def reference(q, k, v, mask, is_causal, decoding=False):
        out, w = scaled_dot_product_attention(q, k, v, mask, is_causal)
        weights.append(w)
        return out

    mha.attention = reference
    again = mha(x, mask=key_mask) if self_attention else mha(x, mem, mask=key_mask)
    torch.testing.assert_close(again, expected, rtol=0, atol=1e-5)
    assert weights[0].shape == (2, h, 5, kv.size(1))
    torch.testing.assert_close(weights[0].sum(-1), torch.ones(2, h, 5))
    assert weights[0][1, ..., -2:].abs().max() == 0


def test_scaled_dot_product_attention_formula():
    q, k, v = torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 2)
    out, w = scaled_dot_product_attention(q, k, v)
    ref = torch.softmax(q @ k.T / 2.0, dim=-1) @ v  # sqrt(d_k) = 2
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(w.sum(-1), torch.ones(3))


def test_sinusoidal_positions_match_formula():
    d = 16
    pe = sinusoidal_positions(3000, d)
    for pos in (0, 1, 7, 511, 2999):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)
    torch.testing.assert_close(sinusoidal_positions(5, d, offset=2995), pe[2995:])
    # Positions past the model's table (max_positions=256 for tiny) are computed, not cut off.
    model = make_model()
    torch.testing.assert_close(model.position_encoding(10, 300, torch.device("cpu")),
                               sinusoidal_positions(310, 32)[300:])
    long_src = rand_tokens(1, 400, 9)
    assert torch.isfinite(model(long_src, rand_tokens(1, 3, 10))).all()


def test_learned_positions_refuse_past_table():
    model = make_model(positional="learned", max_positions=8)
    with pytest.raises(ValueError, match="max_positions"):
        model(rand_tokens(1, 9, 1), rand_tokens(1, 2, 2))


def test_embeddings_tied_and_scaled():
    model = make_model()
    names = [n for n, p in model.named_parameters() if p.dim() == 2 and p.shape == (V, 32)]
    assert names == ["embedding.weight"]  # one tensor for source, target and output projection
    tokens = rand_tokens(2, 4, 11)
    model.dropout.p = 0.0
    x = model.embed(tokens)
    expected = model.embedding.weight[tokens] * math.sqrt(32) + sinusoidal_positions(4, 32)
    torch.testing.assert_close(x, expected)
    h = torch.randn(2, 3, 32)
    torch.testing.assert_close(model.output_logits(h), h @ model.embedding.weight.T)
    # A gradient through the output projection and one through the source embedding meet in one tensor.
    model.zero_grad()
    model(tokens, tokens).sum().backward()
    assert model.embedding.weight.grad is not None


def test_options_for_imported_models():
    """activation="swish" puts x * sigmoid(x) in eq. 2; output_bias adds a (V,) bias to the tied projection; both
    off by default, so the paper's model has exactly the tensors it had (older checkpoints load unchanged)."""
    paper, imported = make_model(), make_model(activation="swish", output_bias=True)
    assert set(imported.state_dict()) - set(paper.state_dict()) == {"output_bias"}
    assert paper.output_bias is None and not imported.output_bias.any()  # starts at zero
    assert count_parameters(imported) == expected_parameters(imported.cfg) == count_parameters(paper) + V
    ffn, x = imported.encoder.layers[0].ffn, torch.randn(2, 3, 32)
    hidden = ffn.w_1(x)
    torch.testing.assert_close(ffn(x), ffn.w_2(hidden * torch.sigmoid(hidden)))
    relu = paper.encoder.layers[0].ffn
    torch.testing.assert_close(relu(x), relu.w_2(relu.w_1(x).clamp(min=0)))
    with torch.no_grad():
        imported.output_bias.normal_()
    h = torch.randn(2, 3, 32)
    torch.testing.assert_close(imported.output_logits(h), h @ imported.embedding.weight.T + imported.output_bias)


def test_initialization_scale():
    torch.manual_seed(0)
    cfg = ModelConfig.preset("small")
    model = Transformer(cfg)
    emb = model.embedding.weight
    assert emb[PAD_ID].abs().max() == 0
    assert emb[1:].std().item() == pytest.approx(cfg.d_model**-0.5, rel=0.02)
    w1 = model.encoder.layers[0].ffn.w_1.weight
    assert w1.std().item() == pytest.approx(math.sqrt(2 / (cfg.d_model + cfg.d_ff)), rel=0.03)
    wq = model.encoder.layers[0].self_attn.w_q.weight
    assert wq.std().item() == pytest.approx(math.sqrt(2 / (cfg.d_model + cfg.n_heads * cfg.d_k)), rel=0.03)
    assert all(m.bias.abs().max() == 0 for m in model.modules() if isinstance(m, nn.Linear))
    # Initial logits have about unit scale (post-norm output x tied embedding of std D^-0.5).
    model.eval()
    logits = model(torch.randint(4, cfg.vocab_size, (4, 10)), torch.randint(4, cfg.vocab_size, (4, 10)))
    assert 0.5 < logits.std().item() < 2.0


def test_fairseq_initialization():
    """init="fairseq": fairseq 0.12's transformer, W^Q/K/V Xavier with gain 1/sqrt(2), W^O Xavier with zero bias, and
    torch's nn.Linear default (U(+-1/sqrt(fan_in)), std 1/sqrt(3 fan_in)) for the Q/K/V biases and the FFN."""
    torch.manual_seed(0)
    cfg = ModelConfig.preset("small", init="fairseq")
    model = Transformer(cfg)
    D, F_ = cfg.d_model, cfg.d_ff
    for attn in (model.encoder.layers[0].self_attn, model.decoder.layers[1].cross_attn):
        for lin in (attn.w_q, attn.w_k, attn.w_v):
            assert lin.weight.std().item() == pytest.approx(math.sqrt(2 / (2 * D)) / math.sqrt(2), rel=0.03)
            assert lin.bias.abs().max().item() == pytest.approx(D**-0.5, rel=0.05)  # default U(+-1/sqrt(D)), kept
        assert attn.w_o.weight.std().item() == pytest.approx(math.sqrt(2 / (2 * D)), rel=0.03)
        assert attn.w_o.bias.abs().max() == 0
    ffn = model.decoder.layers[0].ffn
    assert ffn.w_1.weight.std().item() == pytest.approx((3 * D) ** -0.5, rel=0.03)
    assert ffn.w_2.weight.std().item() == pytest.approx((3 * F_) ** -0.5, rel=0.03)  # half of Xavier's here
    assert ffn.w_2.bias.abs().max().item() == pytest.approx(F_**-0.5, rel=0.05)
    assert model.embedding.weight[1:].std().item() == pytest.approx(D**-0.5, rel=0.02)  # the same in both
    with pytest.raises(UsageError, match="init must be one of"):
        ModelConfig.preset("small", init="kaiming")


@pytest.mark.parametrize("name", list(PRESETS))
def test_parameter_count_closed_form(name):
    cfg = ModelConfig.preset(name, vocab_size=37000) if name in TABLE3 else ModelConfig.preset(name)
    with torch.device("meta"):
        model = Transformer(cfg)
    assert count_parameters(model) == expected_parameters(cfg)
    paper = TABLE3.get(name, (None,))[0]
    if paper:
        # Table 3 rounds to 1M and does not state its exact vocabulary ("about 37000"): every row sits ~2M
        # above ours (a ~41K vocabulary would explain it), which is 6.5 % of the smallest row (C1, 36M).
        assert abs(count_parameters(model) / 1e6 - paper) / paper < 0.07


def test_base_parameter_count_by_hand():
    # 37000*512 embedding + 6 encoder layers (4*(512*512+512) + 2*512*2048 + 2048 + 512 + 2*2*512)
    # + 6 decoder layers (8*(512*512+512) + 2*512*2048 + 2048 + 512 + 3*2*512)
    enc = 4 * (512 * 512 + 512) + 2 * 512 * 2048 + 2048 + 512 + 4 * 512
    dec = 8 * (512 * 512 + 512) + 2 * 512 * 2048 + 2048 + 512 + 6 * 512
    assert expected_parameters(ModelConfig.preset("base")) == 37000 * 512 + 6 * enc + 6 * dec == 63_082_496


def _copy_into_torch_transformer(model: Transformer, norm_first: bool) -> nn.Transformer:
    cfg = model.cfg
    ref = nn.Transformer(cfg.d_model, cfg.n_heads, cfg.n_enc_layers, cfg.n_dec_layers, cfg.d_ff, dropout=0.0,
                         batch_first=True, norm_first=norm_first)
    if not norm_first:  # nn.Transformer always ends its stacks with a LayerNorm; the paper's post-norm does not
        ref.encoder.norm, ref.decoder.norm = nn.Identity(), nn.Identity()
    else:
        ref.encoder.norm.load_state_dict(model.encoder.norm.state_dict())
        ref.decoder.norm.load_state_dict(model.decoder.norm.state_dict())

    def copy_attn(dst: nn.MultiheadAttention, src: MultiHeadAttention):
        dst.in_proj_weight.data.copy_(torch.cat([src.w_q.weight, src.w_k.weight, src.w_v.weight]))
        dst.in_proj_bias.data.copy_(torch.cat([src.w_q.bias, src.w_k.bias, src.w_v.bias]))
        dst.out_proj.load_state_dict(src.w_o.state_dict())

    def copy_ffn_norms(dst, src, n_norms):
        dst.linear1.load_state_dict(src.ffn.w_1.state_dict())
        dst.linear2.load_state_dict(src.ffn.w_2.state_dict())
        for k in range(n_norms):
            getattr(dst, f"norm{k + 1}").load_state_dict(src.sublayers[k].norm.state_dict())

    for dst, src in zip(ref.encoder.layers, model.encoder.layers):
        copy_attn(dst.self_attn, src.self_attn)
        copy_ffn_norms(dst, src, 2)
    for dst, src in zip(ref.decoder.layers, model.decoder.layers):
        copy_attn(dst.self_attn, src.self_attn)
        copy_attn(dst.multihead_attn, src.cross_attn)
        copy_ffn_norms(dst, src, 3)
    return ref.eval()


@pytest.mark.parametrize("norm_first", [False, True])
def test_equals_torch_nn_transformer(norm_first):
    """Logits equal an independent implementation given the same weights (fp32, padded inputs)."""
    torch.manual_seed(0)
    cfg = ModelConfig.preset("tiny", vocab_size=V, d_model=64, d_ff=128, n_heads=4, d_k=16, d_v=16,
                             norm_first=norm_first)
    model = Transformer(cfg).eval()
    for p in model.parameters():  # random non-trivial LayerNorm and bias values too
        if p.dim() == 1:
            nn.init.normal_(p, std=0.5)
    ref = _copy_into_torch_transformer(model, norm_first)
    src, tgt = rand_tokens(3, 9, 12), rand_tokens(3, 7, 13)
    src[0, 6:] = PAD_ID
    src[2, 3:] = PAD_ID
    tgt[1, 5:] = PAD_ID
    ours = model(src, tgt)
    with torch.no_grad():
        out = ref(model.embed(src), model.embed(tgt),
                  src_key_padding_mask=src.eq(PAD_ID), memory_key_padding_mask=src.eq(PAD_ID),
                  tgt_mask=nn.Transformer.generate_square_subsequent_mask(7), tgt_is_causal=True)
        theirs = model.output_logits(out)
    diff = (ours - theirs).abs().max().item()
    print(f"max |aiayn - torch.nn.Transformer| = {diff:.2e}")
    assert diff < 1e-5


def test_eval_deterministic_and_dropout_only_where_the_paper_says():
    torch.manual_seed(0)
    model = Transformer(tiny(dropout=0.3))
    src, tgt = rand_tokens(2, 6, 14), rand_tokens(2, 5, 15)
    model.eval()
    torch.testing.assert_close(model(src, tgt), model(src, tgt), rtol=0, atol=0)
    model.train()
    assert not torch.allclose(model(src, tgt), model(src, tgt))
    # Count dropout applications in one forward: embeddings (source and target) + every sub-layer output.
    calls = []
    hooks = [m.register_forward_hook(lambda m, i, o: calls.append(m.p)) for m in model.modules()
             if isinstance(m, nn.Dropout)]
    model(src, tgt)
    for hk in hooks:
        hk.remove()
    cfg = model.cfg
    assert calls == [0.3] * (2 + 2 * cfg.n_enc_layers + 3 * cfg.n_dec_layers)
    # With P_drop = 0 training mode is deterministic: nothing else (attention weights, FFN inner) drops out.
    model = Transformer(tiny(dropout=0.0)).train()
    torch.testing.assert_close(model(src, tgt), model(src, tgt), rtol=0, atol=0)


def test_attention_masks_causal_and_bf16():
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 5, 8), torch.randn(3, 2, 7, 8), torch.randn(3, 2, 7, 6)
    keys = torch.rand(3, 1, 1, 7) > 0.3
    keys[..., 0] = True
    ref = torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(8)).masked_fill(~keys, float("-inf")), -1) @ v
    out, weights = scaled_dot_product_attention(q, k, v, keys)
    torch.testing.assert_close(out, ref)
    assert weights.masked_select(~keys.expand_as(weights)).eq(0).all()
    # causal with fewer queries than keys: the queries are the last 5 of 7 positions
    causal = torch.ones(7, 7, dtype=torch.bool).tril()[2:]
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v, is_causal=True)[0],
                               scaled_dot_product_attention(q, k, v, causal)[0])
    # bf16 inputs: softmax in fp32, result in bf16, close to the fp32 formula
    out, _ = scaled_dot_product_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), keys)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref, atol=3e-2, rtol=3e-2)


def test_bf16_cpu_path_leaks_nothing_and_ignores_padding():
    """Under CPU bf16 autocast attention takes the matmul path: the causal and padding masks must hold there."""
    model = make_model()
    src, tgt = rand_tokens(2, 7, 1), rand_tokens(2, 9, 2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        base = model(src, tgt).float()
        changed = tgt.clone()
        changed[:, 5:] = rand_tokens(2, 4, 3)
        out = model(src, changed).float()
        torch.testing.assert_close(out[:, :5], base[:, :5], rtol=0, atol=1e-6)
        assert (out[:, 5:] - base[:, 5:]).abs().max() > 1e-2
        padded_src = torch.cat([src, torch.full((2, 4), PAD_ID)], dim=1)
        padded_tgt = torch.cat([tgt, torch.full((2, 3), PAD_ID)], dim=1)
        out = model(padded_src, padded_tgt).float()[:, :9]
    torch.testing.assert_close(out, base, rtol=0, atol=0.05)  # bf16 rounding of differently shaped matmuls
    assert (out - base).abs().mean() < 5e-3
