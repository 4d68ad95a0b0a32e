"""Greedy and beam search with a step of fixed shapes, so that on a GPU one step can be captured as a CUDA graph and
replayed: the same searches as aiayn.decoding.search (same Hypothesis lists, same conventions), organized differently.

aiayn.decoding.search drops finished sentences from the batch and grows the self-attention cache, so every step has new
shapes and Python drives each kernel. Here nothing changes shape from step to step:
    * the self-attention keys/values of each decoder layer live in a preallocated (N, h, L, d) buffer; step t writes
      position t in place (index_copy_ with t a device tensor) and attends over all L positions, those after t masked;
      the model's own decoder layers and attention modules run the step (aiayn.decoding.cache.FixedLayerCache holds the
      buffers), so a swapped-in attention (aiayn.viz's recorder) runs here too;
    * cross-attention keys/values are computed once per batch into buffers, source padding masked;
    * the batch keeps all its sentences and beams (N = B * k rows): a finished sentence's rows get score -inf, so
      they can neither finish nor win anything again, and a greedy row that has finished writes PAD;
    * the step number t is a device tensor the step itself advances, so the same step runs again unchanged.
The host reads one flag (are all sentences done?) every SYNC_EVERY steps. The step's logic (candidates, finishing,
the alive set, early stopping, the length penalty) is aiayn.decoding.search's own functions, called on the fixed shapes.

Capture (CUDA only, `StaticDecoder(graphs=True)`): the first batch of a shape (rows, source length rounded up to
SRC_BUCKET, beam, search options) loads its inputs into the static buffers, runs the step a few times on a side
stream (torch's rule: warm-up before capture, so that lazy initialization and allocator growth happen outside the
graph), records one step with torch.cuda.graph, then loads the inputs again (the warm-up moved the state on). A
search then replays the graph once per step. Later batches of the same shape copy their inputs into the same
buffers and replay the same graph. Everything the step reads is a buffer of the state it was captured with; nothing
in it reads the host, so replaying it is one launch per step instead of hundreds.

Notation as aiayn.decoding.search: B sentences, k beams, N = B * k rows, V vocabulary, t the step, W = L the most
positions (words + EOS), S the (padded) source length.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from aiayn.config import BOS_ID, EOS_ID, PAD_ID
from aiayn.decoding.cache import FixedLayerCache
from aiayn.decoding.search import (
    NEG_INF,
    Hypothesis,
    SearchConfig,
    alive_candidates,
    constrain,
    finish_scores,
    length_penalty,
    max_output_lengths,
    search_over,
    top_candidates,
)
from aiayn.errors import UsageError
from aiayn.fast import row_topk

SYNC_EVERY = 8  # steps between the host's checks that every sentence is done
SRC_BUCKET = 16  # on CUDA source lengths are rounded up to a multiple of this, so few graphs are captured
LEN_BUCKET = 32  # on CUDA the positions a state holds are rounded up to a multiple of this
MAX_STATES = 16  # states (and graphs) kept, the least recently used dropped first


@dataclass
class _State:
    """Every tensor a step reads or writes; shapes fixed for the state's life."""

    W: int  # positions: up to W - 1 words, then EOS
    t: Tensor  # () long: the step
    limit: Tensor  # (B,) word limit of each sentence
    row_limit: Tensor  # (N,)
    src_mask: Tensor  # (B, 1, 1, S) bool, True = may attend
    layers: list[FixedLayerCache]  # per decoder layer: self-attention (N, h, W, d), cross-attention (B, h, S, d)
    tokens: Tensor  # (N, W + 1): BOS, then the words chosen so far, PAD after
    logps: Tensor  # (N, W): log-prob of each chosen token, 0 after
    scores: Tensor  # (N,) running sum of log-probs (beam); -inf: a dead row
    done: Tensor  # (B,) bool
    length: Tensor  # greedy: (B,) |Y| once done. beam: (B, nbest) |Y| of each finished hypothesis
    fin_scores: Tensor | None = None  # beam: (B, nbest) normalized scores of the finished, best first
    fin_tokens: Tensor | None = None  # beam: (B, nbest, W) words and EOS, PAD after
    fin_logps: Tensor | None = None  # beam: (B, nbest, W)
    fin_count: Tensor | None = None  # beam: (B,) hypotheses finished, kept or not
    graph: object = None  # the captured step (CUDA)


class StaticDecoder:
    """Greedy (search.beam == 1) and beam search of `model` with fixed-shape steps: `search(src, config)` returns
    what aiayn.decoding.search.greedy_search / beam_search return. max_len: the most words an output may have (a batch
    whose word limit exceeds it is refused). graphs: capture each step shape as a CUDA graph (default: on CUDA);
    otherwise every step runs eagerly. A state (buffers, and its graph) is kept per batch shape: rows, source length and
    positions, each rounded up to a bucket on CUDA (SRC_BUCKET, LEN_BUCKET), at most MAX_STATES of them."""

    def __init__(self, model, max_len: int, graphs: bool | None = None):
        self.model, self.max_len = model, max_len
        self.W = max_len + 1  # positions: up to max_len words, then EOS
        self.device = next(model.parameters()).device
        self.graphs = self.device.type == "cuda" if graphs is None else graphs
        if self.graphs and self.device.type != "cuda":
            raise UsageError("CUDA graphs need a CUDA model")
        self.states: OrderedDict[tuple, _State] = OrderedDict()
        with torch.no_grad():
            self.positions = model.position_encoding(self.W, 0, self.device)  # (W, D)

    @staticmethod
    def unsupported(search: SearchConfig, constraint=None, prefixes=None) -> list[str]:
        """What of this search the fixed-shape decoder does not do ([]: it does all of it)."""
        return [name for name, used in (("constrained search", constraint is not None),
                                        ("target prefixes", bool(prefixes) and any(prefixes)),
                                        ("sampling", search.sampling),
                                        ("no_repeat_ngram_size", search.no_repeat_ngram_size > 0)) if used]

    @torch.inference_mode()
    def search(self, src: Tensor, search: SearchConfig, max_len: int | None = None,
               constraint=None, prefixes=None, lines=None) -> list[list[Hypothesis]]:
        """src (B, S) padded with PAD_ID -> per sentence its Hypothesis list (as aiayn.decoding.search). max_len: a hard
        cap on words, as aiayn.decoding.search's. Constraints, target prefixes, sampling and n-gram blocking are
        refused."""
        unsupported = self.unsupported(search, constraint, prefixes)
        if unsupported:
            raise UsageError(f"{', '.join(unsupported)}: not supported by the static (fixed-shape) decoder; decode "
                             "with aiayn.decoding.search")
        limit = max_output_lengths(src, search.max_len_a, search.max_len_b, search.min_len, max_len)  # (B,)
        W = int(limit.max()) + 1
        if W > self.W:
            raise UsageError(f"a sentence may have {W - 1} words, more than this decoder's max_len {self.max_len}")
        if self.graphs:  # pad the source and the positions to buckets: fewer shapes, fewer graphs (pads are masked)
            S = -(-src.size(1) // SRC_BUCKET) * SRC_BUCKET
            src = F.pad(src, (0, S - src.size(1)), value=PAD_ID)
            W = min(-(-W // LEN_BUCKET) * LEN_BUCKET, self.W)
        greedy = search.beam == 1
        k = 1 if greedy else search.beam
        memory = self.model.encode(src)  # (B, S, D)
        key = (src.shape, W, k, search.nbest, search.min_len, search.alpha, search.lp, search.beam_patience)
        state = self.states.pop(key, None) or self._new_state(src.size(0), k, search.nbest, memory, W)
        self.states[key] = state  # the most recently used last
        while len(self.states) > MAX_STATES:
            self.states.popitem(last=False)
        step = (lambda: self._greedy_step(state, search)) if greedy else (lambda: self._beam_step(state, search, k))
        self._load(state, src, memory, limit, k)
        if self.graphs and state.graph is None:
            state.graph = _capture(step)
            self._load(state, src, memory, limit, k)  # the warm-up moved the state on
        run = state.graph.replay if state.graph is not None else step
        for t in range(int(limit.max()) + 1):
            run()
            if (t + 1) % SYNC_EVERY == 0 and bool(state.done.all()):
                break
        return self._greedy_output(state, search) if greedy else self._beam_output(state)

    # -- state ---------------------------------------------------------------------------------------------------
    def _new_state(self, B: int, k: int, nbest: int, memory: Tensor, W: int) -> _State:
        dev, dt, N, S = memory.device, memory.dtype, B * k, memory.size(1)
        t = torch.zeros((), dtype=torch.long, device=dev)
        layers = []
        for layer in self.model.decoder.layers:
            attn = layer.self_attn
            layers.append(FixedLayerCache(
                t, self_k=torch.zeros(N, attn.h, W, attn.d_k, dtype=dt, device=dev),
                self_v=torch.zeros(N, attn.h, W, attn.d_v, dtype=dt, device=dev),
                cross_k=torch.zeros(B, attn.h, S, attn.d_k, dtype=dt, device=dev),
                cross_v=torch.zeros(B, attn.h, S, attn.d_v, dtype=dt, device=dev)))
        state = _State(
            W=W, t=t, limit=torch.zeros(B, dtype=torch.long, device=dev),
            row_limit=torch.zeros(N, dtype=torch.long, device=dev),
            src_mask=torch.zeros(B, 1, 1, S, dtype=torch.bool, device=dev), layers=layers,
            tokens=torch.zeros(N, W + 1, dtype=torch.long, device=dev), logps=torch.zeros(N, W, device=dev),
            scores=torch.zeros(N, device=dev), done=torch.zeros(B, dtype=torch.bool, device=dev),
            length=torch.zeros(B, dtype=torch.long, device=dev))
        if k > 1:
            state.length = torch.zeros(B, nbest, dtype=torch.long, device=dev)
            state.fin_scores = torch.zeros(B, nbest, device=dev)
            state.fin_tokens = torch.zeros(B, nbest, W, dtype=torch.long, device=dev)
            state.fin_logps = torch.zeros(B, nbest, W, device=dev)
            state.fin_count = torch.zeros(B, dtype=torch.long, device=dev)
        return state

    def _load(self, s: _State, src: Tensor, memory: Tensor, limit: Tensor, k: int) -> None:
        """A new batch into the state's buffers (in place: a captured graph reads these very tensors)."""
        s.t.zero_()
        s.limit.copy_(limit)
        s.row_limit.copy_(limit.repeat_interleave(k))
        s.src_mask.copy_(src.ne(PAD_ID)[:, None, None, :])
        for layer, cache in zip(self.model.decoder.layers, s.layers):
            cache.load(layer.cross_attn, memory)
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
            s.fin_count.zero_()

    # -- one step: device tensors only -----------------------------------------------------------------------------
    def _log_probs(self, s: _State, min_len: int) -> Tensor:
        """The model's decoder on each row's newest token, log-softmaxed and constrained as aiayn.decoding.search: (N,
        V) fp32."""
        model, t = self.model, s.t
        last = s.tokens.index_select(1, t.view(1))  # (N, 1)
        x = model.embedding(last) * model.embed_scale + self.positions.index_select(0, t.view(1))  # (N, 1, D)
        hidden = model.decoder(model.dropout(x), None, s.src_mask, _Layers(s.layers))  # (N, 1, D)
        lprobs = torch.log_softmax(model.output_logits(hidden)[:, -1].float(), dim=-1)  # (N, V)
        return constrain(lprobs, t, min_len, s.row_limit)

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
        """aiayn.decoding.search.beam_search's step (its candidates, finishing, alive set and stopping rule), on all B *
        k rows: a dead row's candidates are -inf."""
        t, (B, nbest), W = s.t, s.fin_scores.shape, s.W
        cand_scores, cand_beams, cand_tokens = top_candidates(self._log_probs(s, search.min_len), s.scores, B, 2 * k)
        cand_rows = cand_beams + (torch.arange(B, device=t.device) * k)[:, None]  # (B, 2k)
        cand_eos = cand_tokens.eq(EOS_ID) & cand_scores.gt(NEG_INF)

        # Finish the EOS candidates among the top k, keeping each sentence's nbest best.
        rows, c_scores = cand_rows[:, :k], cand_scores[:, :k]  # (B, k)
        new_scores = finish_scores(c_scores, cand_eos[:, :k], t, search)  # (B, k)
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
        s.fin_count.add_(new_scores.gt(NEG_INF).sum(1))

        alive_scores, alive_tokens, alive_rows = alive_candidates(cand_scores, cand_tokens, cand_rows, cand_eos, k)
        alive_logps = alive_scores - s.scores[alive_rows]

        # Early termination; a done sentence's rows die.
        over = search_over(s.fin_scores[:, nbest - 1], alive_scores[:, 0], s.fin_count, s.limit, t, search)
        s.done.logical_or_(over)
        alive_scores = alive_scores.masked_fill(s.done[:, None], NEG_INF)

        index = alive_rows.reshape(-1)  # (N,) the row of each new hypothesis's prefix
        for cache in s.layers:
            cache.reorder(index)
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


class _Layers:
    """The per-layer caches as model.Decoder takes them (`cache.layers[i]`)."""

    def __init__(self, layers: list[FixedLayerCache]):
        self.layers = layers


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
    """One call of StaticDecoder sized for this batch: greedy (search.beam == 1) or beam search, as
    aiayn.decoding.search's greedy_search / beam_search (arguments alike). No graph is kept between calls: for that,
    keep a StaticDecoder."""
    limit = max_output_lengths(src, search.max_len_a, search.max_len_b, search.min_len, max_len)
    return StaticDecoder(model, int(limit.max()), graphs=False).search(src, search, max_len, constraint)
