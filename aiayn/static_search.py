"""Greedy and beam search with a step of fixed shapes, so that on a GPU one step can be captured as a CUDA graph and
replayed: the same searches as aiayn.search (same Hypothesis lists, same conventions), organized differently.

aiayn.search drops finished sentences from the batch and grows the self-attention cache, so every step has new
shapes and Python drives each kernel. Here nothing changes shape from step to step:
    * the self-attention keys/values of each decoder layer live in a preallocated (N, h, L, d) buffer; step t writes
      position t in place (index_copy_ with t a device tensor) and attends over all L positions, those after t masked;
    * cross-attention keys/values are computed once per batch into buffers, source padding masked;
    * the batch keeps all its sentences and beams (N = B * k rows): a finished sentence's rows get score -inf, so
      they can neither finish nor win anything again, and a greedy row that has finished writes PAD;
    * the step number t is a device tensor the step itself advances, so the same step runs again unchanged.
The host reads one flag (are all sentences done?) every SYNC_EVERY steps.

Capture (CUDA only, `StaticDecoder(graphs=True)`): the first batch of a shape (rows, source length rounded up to
SRC_BUCKET, beam, search options) loads its inputs into the static buffers, runs the step a few times on a side
stream (torch's rule: warm-up before capture, so that lazy initialization and allocator growth happen outside the
graph), records one step with torch.cuda.graph, then loads the inputs again (the warm-up moved the state on). A
search then replays the graph once per step. Later batches of the same shape copy their inputs into the same
buffers and replay the same graph. Everything the step reads is a buffer of the state it was captured with; nothing
in it reads the host, so replaying it is one launch per step instead of hundreds.

Notation as aiayn.search: B sentences, k beams, N = B * k rows, V vocabulary, t the step, W = L the most positions
(words + EOS), S the (padded) source length.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from aiayn.config import BOS_ID, EOS_ID, PAD_ID
from aiayn.errors import UsageError
from aiayn.fast import row_topk
from aiayn.search import NEG_INF, Hypothesis, SearchConfig, length_penalty, max_output_lengths

SYNC_EVERY = 8  # steps between the host's checks that every sentence is done
SRC_BUCKET = 16  # on CUDA source lengths are rounded up to a multiple of this, so few graphs are captured


@dataclass
class _State:
    """Every tensor a step reads or writes; shapes fixed for the state's life."""

    t: Tensor  # () long: the step
    limit: Tensor  # (B,) word limit of each sentence
    row_limit: Tensor  # (N,)
    src_mask: Tensor  # (B, 1, 1, S) bool, True = may attend
    cross_k: list[Tensor]  # per layer (B, h, S, dk)
    cross_v: list[Tensor]  # per layer (B, h, S, dv)
    self_k: list[Tensor]  # per layer (N, h, L, dk)
    self_v: list[Tensor]  # per layer (N, h, L, dv)
    tokens: Tensor  # (N, W + 1): BOS, then the words chosen so far, PAD after
    logps: Tensor  # (N, W): log-prob of each chosen token, 0 after
    scores: Tensor  # (N,) running sum of log-probs (beam); -inf: a dead row
    done: Tensor  # (B,) bool
    length: Tensor  # greedy: (B,) |Y| once done. beam: (B, nbest) |Y| of each finished hypothesis
    fin_scores: Tensor | None = None  # beam: (B, nbest) normalized scores of the finished, best first
    fin_tokens: Tensor | None = None  # beam: (B, nbest, W) words and EOS, PAD after
    fin_logps: Tensor | None = None  # beam: (B, nbest, W)
    graph: object = None  # the captured step (CUDA)


class StaticDecoder:
    """Greedy (search.beam == 1) and beam search of `model` with fixed-shape steps: `search(src, config)` returns
    what aiayn.search.greedy_search / beam_search return. max_len: the most words an output may have (the buffers'
    size; a batch whose word limit exceeds it is refused). graphs: capture each step shape as a CUDA graph (default:
    on CUDA); otherwise every step runs eagerly."""

    def __init__(self, model, max_len: int, graphs: bool | None = None):
        self.model, self.max_len = model, max_len
        self.W = max_len + 1  # positions: up to max_len words, then EOS
        self.device = next(model.parameters()).device
        self.graphs = self.device.type == "cuda" if graphs is None else graphs
        if self.graphs and self.device.type != "cuda":
            raise UsageError("CUDA graphs need a CUDA model")
        self.states: dict[tuple, _State] = {}
        with torch.no_grad():
            self.positions = model.position_encoding(self.W, 0, self.device)  # (W, D)

    @torch.inference_mode()
    def search(self, src: Tensor, search: SearchConfig, max_len: int | None = None,
               constraint=None, prefixes=None, lines=None) -> list[list[Hypothesis]]:
        """src (B, S) padded with PAD_ID -> per sentence its Hypothesis list (as aiayn.search). max_len: a hard cap
        on words, as aiayn.search's. Constraints, target prefixes, sampling and n-gram blocking are refused."""
        unsupported = [name for name, used in (("constrained search", constraint is not None),
                                               ("target prefixes", bool(prefixes) and any(prefixes)),
                                               ("sampling", search.sampling),
                                               ("no_repeat_ngram_size", search.no_repeat_ngram_size > 0)) if used]
        if unsupported:
            raise UsageError(f"{', '.join(unsupported)}: not supported by the static (fixed-shape) decoder; decode "
                             "with aiayn.search")
        limit = max_output_lengths(src, search.max_len_a, search.max_len_b, search.min_len, max_len)  # (B,)
        W = int(limit.max()) + 1
        if W > self.W:
            raise UsageError(f"a sentence may have {W - 1} words, more than this decoder's max_len {self.max_len}")
        if self.graphs:  # pad the source to a bucket: fewer shapes, fewer graphs (pad keys are masked)
            S = -(-src.size(1) // SRC_BUCKET) * SRC_BUCKET
            src = F.pad(src, (0, S - src.size(1)), value=PAD_ID)
        greedy = search.beam == 1
        k = 1 if greedy else search.beam
        memory = self.model.encode(src)  # (B, S, D)
        key = (src.shape, k, search.nbest, search.min_len, search.alpha, search.lp)
        state = self.states.get(key)
        if state is None:
            state = self._new_state(src.size(0), k, search.nbest, memory)
            self.states[key] = state
        step = (lambda: self._greedy_step(state, search)) if greedy else (lambda: self._beam_step(state, search, k))
        self._load(state, src, memory, limit, k)
        if self.graphs and state.graph is None:
            state.graph = _capture(step)
            self._load(state, src, memory, limit, k)  # the warm-up moved the state on
        run = state.graph.replay if state.graph is not None else step
        for t in range(W):
            run()
            if (t + 1) % SYNC_EVERY == 0 and bool(state.done.all()):
                break
        return self._greedy_output(state, search) if greedy else self._beam_output(state)

    # -- state ---------------------------------------------------------------------------------------------------
    def _new_state(self, B: int, k: int, nbest: int, memory: Tensor) -> _State:
        dev, dt, W, N = memory.device, memory.dtype, self.W, B * k
        layers = self.model.decoder.layers
        h, dk, dv, S = layers[0].self_attn.h, layers[0].self_attn.d_k, layers[0].self_attn.d_v, memory.size(1)

        def buf(*shape):
            return [torch.zeros(shape, dtype=dt, device=dev) for _ in layers]

        state = _State(
            t=torch.zeros((), dtype=torch.long, device=dev), limit=torch.zeros(B, dtype=torch.long, device=dev),
            row_limit=torch.zeros(N, dtype=torch.long, device=dev),
            src_mask=torch.zeros(B, 1, 1, S, dtype=torch.bool, device=dev),
            cross_k=buf(B, h, S, dk), cross_v=buf(B, h, S, dv), self_k=buf(N, h, W, dk), self_v=buf(N, h, W, dv),
            tokens=torch.zeros(N, W + 1, dtype=torch.long, device=dev), logps=torch.zeros(N, W, device=dev),
            scores=torch.zeros(N, device=dev), done=torch.zeros(B, dtype=torch.bool, device=dev),
            length=torch.zeros(B, dtype=torch.long, device=dev))
        if k > 1:
            state.length = torch.zeros(B, nbest, dtype=torch.long, device=dev)
            state.fin_scores = torch.zeros(B, nbest, device=dev)
            state.fin_tokens = torch.zeros(B, nbest, W, dtype=torch.long, device=dev)
            state.fin_logps = torch.zeros(B, nbest, W, device=dev)
        return state

    def _load(self, s: _State, src: Tensor, memory: Tensor, limit: Tensor, k: int) -> None:
        """A new batch into the state's buffers (in place: a captured graph reads these very tensors)."""
        s.t.zero_()
        s.limit.copy_(limit)
        s.row_limit.copy_(limit.repeat_interleave(k))
        s.src_mask.copy_(src.ne(PAD_ID)[:, None, None, :])
        for layer, ck, cv in zip(self.model.decoder.layers, s.cross_k, s.cross_v):
            attn = layer.cross_attn
            ck.copy_(_heads(attn.w_k(memory), attn.h))  # (B, h, S, dk)
            cv.copy_(_heads(attn.w_v(memory), attn.h))
        for buf in s.self_k + s.self_v:
            buf.zero_()
        s.tokens.fill_(PAD_ID)
        s.tokens[:, 0] = BOS_ID
        s.logps.zero_()
        s.scores.view(-1, k).fill_(NEG_INF)[:, 0] = 0.0  # step 0 grows from beam 0 alone
        s.done.zero_()
        s.length.zero_()
        if s.fin_scores is not None:
            s.fin_scores.fill_(NEG_INF)
            s.fin_tokens.fill_(PAD_ID)
            s.fin_logps.zero_()

    # -- one step: device tensors only -----------------------------------------------------------------------------
    def _log_probs(self, s: _State, min_len: int) -> Tensor:
        """The decoder on each row's newest token, log-softmaxed and constrained as aiayn.search: (N, V) fp32."""
        model, t = self.model, s.t
        last = s.tokens.index_select(1, t.view(1))  # (N, 1)
        x = model.embedding(last) * model.embed_scale + self.positions.index_select(0, t.view(1))  # (N, 1, D)
        x = model.dropout(x)
        seen = torch.arange(self.W, device=t.device).le(t)[None]  # (1, W): positions <= t
        for i, layer in enumerate(model.decoder.layers):  # the layer's own sublayers: post- or pre-norm alike
            self_attn = functools.partial(self._self_attention, layer.self_attn, s=s, i=i, seen=seen)
            cross_attn = functools.partial(_cross_attention, layer.cross_attn, k=s.cross_k[i], v=s.cross_v[i],
                                           src_mask=s.src_mask)
            x = layer.sublayers[0](x, self_attn)
            x = layer.sublayers[1](x, cross_attn)
            x = layer.sublayers[2](x, layer.ffn)
        logits = model.output_logits(model.decoder.norm(x))[:, -1]  # (N, V)
        lprobs = torch.log_softmax(logits.float(), dim=-1)
        eos = lprobs[:, EOS_ID].clone()
        lprobs[:, PAD_ID] = NEG_INF
        lprobs[:, BOS_ID] = NEG_INF
        lprobs[:, EOS_ID] = lprobs[:, EOS_ID].masked_fill(t < min_len, NEG_INF)
        at_max = s.row_limit.le(t)  # (N,): EOS forced
        lprobs.masked_fill_(at_max[:, None], NEG_INF)
        lprobs[:, EOS_ID] = torch.where(at_max, eos, lprobs[:, EOS_ID])
        return lprobs

    def _self_attention(self, attn, y: Tensor, s: _State, i: int, seen: Tensor) -> Tensor:
        N = y.size(0)
        q = _heads(attn.w_q(y), attn.h)  # (N, h, 1, dk)
        s.self_k[i].index_copy_(2, s.t.view(1), _heads(attn.w_k(y), attn.h))  # position t of (N, h, W, dk)
        s.self_v[i].index_copy_(2, s.t.view(1), _heads(attn.w_v(y), attn.h))
        out = F.scaled_dot_product_attention(q, s.self_k[i], s.self_v[i], attn_mask=seen)  # (N, h, 1, dv)
        return attn.w_o(out.transpose(1, 2).reshape(N, 1, -1))  # (N, 1, h*dv)

    def _greedy_step(self, s: _State, search: SearchConfig) -> None:
        t = s.t
        logp, nxt = (x.squeeze(1) for x in row_topk(self._log_probs(s, search.min_len), 1))  # (B,), (B,)
        was_done = s.done.clone()
        s.tokens.index_copy_(1, (t + 1).view(1), nxt.masked_fill(was_done, PAD_ID)[:, None])
        s.logps.index_copy_(1, t.view(1), logp.masked_fill(was_done, 0.0)[:, None])
        s.done.logical_or_(nxt.eq(EOS_ID) | s.limit.le(t))
        s.length.copy_(torch.where(s.done & ~was_done, t + 1, s.length))
        t.add_(1)

    def _beam_step(self, s: _State, search: SearchConfig, k: int) -> None:
        """fairseq's step, as aiayn.search.beam_search, on all B * k rows: a dead row's candidates are -inf."""
        t, (B, nbest), W = s.t, s.fin_scores.shape, self.W
        lprobs = self._log_probs(s, search.min_len)
        V, n = lprobs.size(1), 2 * k
        row_scores, row_tokens = row_topk(lprobs, min(n, V))  # (N, n)
        row_scores.add_(s.scores[:, None])
        per_row = row_scores.size(1)
        cand_scores, pos = row_scores.view(B, k * per_row).topk(min(n, k * V), dim=1)  # (B, 2k)
        cand_tokens = row_tokens.view(B, k * per_row).gather(1, pos)
        cand_rows = pos.div(per_row, rounding_mode="floor") + (torch.arange(B, device=t.device) * k)[:, None]
        cand_eos = cand_tokens.eq(EOS_ID) & cand_scores.gt(NEG_INF)  # (B, 2k)

        # Finish the EOS candidates among the top k, keeping each sentence's nbest best.
        rows, c_scores, fin_now = cand_rows[:, :k], cand_scores[:, :k], cand_eos[:, :k]  # (B, k)
        lp = length_penalty((t + 1).double(), search.alpha, search.lp).float()
        new_scores = (c_scores / lp).masked_fill(~fin_now, NEG_INF)  # (B, k)
        at_t = torch.arange(W, device=t.device).eq(t)  # (W,)
        words = torch.where(at_t, EOS_ID, s.tokens.index_select(0, rows.reshape(-1))[:, 1:].reshape(B, k, W))
        new_logps = torch.where(at_t, (c_scores - s.scores[rows])[..., None],
                                s.logps.index_select(0, rows.reshape(-1)).view(B, k, W))  # (B, k, W)
        best_scores, best = torch.cat([s.fin_scores, new_scores], 1).topk(nbest, dim=1)  # (B, nbest)
        best_w = best[..., None].expand(-1, -1, W)
        s.fin_tokens.copy_(torch.cat([s.fin_tokens, words], 1).gather(1, best_w))
        s.fin_logps.copy_(torch.cat([s.fin_logps, new_logps], 1).gather(1, best_w))
        s.length.copy_(torch.cat([s.length, (t + 1).expand(B, k)], 1).gather(1, best))
        s.fin_scores.copy_(best_scores)

        # The best k candidates not ending in EOS stay alive (fairseq: rank + 2k * is_eos, k smallest).
        rank = torch.arange(cand_scores.size(1), device=t.device).expand_as(cand_scores)
        _, alive = (rank + cand_eos.long() * n).topk(k, dim=1, largest=False)  # (B, k)
        alive_scores, alive_tokens = cand_scores.gather(1, alive), cand_tokens.gather(1, alive)
        alive_rows = cand_rows.gather(1, alive)
        alive_logps = alive_scores - s.scores[alive_rows]

        # Early termination: nothing alive can beat the nbest-th finished; a done sentence's rows die.
        lp_max = torch.maximum(length_penalty((s.limit + 1).float(), search.alpha, search.lp),
                               length_penalty((t + 2).float().expand(B), search.alpha, search.lp))
        s.done.logical_or_(s.fin_scores[:, nbest - 1].ge(alive_scores[:, 0] / lp_max) | s.limit.le(t))
        alive_scores = alive_scores.masked_fill(s.done[:, None], NEG_INF)

        index = alive_rows.reshape(-1)  # (N,) the row of each new hypothesis's prefix
        for buf in s.self_k + s.self_v:
            buf.copy_(buf.index_select(0, index))
        s.tokens.copy_(s.tokens.index_select(0, index))
        s.tokens.index_copy_(1, (t + 1).view(1), alive_tokens.view(-1, 1))
        s.logps.copy_(s.logps.index_select(0, index))
        s.logps.index_copy_(1, t.view(1), alive_logps.view(-1, 1))
        s.scores.copy_(alive_scores.view(-1))
        t.add_(1)

    # -- results ---------------------------------------------------------------------------------------------------
    @staticmethod
    def _greedy_output(s: _State, search: SearchConfig) -> list[list[Hypothesis]]:
        out = []
        for toks, lps, n in zip(s.tokens.tolist(), s.logps.tolist(), s.length.tolist()):
            pos = lps[:n]
            out.append([Hypothesis(toks[1:n], sum(pos) / length_penalty(float(n), search.alpha, search.lp), pos)])
        return out

    @staticmethod
    def _beam_output(s: _State) -> list[list[Hypothesis]]:
        out = []
        for scores, toks, lps, lens in zip(s.fin_scores.tolist(), s.fin_tokens.tolist(), s.fin_logps.tolist(),
                                           s.length.tolist()):
            out.append([Hypothesis(w[: n - 1], sc, lp[:n]) for sc, w, lp, n in zip(scores, toks, lps, lens)
                        if sc > NEG_INF])
        return out


def _heads(x: Tensor, h: int) -> Tensor:
    b, n, _ = x.shape
    return x.view(b, n, h, -1).transpose(1, 2)  # (B, n, h*w) -> (B, h, n, w)


def _cross_attention(attn, y: Tensor, k: Tensor, v: Tensor, src_mask: Tensor) -> Tensor:
    """The g = N / B rows of a sentence query its keys together: (N, 1, D) -> (B, h, g, dk) -> (N, 1, h*dv)."""
    B, N = k.size(0), y.size(0)
    q = attn.w_q(y).view(B, N // B, attn.h, -1).transpose(1, 2)  # (B, h, g, dk)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=src_mask)  # (B, h, g, dv)
    return attn.w_o(out.transpose(1, 2).reshape(N, 1, -1))  # (B, g, h, dv) -> (N, 1, h*dv)


def _capture(step) -> torch.cuda.CUDAGraph:
    """Run `step` a few times on a side stream (warm-up, as torch requires), then record one call as a CUDA graph."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph


def static_search(model, src: Tensor, search: SearchConfig, max_len: int | None = None,
                  constraint=None) -> list[list[Hypothesis]]:
    """One call of StaticDecoder sized for this batch: greedy (search.beam == 1) or beam search, as aiayn.search's
    greedy_search / beam_search (arguments alike). No graph is kept between calls: for that, keep a StaticDecoder."""
    limit = max_output_lengths(src, search.max_len_a, search.max_len_b, search.min_len, max_len)
    return StaticDecoder(model, int(limit.max()), graphs=False).search(src, search, max_len, constraint)
