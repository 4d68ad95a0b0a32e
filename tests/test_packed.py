"""Packed batches (aiayn.training.packed): the layout worked out by hand; packed attention against dense attention under
block-diagonal masks (an independent way to keep sentences apart); the whole model against padded batches of the same
sentences (loss, gradients, encoder and decoder states, Adam steps, `train(packed=True)`); no attention across a
sentence boundary; the CUDA route's wiring against a CPU stand-in of torch's varlen_attn. The variable-length flash
kernel itself runs on CUDA only: those tests skip elsewhere."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers import REPO

from aiayn.config import BOS_ID, EOS_ID, PAD_ID, ModelConfig
from aiayn.data import PackedBatch, collate, pack
from aiayn.model import MultiHeadAttention, Transformer
from aiayn.training.losses import batch_loss, packed_batch_loss
from aiayn.training.packed import PackedMask, Sentences, use_varlen_attention, varlen_attention
from aiayn.training.train import TrainConfig, make_optimizer, train

V = 50
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="the variable-length flash kernel needs CUDA")


def random_pairs(n: int, seed: int, longest: int = 9) -> list[tuple[np.ndarray, np.ndarray]]:
    """n (source ids, target ids) pairs of 1..longest-1 words each (EOS/BOS are added by collate)."""
    rng = np.random.default_rng(seed)
    return [(rng.integers(4, V, rng.integers(1, longest)), rng.integers(4, V, rng.integers(1, longest)))
            for _ in range(n)]


def make_model(seed: int = 0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(ModelConfig.preset("tiny", vocab_size=V, dropout=0.0, **overrides))


def spans(sentences: Sentences) -> list[tuple[int, int]]:
    cu = sentences.cu_seqlens.tolist()
    return list(zip(cu[:-1], cu[1:]))


# ---------------------------------------------------------------------------------------------------------
# The layout.


def test_sentences_layout_by_hand():
    s = Sentences.from_lengths([3, 1, 2])
    assert s.cu_seqlens.tolist() == [0, 3, 4, 6] and s.cu_seqlens.dtype == torch.int32
    assert s.positions.tolist() == [0, 1, 2, 0, 0, 1]  # restarting at 0 in every sentence
    assert s.slots.tolist() == [0, 1, 2, 3, 6, 7]  # sentence * 3 + position
    assert (len(s), s.n_tokens, s.max_len) == (3, 6, 3)
    assert s.key_mask[:, 0, 0].tolist() == [[True, True, True], [True, False, False], [True, True, False]]
    x = torch.arange(1.0, 7.0).view(6, 1, 1)  # (N, h, w) = (6, 1, 1)
    assert s.pad(x)[:, 0, :, 0].tolist() == [[1, 2, 3], [4, 0, 0], [5, 6, 0]]
    assert torch.equal(s.unpad(s.pad(x)), x)
    for bad in ([], [2, 0]):
        with pytest.raises(ValueError, match="lengths >= 1"):
            Sentences.from_lengths(bad)
    with pytest.raises(ValueError, match="2 query sentences cannot attend to 3"):
        PackedMask(Sentences.from_lengths([1, 2]), s)


def test_pack_concatenates_the_sentences_of_a_padded_batch():
    batch = collate([(np.array([5, 6]), np.array([7])), (np.array([8]), np.array([9, 10, 11]))])
    p = pack(batch)
    assert isinstance(p, PackedBatch) and len(p) == 2
    assert p.src.tolist() == [5, 6, EOS_ID, 8, EOS_ID]
    assert p.tgt_in.tolist() == [BOS_ID, 7, BOS_ID, 9, 10, 11]
    assert p.tgt_out.tolist() == [7, EOS_ID, 9, 10, 11, EOS_ID]
    assert p.src_sentences.cu_seqlens.tolist() == [0, 3, 5] and p.tgt_sentences.cu_seqlens.tolist() == [0, 2, 6]
    assert (p.n_src_tokens, p.n_tgt_tokens) == (batch.n_src_tokens, batch.n_tgt_tokens) == (5, 6)
    assert PAD_ID not in p.src.tolist() + p.tgt_in.tolist() + p.tgt_out.tolist()


# ---------------------------------------------------------------------------------------------------------
# Attention: packed against one dense stream under a block-diagonal mask.


def block_diagonal(q_lengths: list[int], k_lengths: list[int], causal: bool) -> torch.Tensor:
    """(Nq, Nk) bool: query sentence i may attend to key sentence i (only to keys at or before it if causal)."""
    mask = torch.zeros(sum(q_lengths), sum(k_lengths), dtype=torch.bool)
    q0 = k0 = 0
    for lq, lk in zip(q_lengths, k_lengths):
        block = torch.ones(lq, lk, dtype=torch.bool)
        mask[q0:q0 + lq, k0:k0 + lk] = block.tril() if causal else block
        q0, k0 = q0 + lq, k0 + lk
    return mask


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])  # bf16: the matmul route, as the CPU model takes
@pytest.mark.parametrize("self_attention, causal", [(True, False), (True, True), (False, False)])
def test_packed_attention_equals_dense_attention_under_block_diagonal_masks(self_attention, causal, dtype):
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, 4, 4, self_attention)
    q_lengths = [3, 1, 5, 2]
    k_lengths = q_lengths if self_attention else [2, 6, 1, 4]
    x, memory = torch.randn(sum(q_lengths), 16), torch.randn(sum(k_lengths), 16)
    mask = PackedMask(Sentences.from_lengths(q_lengths), Sentences.from_lengths(k_lengths))
    dense = block_diagonal(q_lengths, k_lengths, causal)[None, None]  # (1, 1, Nq, Nk)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
        packed = mha(x, None if self_attention else memory, mask=mask, is_causal=causal)  # (Nq, 16)
        reference = mha(x[None], None if self_attention else memory[None], mask=dense)[0]  # (Nq, 16)
    tol = 1e-6 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(packed.float(), reference.float(), atol=tol, rtol=tol)


# ---------------------------------------------------------------------------------------------------------
# The model: packed against padded batches of the same sentences.


@pytest.mark.parametrize("overrides", [{}, {"positional": "learned"}, {"norm_first": True}])
def test_packed_loss_and_gradients_equal_padded(overrides):
    batch = collate(random_pairs(7, seed=1))
    grads = []
    for packed in (False, True):
        model = make_model(**overrides).train()
        if packed:
            p = pack(batch)
            loss, nll, n = packed_batch_loss(model, *p.inputs(), eps=0.1)
        else:
            loss, nll, n = batch_loss(model, *batch.inputs(), eps=0.1)
        loss.backward()
        grads.append(((loss.item(), nll.item(), n), {k: w.grad for k, w in model.named_parameters()}))
    (padded_sums, padded_grads), (packed_sums, packed_grads) = grads
    assert packed_sums[2] == padded_sums[2] == batch.n_tgt_tokens
    assert packed_sums[:2] == pytest.approx(padded_sums[:2], rel=1e-6)
    for name, g in padded_grads.items():
        torch.testing.assert_close(packed_grads[name], g, atol=1e-5, rtol=1e-5, msg=name)


def test_packed_encoder_and_decoder_states_equal_padded_per_sentence():
    model = make_model().eval()
    batch = collate(random_pairs(6, seed=2))
    p = pack(batch)
    with torch.no_grad():
        memory = model.encode(batch.src)  # (B, S, D)
        hidden = model.decode_hidden(batch.tgt_in, memory, batch.src.eq(PAD_ID))  # (B, T, D)
        packed_memory = model.encode_packed(p.src, p.src_sentences)  # (Ns, D)
        packed_hidden = model.decode_hidden_packed(p.tgt_in, packed_memory, p.tgt_sentences, p.src_sentences)
    for i, ((s0, s1), (t0, t1)) in enumerate(zip(spans(p.src_sentences), spans(p.tgt_sentences))):
        torch.testing.assert_close(packed_memory[s0:s1], memory[i, :s1 - s0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(packed_hidden[t0:t1], hidden[i, :t1 - t0], atol=1e-5, rtol=1e-5)


def _states(model: Transformer, pairs: list) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per sentence: its encoder outputs and its decoder states, from one packed batch of all the pairs."""
    p = pack(collate(pairs))
    with torch.no_grad():
        memory = model.encode_packed(p.src, p.src_sentences)
        hidden = model.decode_hidden_packed(p.tgt_in, memory, p.tgt_sentences, p.src_sentences)
    return ([memory[a:b] for a, b in spans(p.src_sentences)], [hidden[a:b] for a, b in spans(p.tgt_sentences)])


def test_a_sentence_sees_nothing_of_its_neighbours():
    model = make_model().eval()
    pairs = random_pairs(3, seed=3)
    other = random_pairs(1, seed=4, longest=12)[0]  # the middle pair changed: other words, other lengths
    before = _states(model, pairs)
    after = _states(model, [pairs[0], other, pairs[2]])
    for side in (0, 1):  # encoder outputs, decoder states
        for i in (0, 2):  # the neighbours of the changed pair
            torch.testing.assert_close(after[side][i], before[side][i], atol=1e-6, rtol=1e-6)
        assert after[side][1].shape != before[side][1].shape or not torch.allclose(after[side][1], before[side][1])
    # The same comparison catches a leak: one "sentence" spanning the stream lets the first see the changed one.
    p, q = pack(collate(pairs)), pack(collate([pairs[0], other, pairs[2]]))
    with torch.no_grad():
        leaky = [model.encoder(model.embed_packed(b.src, b.src_sentences),
                               PackedMask(*[Sentences.from_lengths([b.src.numel()])] * 2)) for b in (p, q)]
    first = len(pairs[0][0]) + 1
    assert not torch.allclose(leaky[0][:first], leaky[1][:first], atol=1e-4)


def test_adam_steps_on_packed_batches_give_the_parameters_of_padded_ones():
    batches = [collate(random_pairs(5, seed=10 + i)) for i in range(4)]
    models = []
    for packed in (False, True):
        model = make_model().train()
        opt = make_optimizer(model, (0.9, 0.98), 1e-9)
        for group in opt.param_groups:
            group["lr"] = 1e-3
        for b in batches:
            loss, _, n = (packed_batch_loss(model, *pack(b).inputs(), eps=0.1) if packed else
                          batch_loss(model, *b.inputs(), eps=0.1))
            (loss / n).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        models.append(dict(model.named_parameters()))
    padded, packed = models
    for name, w in padded.items():
        if name.endswith("w_k.bias"):
            # Adding a constant to every score of a row leaves the softmax unchanged: the keys' bias has zero
            # gradient in exact arithmetic, so Adam steps it by the sign of rounding noise, on either layout alike.
            continue
        torch.testing.assert_close(packed[name], w, atol=1e-5, rtol=1e-5, msg=name)
    assert any(not torch.equal(w, make_model().state_dict()[k]) for k, w in padded.items())  # the steps moved them


def test_train_packed_logs_the_losses_of_padded_batches(copy_data, tmp_path):
    cfg = ModelConfig.preset("tiny", dropout=0.0)
    logs = []
    for packed in (False, True):
        tc = TrainConfig(max_steps=6, max_tokens=400, warmup=50, log_every=1, save_every_minutes=0, threads=1,
                         device="cpu", packed=packed)
        train(copy_data, tmp_path / f"run-{packed}", cfg, tc, progress=False)
        lines = (tmp_path / f"run-{packed}" / "log.jsonl").read_text().splitlines()
        logs.append([r["loss"] for r in map(json.loads, lines) if r["kind"] == "train"])
    assert len(logs[0]) == 6 and logs[1] == pytest.approx(logs[0], rel=1e-5)
    saved = json.loads((tmp_path / "run-True" / "config.json").read_text())
    assert saved["train"]["packed"] is True


def test_gpu_benchmark_cpu_smoke(tmp_path):
    """benchmarks/gpu/packed.py in its --cpu mode: it runs, both layouts train, and they agree on the loss."""
    out = tmp_path / "packed.jsonl"
    subprocess.run([sys.executable, "-m", "benchmarks.gpu.packed", "--cpu", "--out", str(out)], cwd=REPO, check=True,
                   capture_output=True, text=True, timeout=120)
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    train_recs = [r for r in recs if r["what"] == "train"]
    assert {r["layout"] for r in train_recs} == {"padded", "packed"}
    assert all(r["tgt_tok_s"] > 0 and r["batch_tgt_tokens"] > 0 for r in train_recs)
    packed = next(r for r in train_recs if r["layout"] == "packed")
    assert packed["attention"] == "padded rows" and packed["loss_vs_padded"] < 1e-5


def test_gpu_peer_benchmark_cpu_smoke(tmp_path):
    """benchmarks/gpu/peers.py in its --cpu mode, a new batch shape at every step: every implementation trains and
    decodes the same batches (HF Marian where transformers is installed), and the table compares them."""
    pytest.importorskip("transformers")
    out = tmp_path / "peers.jsonl"
    res = subprocess.run([sys.executable, "-m", "benchmarks.gpu.peers", "--cpu", "--vary-shapes", "--out", str(out)],
                         cwd=REPO, check=True, capture_output=True, text=True, timeout=180)
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    train = [r for r in recs if r["what"] == "train"]
    assert [r["impl"] for r in train] == ["aiayn", "aiayn packed", "hf_marian", "torch_nn"]
    assert all("error" not in r and r["tgt_tok_s"] > 0 and r["shapes"] == "varied" for r in train)
    assert len({r["batch_tgt_tokens"] for r in train}) == 1  # the same batches for all
    decode = [r for r in recs if r["what"] == "decode"]
    assert {(r["impl"], r["beam"]) for r in decode} == {(i, b) for i in ("aiayn", "hf_marian") for b in (1, 4)}
    assert all("error" not in r and r["sent_s"] > 0 for r in decode)
    assert "| tiny | hf_marian | False | varied |" in res.stdout and "vs HF generate" in res.stdout


def varlen_attn_on_cpu(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, window_size=(-1, -1)):
    """torch.nn.attention.varlen.varlen_attn's documented contract, one sentence at a time: a CPU stand-in."""
    assert cu_seq_q.dtype == cu_seq_k.dtype == torch.int32 and isinstance(max_q, int) and isinstance(max_k, int)
    assert window_size in ((-1, -1), (-1, 0))
    out = []
    for (q0, q1), (k0, k1) in zip(zip(cu_seq_q[:-1].tolist(), cu_seq_q[1:].tolist()),
                                  zip(cu_seq_k[:-1].tolist(), cu_seq_k[1:].tolist())):
        assert q1 - q0 <= max_q and k1 - k0 <= max_k
        q, k, v = (t.transpose(0, 1) for t in (query[q0:q1], key[k0:k1], value[k0:k1]))  # (h, n, d)
        scores = q @ k.transpose(1, 2) / q.size(-1) ** 0.5  # (h, n, m)
        if window_size == (-1, 0):
            scores = scores.masked_fill(~torch.ones(q1 - q0, k1 - k0, dtype=torch.bool).tril(), float("-inf"))
        out.append((scores.softmax(-1) @ v).transpose(0, 1))  # (n, h, d)
    return torch.cat(out)


def test_the_model_calls_the_varlen_kernel_as_documented(monkeypatch):
    """The CUDA route's wiring (which lengths, which maximum, causal how), run on the CPU against a stand-in."""
    import aiayn.training.packed

    monkeypatch.setattr(aiayn.training.packed, "varlen_attn", varlen_attn_on_cpu)
    monkeypatch.setattr(aiayn.training.packed, "use_varlen_attention", lambda q, v: True)
    batch = collate(random_pairs(6, seed=6))
    model = make_model()
    padded, _, _ = batch_loss(model, *batch.inputs(), eps=0.1)
    packed, _, _ = packed_batch_loss(model, *pack(batch).inputs(), eps=0.1)
    assert packed.item() == pytest.approx(padded.item(), rel=1e-6)


# ---------------------------------------------------------------------------------------------------------
# CUDA: the variable-length flash kernel.


@cuda
@pytest.mark.parametrize("self_attention, causal", [(True, False), (True, True), (False, False)])
def test_varlen_attention_equals_block_diagonal_masks_on_cuda(self_attention, causal):
    torch.manual_seed(0)
    q_lengths = [3, 1, 50, 2, 17]
    k_lengths = q_lengths if self_attention else [20, 6, 1, 40, 3]
    mask = PackedMask(Sentences.from_lengths(q_lengths, "cuda"), Sentences.from_lengths(k_lengths, "cuda"))
    q = torch.randn(sum(q_lengths), 4, 64, device="cuda", requires_grad=True)
    k, v = (torch.randn(sum(k_lengths), 4, 64, device="cuda", requires_grad=True) for _ in range(2))
    assert use_varlen_attention(q.bfloat16(), v.bfloat16())
    out = varlen_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), mask, causal)  # (Nq, h, dv)
    grads = torch.autograd.grad(out.float().square().sum(), (q, k, v))
    allowed = block_diagonal(q_lengths, k_lengths, causal).cuda()  # (Nq, Nk)
    scores = torch.einsum("qhd,khd->hqk", q, k) / 8.0
    ref = torch.einsum("hqk,khd->qhd", scores.masked_fill(~allowed, float("-inf")).softmax(-1), v)
    ref_grads = torch.autograd.grad(ref.square().sum(), (q, k, v))
    for got, want in zip((out.float(), *grads), (ref, *ref_grads)):  # bf16 rounding: ~0.3 % of the norm
        assert (got - want).norm() / want.norm() < 2e-2


@cuda
def test_packed_loss_equals_padded_on_cuda_bf16():
    batch = collate(random_pairs(16, seed=5, longest=40))
    model = make_model(n_heads=4, d_k=16, d_v=16, d_model=64).cuda().train()
    head = torch.empty(1, 4, 16, device="cuda", dtype=torch.bfloat16)
    assert use_varlen_attention(head, head)  # the packed side runs the flash kernel, the padded side cannot
    with torch.autocast("cuda", dtype=torch.bfloat16):
        padded, _, _ = batch_loss(model, *batch.to("cuda").inputs(), eps=0.1)
        packed, _, _ = packed_batch_loss(model, *pack(batch).to("cuda").inputs(), eps=0.1)
    assert packed.item() == pytest.approx(padded.item(), rel=1e-2)
