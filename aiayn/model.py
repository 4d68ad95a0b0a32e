"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017), section 3.

Notation (batch first everywhere):
    B  batch size              S  source length           T  target length (t: one decoding step)
    D  d_model                 F  d_ff                    V  vocabulary size (shared)
    h  heads                   dk d_k (query/key width)   dv d_v (value width)
    Ns, Nt  tokens of all source / target sentences of a packed batch (aiayn.training.packed: no padding)

Reading guide, paper -> code:
    3.2.1 scaled dot-product attention   -> `scaled_dot_product_attention` (`attention`: it or torch's fused kernel)
    3.2.2 multi-head attention           -> `MultiHeadAttention`
    3.3   position-wise feed-forward     -> `FeedForward`
    3.1   encoder / decoder stacks       -> `EncoderLayer`, `DecoderLayer`, `Encoder`, `Decoder`
    3.4   shared embeddings, sqrt(D)     -> `Transformer.embed`, `Transformer.output_logits`
    imported OPUS-MT (not in the paper)  -> `FeedForward`'s swish, `Transformer.output_bias` (ModelConfig.activation,
                                            .output_bias; aiayn.export.marian): off unless a config asks
    3.5   positional encoding            -> `sinusoidal_positions`
    5.4   residual dropout, post-norm    -> `SublayerConnection`
    packed batches (not in the paper)    -> `Transformer.encode_packed/decode_hidden_packed`, aiayn.training.packed
    decoding a step at a time            -> `Transformer.decode` with a cache: aiayn.decoding.cache (keys/values, beam
    rows)

Initialization (documented in docs/model.md): embeddings N(0, D^-0.5) with the pad row zeroed (as fairseq,
so that embedding * sqrt(D) has unit scale and the tied output projection starts with unit-variance logits);
every projection (W^Q, W^K, W^V, W^O, W1, W2) Xavier-uniform, biases zero; LayerNorm weight 1, bias 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.config import PAD_ID, ModelConfig
from aiayn.decoding.cache import DecoderCache, LayerCache
from aiayn.fast import Dropout, LayerNorm, use_matmul_attention
from aiayn.training.packed import PackedMask, Sentences, packed_attention

# ---------------------------------------------------------------------------------------------------------
# Pure functions: the paper's equations.


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, is_causal: bool = False
) -> tuple[Tensor, Tensor]:
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V  (eq. 1), as two batched matmuls; returns the weights too.

    q (..., n, dk), k (..., m, dk), v (..., m, dv); mask broadcastable to (..., n, m), True = may attend;
    is_causal: the n queries are the last n of the m positions and see none after their own. The softmax runs in
    fp32 whatever the inputs' dtype. MultiHeadAttention runs this or torch's fused kernel (the same equation) as
    aiayn.fast.use_matmul_attention decides."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (..., n, m)
    if is_causal:
        mask = causal_mask(scores.size(-1), q.device)[-scores.size(-2):]
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1, dtype=torch.float32).to(v.dtype)
    return weights @ v, weights


def sinusoidal_positions(n_positions: int, d_model: int, offset: int = 0) -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/D)), PE(pos, 2i+1) = cos(pos / 10000^(2i/D)), for pos in
    [offset, offset + n_positions). Returns (n_positions, D) in fp32, on the CPU (whatever the default device)."""
    pos = torch.arange(offset, offset + n_positions, dtype=torch.float64, device="cpu").unsqueeze(1)  # (n, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64, device="cpu")  # (D/2,)
    angle = pos / torch.pow(10000.0, two_i / d_model)  # (n, D/2)
    pe = torch.empty(n_positions, d_model, dtype=torch.float64, device="cpu")
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe.float()


def causal_mask(n: int, device: torch.device | None = None) -> Tensor:
    """(n, n) bool, True on and below the diagonal: position i may attend to positions <= i."""
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


# How MultiHeadAttention computes eq. 1: (q, k, v, mask, is_causal, decoding) -> (..., n, dv), `attention` below unless
# something else is installed (aiayn.viz: a recorder of the weights). decoding: a step of incremental decoding.
Attention = Callable[..., Tensor]


def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, is_causal: bool = False,
              decoding: bool = False) -> Tensor:
    """Eq. 1 by the kernel aiayn.fast.use_matmul_attention chooses for these inputs: `scaled_dot_product_attention`
    (two matmuls, fp32 softmax) or torch's fused F.scaled_dot_product_attention (the same equation)."""
    if use_matmul_attention(q, decoding):
        return scaled_dot_product_attention(q, k, v, mask, is_causal)[0]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)


# ---------------------------------------------------------------------------------------------------------
# Modules.


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).

    The h per-head projections of a role are one matrix (columns of head i at i*dk:(i+1)*dk). W^Q, W^K, W^V
    are kept separate: one fused (D, 3D) projection was no faster (docs/speed-design.md). `attention` computes eq. 1 for
    every head at once: `attention` below by default; aiayn.viz swaps in one that keeps the weights.
    """

    def __init__(self, d_model: int, n_heads: int, d_k: int, d_v: int, self_attention: bool):
        super().__init__()
        self.h, self.d_k, self.d_v = n_heads, d_k, d_v
        self.self_attention = self_attention  # keys/values from the queries' own sequence, or from the memory
        self.w_q = nn.Linear(d_model, n_heads * d_k)
        self.w_k = nn.Linear(d_model, n_heads * d_k)
        self.w_v = nn.Linear(d_model, n_heads * d_v)
        self.w_o = nn.Linear(n_heads * d_v, d_model)
        self.attention: Attention = attention

    def _split_heads(self, x: Tensor, width: int) -> Tensor:
        b, n, _ = x.shape
        return x.view(b, n, self.h, width).transpose(1, 2)  # (B, n, h*w) -> (B, h, n, w)

    def keys_values(self, source: Tensor) -> tuple[Tensor, Tensor]:
        """K W_i^K and V W_i^V of every head i: source (B, m, D) -> (B, h, m, dk), (B, h, m, dv)."""
        return self._split_heads(self.w_k(source), self.d_k), self._split_heads(self.w_v(source), self.d_v)

    def forward(self, x: Tensor, memory: Tensor | None = None, mask: Tensor | PackedMask | None = None,
                is_causal: bool = False, cache: LayerCache | None = None) -> Tensor:
        """x (B, n, D) gives the queries; keys/values come from x (self-attention) or memory (B, m, D) (cross).

        mask: bool, broadcastable to (B, h, n, m), True = may attend. is_causal: no query sees a later position.
        cache: decoding, a step at a time; it holds the earlier steps' keys/values (aiayn.decoding.cache).
        A PackedMask as mask: x (Nq, D) and memory (Nk, D) are packed sentences (aiayn.training.packed)."""
        source = x if self.self_attention else memory
        if isinstance(mask, PackedMask):
            q, k, v = self.w_q(x), self.w_k(source), self.w_v(source)  # (Nq, h*dk), (Nk, h*dk), (Nk, h*dv)
            return self.w_o(packed_attention(q, k, v, self.h, mask, is_causal, self.attention))  # (Nq, D)
        q = self._split_heads(self.w_q(x), self.d_k)  # Q W_i^Q of every head i: (B, h, n, dk)
        if cache is not None:
            heads = cache.attend(self, q, source, mask, is_causal)  # (B, h, n, dv)
        else:
            k, v = self.keys_values(source)  # (B, h, m, dk), (B, h, m, dv)
            heads = self.attention(q, k, v, mask, is_causal)  # head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)
        b, h, n, dv = heads.shape
        concat = heads.transpose(1, 2).reshape(b, n, h * dv)  # Concat(head_1..head_h): (B, h, n, dv) -> (B, n, h*dv)
        return self.w_o(concat)  # (B, n, D)


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2  (eq. 2), applied to each position separately.

    activation "swish" puts x * sigmoid(x) where eq. 2 has max(0, x): OPUS-MT's models (aiayn import)."""

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu"):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.activation = F.silu if activation == "swish" else F.relu

    def forward(self, x: Tensor) -> Tensor:
        return self.w_2(self.activation(self.w_1(x)))


class SublayerConnection(nn.Module):
    """Post-norm LayerNorm(x + Dropout(Sublayer(x))) as the paper; pre-norm x + Dropout(Sublayer(LN(x)))."""

    def __init__(self, d_model: int, dropout: float, norm_first: bool, eps: float):
        super().__init__()
        self.norm = LayerNorm(d_model, eps=eps)
        self.dropout = Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x: Tensor, sublayer) -> Tensor:
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


class EncoderLayer(nn.Module):
    """Self-attention, then feed-forward; each wrapped in a SublayerConnection."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.d_k, cfg.d_v, True)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.activation)
        self.sublayers = nn.ModuleList(
            SublayerConnection(cfg.d_model, cfg.dropout, cfg.norm_first, cfg.layer_norm_eps) for _ in range(2)
        )

    def forward(self, x: Tensor, src_mask: Tensor | PackedMask | None) -> Tensor:
        x = self.sublayers[0](x, lambda y: self.self_attn(y, mask=src_mask))
        return self.sublayers[1](x, self.ffn)


class DecoderLayer(nn.Module):
    """Masked self-attention, attention over the encoder output, feed-forward."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.d_k, cfg.d_v, True)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.d_k, cfg.d_v, False)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.activation)
        self.sublayers = nn.ModuleList(
            SublayerConnection(cfg.d_model, cfg.dropout, cfg.norm_first, cfg.layer_norm_eps) for _ in range(3)
        )

    def forward(self, x: Tensor, memory: Tensor, src_mask: Tensor | PackedMask | None, cache: LayerCache | None,
                tgt_mask: PackedMask | None = None) -> Tensor:
        x = self.sublayers[0](x, lambda y: self.self_attn(y, mask=tgt_mask, is_causal=True, cache=cache))
        x = self.sublayers[1](x, lambda y: self.cross_attn(y, memory, mask=src_mask, cache=cache))
        return self.sublayers[2](x, self.ffn)


class Encoder(nn.Module):
    """N identical EncoderLayers (a final LayerNorm only in the pre-norm variant)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_enc_layers))
        self.norm = LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps) if cfg.norm_first else nn.Identity()

    def forward(self, x: Tensor, src_mask: Tensor | PackedMask | None) -> Tensor:
        for layer in self.layers:
            x = layer(x, src_mask)
        return self.norm(x)


class Decoder(nn.Module):
    """N identical DecoderLayers; returns hidden states (B, T, D), not logits."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_dec_layers))
        self.norm = LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps) if cfg.norm_first else nn.Identity()

    def forward(self, x: Tensor, memory: Tensor, src_mask: Tensor | PackedMask | None, cache: DecoderCache | None,
                tgt_mask: PackedMask | None = None) -> Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x, memory, src_mask, cache.layers[i] if cache is not None else None, tgt_mask)
        return self.norm(x)


class Transformer(nn.Module):
    """Encoder-decoder with ONE embedding matrix shared by source, target and the pre-softmax projection."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embedding = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=PAD_ID)
        self.embed_scale = math.sqrt(cfg.d_model)
        if cfg.positional == "learned":
            self.positions = nn.Embedding(cfg.max_positions, cfg.d_model)
        else:
            self.register_buffer("sinusoids", sinusoidal_positions(cfg.max_positions, cfg.d_model), persistent=False)
        # A bias on the output projection (V,): none in the paper; Marian's final_logits_bias (aiayn import)
        self.output_bias = nn.Parameter(torch.zeros(cfg.vocab_size)) if cfg.output_bias else None
        self.dropout = Dropout(cfg.dropout)
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)
        self.reset_parameters()

    # -- initialization ---------------------------------------------------------------------------------
    def reset_parameters(self) -> None:
        cfg = self.cfg
        nn.init.normal_(self.embedding.weight, mean=0.0, std=cfg.d_model**-0.5)
        with torch.no_grad():
            self.embedding.weight[PAD_ID].zero_()
        if cfg.positional == "learned":
            nn.init.normal_(self.positions.weight, mean=0.0, std=cfg.d_model**-0.5)
        for module in self.modules():
            if cfg.init == "fairseq" and isinstance(module, MultiHeadAttention):
                for linear in (module.w_q, module.w_k, module.w_v):
                    linear.reset_parameters()  # torch's default bias U(+-1/sqrt(fan_in)), kept
                    nn.init.xavier_uniform_(linear.weight, gain=2**-0.5)
                nn.init.xavier_uniform_(module.w_o.weight)
                nn.init.zeros_(module.w_o.bias)
            elif cfg.init == "fairseq" and isinstance(module, FeedForward):
                for linear in module.children():
                    linear.reset_parameters()  # torch's default: U(+-1/sqrt(fan_in)) weights and biases
            elif isinstance(module, (MultiHeadAttention, FeedForward)):
                for linear in module.children():
                    nn.init.xavier_uniform_(linear.weight)
                    nn.init.zeros_(linear.bias)

    # -- embeddings ----------------------------------------------------------------------------------------
    def position_encoding(self, n: int, offset: int, device: torch.device) -> Tensor:
        """(n, D) encodings of positions offset .. offset+n-1 (sinusoids extend past max_positions)."""
        if self.cfg.positional == "learned":
            if offset + n > self.cfg.max_positions:
                raise ValueError(
                    f"position {offset + n - 1} exceeds the learned table (max_positions={self.cfg.max_positions}); "
                    "shorten the input or train with a larger max_positions"
                )
            return self.positions.weight[offset: offset + n]
        if offset + n > self.sinusoids.size(0):  # past the table: computed, in the table's dtype (bf16 decoding)
            return sinusoidal_positions(n, self.cfg.d_model, offset).to(device, self.sinusoids.dtype)
        return self.sinusoids[offset: offset + n]

    def embed(self, tokens: Tensor, offset: int = 0) -> Tensor:
        """Dropout(Embedding(tokens) * sqrt(D) + PE): (B, n) -> (B, n, D)."""
        x = self.embedding(tokens) * self.embed_scale
        x = x + self.position_encoding(tokens.size(1), offset, tokens.device)
        return self.dropout(x)

    def embed_packed(self, tokens: Tensor, sentences: Sentences) -> Tensor:
        """embed() of packed sentences, positions restarting at 0 in each: (N,) -> (N, D)."""
        x = self.embedding(tokens) * self.embed_scale
        x = x + self.position_encoding(sentences.max_len, 0, tokens.device)[sentences.positions]
        return self.dropout(x)

    def output_logits(self, hidden: Tensor) -> Tensor:
        """Pre-softmax linear transformation, tied to the embedding: (..., D) -> (..., V)."""
        return self.add_output_bias(F.linear(hidden, self.embedding.weight))

    def add_output_bias(self, logits: Tensor, ids: Tensor | None = None) -> Tensor:
        """logits (..., V) plus the output bias, where the config has one (of the pieces `ids` (V',) alone: logits
        (..., V')); logits unchanged otherwise."""
        if self.output_bias is None:
            return logits
        return logits + (self.output_bias if ids is None else self.output_bias.index_select(0, ids)).to(logits.dtype)

    # -- the three entry points ---------------------------------------------------------------------------
    @staticmethod
    def _key_mask(src_pad: Tensor | None) -> Tensor | None:
        return None if src_pad is None else (~src_pad)[:, None, None, :]  # (B, 1, 1, S), True = attend

    def encode(self, src: Tensor) -> Tensor:
        """src (B, S) padded with PAD_ID -> memory (B, S, D)."""
        src_pad = src.eq(PAD_ID)
        return self.encoder(self.embed(src), self._key_mask(src_pad))

    def decode_hidden(self, tgt_in: Tensor, memory: Tensor, src_pad: Tensor | None,
                      cache: DecoderCache | None = None) -> Tensor:
        """Decoder states (N, T, D). With a cache, tgt_in holds only the new positions.

        memory (B, S, D) and src_pad (B, S) are per source sentence; tgt_in may hold N = B * g rows, g per
        sentence, sentence-major (beam search's layout; see DecoderCache)."""
        offset = 0
        if cache is not None:
            if not cache.layers:
                cache.layers = [LayerCache() for _ in range(self.cfg.n_dec_layers)]
            offset = cache.length
        h = self.decoder(self.embed(tgt_in, offset), memory, self._key_mask(src_pad), cache)
        if cache is not None:
            cache.length += tgt_in.size(1)
        return h

    def decode(self, tgt_in: Tensor, memory: Tensor, src_pad: Tensor | None,
               cache: DecoderCache | None = None) -> Tensor:
        """tgt_in (B, T) (shifted right, starts with BOS) -> logits (B, T, V). Right-padded targets need no
        mask beyond the causal one: no real position can see a later pad."""
        return self.output_logits(self.decode_hidden(tgt_in, memory, src_pad, cache))

    def encode_packed(self, src: Tensor, src_sentences: Sentences) -> Tensor:
        """Packed source sentences src (Ns,), each ending with EOS -> memory (Ns, D); attention within each."""
        return self.encoder(self.embed_packed(src, src_sentences), PackedMask(src_sentences, src_sentences))

    def decode_hidden_packed(self, tgt_in: Tensor, memory: Tensor, tgt_sentences: Sentences,
                             src_sentences: Sentences) -> Tensor:
        """Teacher-forced decoder states (Nt, D) of packed targets tgt_in (Nt,) (each starting with BOS): target
        sentence i attends causally to itself and to source sentence i of memory (Ns, D)."""
        x = self.embed_packed(tgt_in, tgt_sentences)
        return self.decoder(x, memory, PackedMask(tgt_sentences, src_sentences), None,
                            PackedMask(tgt_sentences, tgt_sentences))

    def new_cache(self) -> DecoderCache:
        return DecoderCache()

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher-forced logits: src (B, S), tgt_in (B, T) -> (B, T, V)."""
        memory = self.encode(src)
        return self.decode(tgt_in, memory, src.eq(PAD_ID))


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters, each shared tensor counted once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def expected_parameters(cfg: ModelConfig) -> int:
    """Closed-form parameter count of `Transformer(cfg)` (weights + biases, shared embedding once)."""
    d, f, h = cfg.d_model, cfg.d_ff, cfg.n_heads
    hk, hv = h * cfg.d_k, h * cfg.d_v
    attention = d * (2 * hk + hv) + (2 * hk + hv) + hv * d + d  # W^Q, W^K, W^V, W^O with biases
    ffn = d * f + f + f * d + d
    norm = 2 * d
    enc = cfg.n_enc_layers * (attention + ffn + 2 * norm)
    dec = cfg.n_dec_layers * (2 * attention + ffn + 3 * norm)
    final_norms = 2 * norm if cfg.norm_first else 0
    positions = cfg.max_positions * d if cfg.positional == "learned" else 0
    output_bias = cfg.vocab_size if cfg.output_bias else 0
    return cfg.vocab_size * d + positions + enc + dec + final_norms + output_bias
