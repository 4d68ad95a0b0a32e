"""Decoding: greedy and beam search on the decoder's KV cache (section 6.1 of the paper).

The paper decodes with beam size 4, length penalty alpha = 0.6 (GNMT: lp(Y) = ((5 + |Y|) / 6)^alpha),
maximum output length = input length + 50, and stops early once no live hypothesis can still win.

Both searches run many sentences at once: the decoder batch holds `sentences x beams` rows (the encoder output and
the cross-attention keys/values stay one per sentence), and a sentence whose search is over leaves the batch, so a
step's cost follows the sentences still searched. One beam step is fairseq's: add the running log-probs to this
step's log-softmax, take the top 2*beam of beam*vocab candidates, finish the candidates among the top `beam` that end
in EOS, keep the best `beam` others alive. Those pieces (constrain, top_candidates, finish_scores, alive_candidates,
search_over) are also aiayn.decoding.static_search's fixed-shape step, and a LexicalHook (aiayn.decoding.glossary) plugs
into it.

Conventions (docs/decoding.md):
    * |Y| counts the EOS: a hypothesis of n words has |Y| = n + 1 (as fairseq).
    * score = (sum of the log-probs of its tokens, EOS included) / lp(|Y|).
    * max length: a sentence of x source tokens (EOS included, pad excluded) gets at most
      int(max_len_a * x + max_len_b) words; EOS is forced at that step. EOS is banned before min_len words.
    * PAD and BOS are never generated.
    * a target prefix (per sentence, words without EOS) is forced: at step t < len(prefix) only the prefix's t-th
      word is allowed, and its log-prob counts in the score like any other token's.
    * no_repeat_ngram_size n: a token that would complete an n-gram already in the hypothesis is banned.
    * a sentence's beam search is over when nothing alive can beat its nbest-th finished hypothesis (tensor2tensor's
      rule), or with beam_patience p > 0 once ceil(beam * p) have finished (CTranslate2's patience; fairseq at 1).
    * sampling draws each token from softmax(log-probs / T), cut to the top_k most probable tokens and then to the
      top_p nucleus; a Hypothesis still scores with the model's own log-probs (before T, top-k, top-p).

Notation: B sentences, k beams, N rows in the decoder batch (B*k, or B at the first step), V vocabulary,
t the step (= words generated so far by every live hypothesis).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from aiayn.config import BOS_ID, EOS_ID, PAD_ID, PAPER_SEARCH, SearchConfig
from aiayn.decoding.cache import sentence_moves, sentences_of
from aiayn.decoding.sampling import Sampler
from aiayn.errors import UsageError
from aiayn.fast import row_argmax, row_topk

NEG_INF = float("-inf")


class LexicalHook(Protocol):
    """What must appear in the output (aiayn.decoding.glossary.DynamicBeamAllocation), plugged into beam_search's step:
    `restrict` the (N, V) allowed mask before the step (sent: each active sentence's index, kk rows each), `alive`
    choose the k live candidates of each sentence (bsz, k), best first, from the step's top_candidates and
    alive_candidates' choice."""

    def restrict(self, allowed: Tensor | None, sent: Tensor, kk: int, tokens: Tensor, t: int, V: int
                 ) -> Tensor | None: ...

    def alive(self, lprobs: Tensor, scores: Tensor, cands: tuple[Tensor, Tensor, Tensor],
              alive: tuple[Tensor, Tensor, Tensor], sent: Tensor, kk: int, k: int) -> tuple[Tensor, Tensor, Tensor]: ...


# A constraint on what may come next (e.g. parsing's well-formed trees): given the original sentence index of each
# decoder row (N,) and the rows' prefixes (N, t+1) (BOS first), a bool (N, V) mask of the tokens allowed next.
Constraint = Callable[[Tensor, Tensor], Tensor]


@dataclass
class Hypothesis:
    """One finished translation: word ids (no BOS/EOS), its normalized score, and the log-prob of each
    token, EOS included (len(positional_scores) == len(tokens) + 1)."""

    tokens: list[int]
    score: float
    positional_scores: list[float] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------------------
# Pure functions.


def length_penalty(length: Tensor | float, alpha: float, kind: str = "gnmt") -> Tensor | float:
    """lp(|Y|): GNMT's ((5 + |Y|) / 6)^alpha (the paper's), or |Y|^alpha ("power", fairseq/HF)."""
    if kind == "gnmt":
        return ((5.0 + length) / 6.0) ** alpha
    if kind == "power":
        return length**alpha
    raise UsageError(f"length penalty kind must be 'gnmt' or 'power', not {kind!r}")


def max_output_lengths(src: Tensor, max_len_a: float, max_len_b: int, min_len: int = 0,
                       max_len: int | None = None) -> Tensor:
    """Per-sentence word limit int(a * x + b) for x = source tokens (pad excluded), raised to min_len, then
    cut to max_len (a hard cap, e.g. the size of a learned position table). (B, S) -> (B,) long."""
    src_len = src.ne(PAD_ID).sum(1).double()
    limit = (max_len_a * src_len + max_len_b).floor().long().clamp(min=min_len)
    return limit if max_len is None else limit.clamp(max=max_len)


def constrain(lprobs: Tensor, t: int | Tensor, min_len: int, row_limit: Tensor, any_at_max: bool = True,
              allowed: Tensor | None = None) -> Tensor:
    """Ban PAD and BOS always, EOS before min_len words, and what a constraint does not allow (`allowed`, (N, V)
    bool); force EOS on rows at their word limit (which wins over everything else). In place. t: the step, an int, or
    a 0-d device tensor (the fixed-shape search, which never reads the device from the host). any_at_max: False
    when no row is at its limit (the work of forcing EOS skipped)."""
    if allowed is not None:
        lprobs.masked_fill_(~allowed, NEG_INF)
    eos = lprobs[:, EOS_ID].clone() if any_at_max else None
    lprobs[:, PAD_ID] = NEG_INF
    lprobs[:, BOS_ID] = NEG_INF
    if isinstance(t, Tensor):
        lprobs[:, EOS_ID] = lprobs[:, EOS_ID].masked_fill(t < min_len, NEG_INF)
    elif t < min_len:
        lprobs[:, EOS_ID] = NEG_INF
    if any_at_max:
        at_max = row_limit.le(t)  # (N,)
        lprobs.masked_fill_(at_max[:, None], NEG_INF)
        lprobs[:, EOS_ID] = torch.where(at_max, eos, lprobs[:, EOS_ID])
    return lprobs


def _step_logits(model, tokens: Tensor, memory: Tensor, src_pad: Tensor, cache, pieces: Tensor | None = None) -> Tensor:
    """Logits of the next token given the newest one: (N, t+1) -> (N, V), in the model's dtype; with a shortlist's
    `pieces` (V',), those pieces' alone, (N, V')."""
    decode = model.decode if pieces is None else model.decode_pieces
    return decode(tokens[:, -1:], memory, src_pad, cache=cache)[:, -1]


def shortlist_pieces(model) -> Tensor | None:
    """The pieces (V',) a shortlisted model (aiayn.decoding.shortlist.Shortlisted) gives logits for: the search ranks
    those columns alone, then maps them to piece ids (the specials keep theirs). None: no shortlist, or an ensemble."""
    return model.ids if hasattr(model, "decode_pieces") else None


def _columns(allowed: Tensor | None, pieces: Tensor | None) -> Tensor | None:
    """A (N, V) mask of what each row may take, cut to the shortlist's pieces' columns (N, V')."""
    return allowed if allowed is None or pieces is None else allowed.index_select(1, pieces)


def _log_probs(logits: Tensor) -> Tensor:
    return torch.log_softmax(logits.float(), dim=-1)  # fp32 (faster than log_softmax(dtype=) from bf16)


def top_candidates(lprobs: Tensor, scores: Tensor, bsz: int, n: int) -> tuple[Tensor, Tensor, Tensor]:
    """The n best (running score + log-prob) of each sentence over its rows' vocabularies: fairseq's step.

    lprobs (N, V) constrained log-probs with N = bsz * kk rows, sentence-major; scores (N,). Returns (bsz, n') scores,
    best first, and each candidate's beam (its row within the sentence, in [0, kk)) and token (n' = min(n, kk * V)).
    The same values as one top-n over a (bsz, kk * V) tensor of lprobs + score (among equal values the index chosen
    may differ, as torch.topk's), but cheaper: on a CPU, from the sentence's n best blocks of columns
    (`_block_candidates`); elsewhere, a row's score shifts all its candidates alike, so a sentence's best n lie among
    its rows' best n each, and those come from `row_topk`."""
    N, V = lprobs.shape
    block = _block_size(V, N // bsz, n) if lprobs.device.type == "cpu" else None
    if block is not None:
        return _block_candidates(lprobs, scores, bsz, n, block)
    row_scores, row_tokens = row_topk(lprobs, min(n, V))  # (N, n)
    row_scores.add_(scores[:, None])
    kk, per_row = N // bsz, row_scores.size(1)
    cand_scores, pos = row_scores.view(bsz, kk * per_row).topk(min(n, kk * V), dim=1)  # (bsz, n')
    return cand_scores, pos.div(per_row, rounding_mode="floor"), row_tokens.view(bsz, kk * per_row).gather(1, pos)


BLOCK_SIZES = (64, 128, 160, 80, 32)  # columns a block may have, the first that divides V taken (multiples of 16)


def _block_size(V: int, kk: int, n: int) -> int | None:
    """The block width `_block_candidates` splits V columns into (None: none of BLOCK_SIZES divides V, or a sentence
    holds fewer than n blocks)."""
    block = next((b for b in BLOCK_SIZES if V % b == 0), None)
    return block if block is not None and kk * (V // block) >= n else None


def _block_candidates(lprobs: Tensor, scores: Tensor, bsz: int, n: int, block: int) -> tuple[Tensor, Tensor, Tensor]:
    """top_candidates over blocks of `block` columns: a sentence's n best candidates lie in its n blocks of the best
    (row score + block maximum), so only those n blocks are ranked: one maximum per block, two small top-n, one
    gather, where a top-n per row (row_topk) reads each row twice and ranks N rows. Score + log-prob is the same fp32
    sum as fairseq's, so the values are exactly its."""
    N, V = lprobs.shape
    kk, nb = N // bsz, V // block
    blocks = lprobs.reshape(N * nb, block)  # (N * nb, block): block b of row r is r * nb + b
    best_of = blocks.amax(1).view(bsz, kk, nb).add_(scores.view(bsz, kk, 1))  # (bsz, kk, nb) the best each gives
    _, best = best_of.view(bsz, kk * nb).topk(n, dim=1)  # (bsz, n) blocks, numbered within the sentence
    beam = best.div(nb, rounding_mode="floor")  # (bsz, n) row of each block within its sentence
    first = torch.arange(0, N * nb, kk * nb, device=lprobs.device)[:, None]  # (bsz, 1) the sentence's first block
    cand = blocks.index_select(0, (best + first).view(-1)).view(bsz, n, block)
    cand.add_(scores.view(bsz, kk).gather(1, beam)[..., None])  # (bsz, n, block) score + log-prob
    cand_scores, pos = cand.view(bsz, n * block).topk(n, dim=1)  # (bsz, n)
    j = pos.div(block, rounding_mode="floor")  # which of the n blocks
    return cand_scores, beam.gather(1, j), (best - beam * nb).gather(1, j) * block + pos - j * block


def finish_scores(cand_scores: Tensor, finishing: Tensor, t: int | Tensor, search: SearchConfig) -> Tensor:
    """The normalized scores of candidates that end in EOS at step t (|Y| = t + 1), -inf where `finishing` is False:
    cand_scores / lp(t + 1). t: an int or a 0-d device tensor."""
    if isinstance(t, Tensor):
        lp = length_penalty((t + 1).double(), search.alpha, search.lp).float()
    else:
        lp = length_penalty(float(t + 1), search.alpha, search.lp)
    return (cand_scores / lp).masked_fill(~finishing, NEG_INF)


def alive_candidates(cand_scores: Tensor, cand_tokens: Tensor, cand_rows: Tensor, cand_eos: Tensor, k: int
                     ) -> tuple[Tensor, Tensor, Tensor]:
    """The best k candidates of each sentence that do not end in EOS (fairseq: rank + 2k * is_eos, k smallest):
    their scores, tokens and prefix rows, each (bsz, k)."""
    rank = torch.arange(cand_scores.size(1), device=cand_scores.device).expand_as(cand_scores)
    _, alive = (rank + cand_eos.long() * (2 * k)).topk(k, dim=1, largest=False)  # (bsz, k)
    return cand_scores.gather(1, alive), cand_tokens.gather(1, alive), cand_rows.gather(1, alive)


def search_over(nth_finished: Tensor, best_alive: Tensor, n_finished: Tensor, limit: Tensor, t: int | Tensor,
                search: SearchConfig) -> Tensor:
    """(bsz,) True for the sentences whose search is over at step t: nothing alive can beat the nbest-th finished
    hypothesis (a live one's log-prob can only fall, its lp is at most lp at the word limit), or with beam_patience,
    enough hypotheses have finished (search.finished_enough); or the word limit is reached. nth_finished: each
    sentence's nbest-th finished score (-inf: fewer finished); best_alive: its best live running score; n_finished:
    how many of its hypotheses have finished; limit: its word limit. t: an int or a 0-d device tensor."""
    if search.beam_patience:
        return n_finished.ge(search.finished_enough) | limit.le(t)
    lp_max = torch.maximum(length_penalty((limit + 1).float(), search.alpha, search.lp),
                           length_penalty(torch.zeros_like(limit).add_(t + 2).float(), search.alpha, search.lp))
    return nth_finished.ge(best_alive / lp_max) | limit.le(t)


def _prefix_table(prefixes: Sequence[Sequence[int]] | None, limit: Tensor, lines: Tensor) -> Tensor | None:
    """Per-sentence target prefixes as a (B, P) tensor, PAD after each prefix's end (None: no prefix at all). A prefix
    longer than its sentence's word limit, or holding PAD, BOS or EOS, is a UsageError naming the input line."""
    if not prefixes or not any(prefixes):
        return None
    table = torch.full((limit.size(0), max(map(len, prefixes))), PAD_ID, dtype=torch.long)
    for i, (words, most) in enumerate(zip(prefixes, limit.tolist())):
        line = int(lines[i]) + 1
        if len(words) > most:
            raise UsageError(f"input line {line}: its prefix has {len(words)} words, more than the {most} its "
                             "translation may have (--max-len-a, --max-len-b)")
        if any(w in (PAD_ID, BOS_ID, EOS_ID) for w in words):
            raise UsageError(f"input line {line}: a prefix holds words, not PAD, BOS or EOS")
        table[i, : len(words)] = torch.tensor(list(words), dtype=torch.long)
    return table.to(limit.device)


def repeated_ngram_bans(words: Tensor, n: int, V: int) -> Tensor | None:
    """The tokens that would complete an n-gram already in each row's words (fairseq's and OpenNMT's
    no_repeat_ngram_size): (N, t) -> (N, V) bool, or None while no n-gram can repeat yet (t < n)."""
    N, t = words.shape
    if n == 0 or t < n:
        return None
    grams = words.unfold(1, n, 1)  # (N, t-n+1, n): every n-gram so far
    seen = grams[:, :, :-1].eq(words[:, t - n + 1:][:, None, :]).all(-1)  # (N, t-n+1): starts as the last n-1 words
    return words.new_zeros(N, V, dtype=torch.float).scatter_add_(1, grams[:, :, -1], seen.float()).gt(0)


def _allowed(constraint: Constraint | None, sent: Tensor, tokens: Tensor, V: int, no_repeat: int,
             prefix: Tensor | None) -> Tensor | None:
    """What each row (of original sentence `sent`, prefix `tokens` (N, t+1)) may take next, as a (N, V) bool mask
    (None: everything): the constraint's tokens less the repeated n-grams' ones; within a target prefix only the
    prefix's next word (forced, whatever the constraint or the n-gram ban say)."""
    allowed = constraint(sent, tokens) if constraint is not None else None
    banned = repeated_ngram_bans(tokens[:, 1:], no_repeat, V)
    if banned is not None:
        allowed = ~banned if allowed is None else allowed & ~banned
    t = tokens.size(1) - 1
    if prefix is not None and t < prefix.size(1):
        forced = prefix[sent, t]  # (N,) PAD where a row's prefix is over
        if bool(forced.ne(PAD_ID).any()):
            only = F.one_hot(forced, V).bool()  # (N, V)
            rest = torch.ones_like(only) if allowed is None else allowed
            allowed = torch.where(forced.ne(PAD_ID)[:, None], only, rest)
    return allowed


def going_on(done: Tensor) -> Tensor:
    """The batch's rows not `done` (N,), in their new order: each that ends leaves its place to the last going on, so
    the cache moves those rows alone (closing the gaps would move every row after the first to end). Not all done."""
    m = int((~done).sum())
    keep = torch.arange(m, device=done.device)
    keep[done[:m].nonzero().squeeze(1)] = (~done[m:]).nonzero().squeeze(1) + m
    return keep


def _argmax(lprobs: Tensor, sent: Tensor, sample: Tensor) -> Tensor:
    return row_argmax(lprobs)


# ---------------------------------------------------------------------------------------------------------
# Greedy search and sampling: one row per hypothesis, each row choosing its own next token.


@torch.no_grad()
def greedy_search(model, src: Tensor, search: SearchConfig = SearchConfig(beam=1), max_len: int | None = None,
                  constraint: Constraint | None = None, prefixes: Sequence[Sequence[int]] | None = None,
                  lines: Tensor | None = None) -> list[list[Hypothesis]]:
    """Take the most probable token at every step. src (B, S) padded with PAD_ID -> per sentence a
    one-element list of Hypothesis (search.alpha/lp only set how its score is normalized; beam is ignored).
    max_len: a hard cap on words (e.g. a learned position table's size). prefixes: per sentence, the words its
    output starts with. lines: each sentence's input line (from 0), named in errors (default 0..B-1). search.scores
    False: each step's argmax of the logits, no log-softmax (the same words; score NaN, no positional_scores)."""
    return _row_search(model, src, search, max_len, constraint, prefixes, lines, 1, _argmax)


@torch.no_grad()
def sample_search(model, src: Tensor, search: SearchConfig, max_len: int | None = None,
                  constraint: Constraint | None = None, prefixes: Sequence[Sequence[int]] | None = None,
                  lines: Tensor | None = None) -> list[list[Hypothesis]]:
    """search.nbest samples per sentence, each drawn token by token (sample_from: temperature, top_k, top_p; a
    temperature of 0 takes the argmax, as greedy search), best score first. Sentence i draws from
    sentence_generator(search.seed, lines[i]), so a line's samples do not depend on its batch. Otherwise as
    greedy_search."""
    lines = torch.arange(src.size(0)) if lines is None else lines
    pick = _argmax if search.temperature == 0 else Sampler(search, lines, search.nbest)
    return _row_search(model, src, search, max_len, constraint, prefixes, lines, search.nbest, pick)


def _row_search(model, src: Tensor, search: SearchConfig, max_len: int | None, constraint: Constraint | None,
                prefixes: Sequence[Sequence[int]] | None, lines: Tensor | None, n: int,
                pick: Callable[[Tensor, Tensor, Tensor], Tensor]) -> list[list[Hypothesis]]:
    """n rows per sentence, each a hypothesis of its own that takes pick(lprobs (N, V), sent (N,), sample (N,)) as
    its next token (sample: which of its sentence's n rows it is); a row leaves the batch when it ends."""
    min_len, alpha, lp_kind = search.min_len, search.alpha, search.lp
    B, dev = src.size(0), src.device
    src_pad = src.eq(PAD_ID)  # (B, S)
    memory = model.encode(src)  # (B, S, D)
    limit = max_output_lengths(src, search.max_len_a, search.max_len_b, min_len, max_len)  # (B,)
    prefix = _prefix_table(prefixes, limit, torch.arange(B) if lines is None else lines)  # (B, P) or None
    cache = model.new_cache()
    if n > 1:  # every row its own sentence to the decoder
        memory, src_pad = memory.repeat_interleave(n, 0), src_pad.repeat_interleave(n, 0)

    sent = torch.arange(B, device=dev).repeat_interleave(n)  # original sentence of each row
    sample = torch.arange(n, device=dev).repeat(B)  # which of its sentence's rows
    tokens = torch.full((B * n, 1), BOS_ID, dtype=torch.long, device=dev)  # (N, t+1)
    logps = torch.zeros(B * n, 0, device=dev)  # (N, t) log-prob of each chosen token
    out: list[list[Hypothesis]] = [[] for _ in range(B)]
    pieces = shortlist_pieces(model)
    scored = search.scores or pick is not _argmax  # else the logits ranked as they are: the same argmax
    for t in range(int(limit.max()) + 1):
        row_limit = limit[sent]
        lprobs = (_log_probs if scored else Tensor.float)(_step_logits(model, tokens, memory, src_pad, cache, pieces))
        V = lprobs.size(1) if pieces is None else model.cfg.vocab_size
        allowed = _columns(_allowed(constraint, sent, tokens, V, search.no_repeat_ngram_size, prefix), pieces)
        constrain(lprobs, t, min_len, row_limit, t >= int(row_limit.min()), allowed)
        nxt = pick(lprobs, sent, sample)  # (N,)
        logps = torch.cat([logps, lprobs.gather(1, nxt[:, None])], dim=1) if scored else logps  # (N, t+1) or (N, 0)
        nxt = nxt if pieces is None else pieces[nxt]
        tokens = torch.cat([tokens, nxt[:, None]], dim=1)

        done = nxt.eq(EOS_ID) | row_limit.le(t)  # (N,)
        if done.any():
            rows = done.nonzero().squeeze(1)
            lp = length_penalty(float(t + 1), alpha, lp_kind)
            for i, words, pos in zip(sent[rows].tolist(), tokens[rows, 1:-1].tolist(), logps[rows].tolist()):
                out[i].append(Hypothesis(words, sum(pos) / lp if scored else float("nan"), pos))
            if bool(done.all()):
                break
            keep = going_on(done)
            cache.reorder(keep, moves := sentence_moves(keep))  # one row per sentence
            sent, sample, tokens, logps = sent[keep], sample[keep], tokens[keep], logps[keep]
            memory, src_pad = sentences_of(memory, moves), sentences_of(src_pad, moves)
    return [sorted(hyps, key=lambda h: -h.score) for hyps in out]


def search_function(search: SearchConfig) -> Callable[..., list[list[Hypothesis]]]:
    """The search `search` asks for: sample_search (sampling), greedy_search (beam 1) or beam_search."""
    return sample_search if search.sampling else greedy_search if search.beam == 1 else beam_search


# ---------------------------------------------------------------------------------------------------------
# Beam search.


@torch.no_grad()
def beam_search(model, src: Tensor, search: SearchConfig = PAPER_SEARCH, max_len: int | None = None,
                constraint: Constraint | None = None, prefixes: Sequence[Sequence[int]] | None = None,
                lines: Tensor | None = None, lexical: LexicalHook | None = None) -> list[list[Hypothesis]]:
    """Beam search. src (B, S) padded with PAD_ID -> per sentence up to `search.nbest` Hypothesis, best first.
    prefixes, lines: as greedy_search's. lexical: terms the output must hold (aiayn.decoding.glossary).

    A sentence stops when its nbest-th finished score is at least the best score any live hypothesis could still
    reach (its log-prob can only fall, its lp is at most lp at the word limit), or at its word limit. max_len: a hard
    cap on words (e.g. a learned position table's size)."""
    nbest, min_len = search.nbest, search.min_len
    B, dev, k = src.size(0), src.device, search.beam
    src_pad = src.eq(PAD_ID)  # (B, S)
    memory = model.encode(src)  # (B, S, D)
    limit = max_output_lengths(src, search.max_len_a, search.max_len_b, min_len, max_len)  # (B,)
    W = int(limit.max()) + 1  # longest finished hypothesis, EOS included
    prefix = _prefix_table(prefixes, limit, torch.arange(B) if lines is None else lines)  # (B, P) or None
    cache = model.new_cache()

    finished = _Finished(B, nbest, W, dev)
    pieces = shortlist_pieces(model) if lexical is None else None  # a shortlist: its columns alone are ranked

    # Live state. The first step runs one row per sentence (all beams would be identical), then k.
    sent = torch.arange(B, device=dev)  # (bsz,) original index of each active sentence
    kk = 1  # live beams per sentence in the current batch
    tokens = torch.full((B, 1), BOS_ID, dtype=torch.long, device=dev)  # (N, t+1), N = bsz*kk
    logps = torch.zeros(B, 0, device=dev)  # (N, t) log-prob of each token
    scores = torch.zeros(B, device=dev)  # (N,) running sum of log-probs
    for t in range(W):
        bsz = sent.numel()
        row_limit = limit[sent].repeat_interleave(kk)  # (N,)
        logits = _step_logits(model, tokens, memory, src_pad, cache, pieces)  # (N, V) or (N, V')
        V = logits.size(1) if pieces is None else model.cfg.vocab_size
        allowed = _allowed(constraint, sent.repeat_interleave(kk), tokens, V, search.no_repeat_ngram_size, prefix)
        if lexical is not None:
            allowed = lexical.restrict(allowed, sent, kk, tokens, t, V)
        allowed = _columns(allowed, pieces)

        # fairseq's step: top 2k of (running score + next log-prob) over kk*V.
        lprobs = constrain(_log_probs(logits), t, min_len, row_limit, t >= int(row_limit.min()), allowed)
        cand_scores, cand_beams, cand_tokens = top_candidates(lprobs, scores, bsz, 2 * k)  # (bsz, 2k)
        cand_tokens = cand_tokens if pieces is None else pieces[cand_tokens]  # columns -> piece ids
        cand_rows = cand_beams + (torch.arange(bsz, device=dev) * kk)[:, None]  # rows of the prefixes
        cand_eos = cand_tokens.eq(EOS_ID) & cand_scores.gt(NEG_INF)  # (bsz, 2k)

        # Finish the EOS candidates among the top k (as fairseq: so beam 1 is greedy), keeping the nbest
        # best finished hypotheses of each sentence.
        finished.add_candidates(sent, cand_scores[:, :k], cand_eos[:, :k], cand_rows[:, :k], t, search, tokens,
                                logps, scores)

        alive = alive_candidates(cand_scores, cand_tokens, cand_rows, cand_eos, k)  # the best k, best first
        if lexical is not None:
            alive = lexical.alive(lprobs, scores, (cand_scores, cand_tokens, cand_rows), alive, sent, kk, k)
        alive_scores, alive_tokens, alive_rows = alive
        alive_logps = alive_scores - scores[alive_rows]  # log-prob of the newest token

        nth_finished, n_finished = finished.scores[sent, nbest - 1], finished.count[sent]
        done = search_over(nth_finished, alive_scores[:, 0], n_finished, limit[sent], t, search)  # (bsz,)
        if bool(done.all()):
            break
        moves = None
        if done.any():  # drop finished sentences from the batch
            keep = going_on(done)
            alive_scores, alive_tokens, alive_rows = alive_scores[keep], alive_tokens[keep], alive_rows[keep]
            alive_logps, sent = alive_logps[keep], sent[keep]
            moves = sentence_moves(keep)  # what moves, found once for every tensor moved
            memory, src_pad = sentences_of(memory, moves), sentences_of(src_pad, moves)

        # The decoder runs k rows per sentence, sentence-major; memory, mask and the cross-attention cache stay
        # one per sentence (DecoderCache), so only the self-attention cache follows the beams.
        index = alive_rows.reshape(-1)  # (bsz' * k,) row of each new hypothesis's prefix
        cache.reorder(index, moves)
        tokens = torch.cat([tokens.index_select(0, index), alive_tokens.reshape(-1, 1)], dim=1)
        scores = alive_scores.reshape(-1)
        logps = torch.cat([logps.index_select(0, index), alive_logps.reshape(-1, 1)], dim=1)
        kk = k

    return finished.hypotheses()


class _Finished:
    """The nbest best finished hypotheses of each sentence, indexed by original sentence: scores (B, nbest), words
    with their EOS (B, nbest, W), the log-prob of each (B, nbest, W) and |Y| (B, nbest), EOS included; and how many
    hypotheses each has finished in all (B,)."""

    def __init__(self, n_sentences: int, nbest: int, width: int, device: torch.device):
        self.nbest, self.width = nbest, width
        self.scores = torch.full((n_sentences, nbest), NEG_INF, device=device)
        self.tokens = torch.full((n_sentences, nbest, width), PAD_ID, dtype=torch.long, device=device)
        self.logps = torch.zeros(n_sentences, nbest, width, device=device)
        self.length = torch.zeros(n_sentences, nbest, dtype=torch.long, device=device)
        self.count = torch.zeros(n_sentences, dtype=torch.long, device=device)  # hypotheses finished, kept or not

    def add_candidates(self, sent: Tensor, cand_scores: Tensor, finishing: Tensor, cand_rows: Tensor, t: int,
                       search: SearchConfig, tokens: Tensor, logps: Tensor, scores: Tensor) -> None:
        """Finish the candidates that end in EOS (`finishing`, (bsz, k)) among a step's best k: their running scores
        (bsz, k), prefix rows (bsz, k); the live rows' words (N, t+1), log-probs (N, t) and running scores (N,)."""
        if not finishing.any():
            return
        s_idx = finishing.any(1).nonzero().squeeze(1)  # active sentences finishing something
        rows, c_scores = cand_rows[s_idx], cand_scores[s_idx]  # (b, k) prefix rows and their scores
        new_scores = finish_scores(c_scores, finishing[s_idx], t, search)  # (b, k)
        new_logps = torch.cat([logps[rows], (c_scores - scores[rows])[..., None]], -1)  # (b, k, t+1)
        self.add(sent[s_idx], new_scores, tokens[rows, 1:], new_logps)

    def add(self, orig: Tensor, scores: Tensor, words: Tensor, logps: Tensor) -> None:
        """Offer new hypotheses of sentences `orig` (b,): normalized scores (b, k) (-inf: not finished), their words
        without BOS (b, k, t) and the log-probs of words and EOS (b, k, t+1); keep each sentence's nbest best."""
        t = words.size(-1)
        eos = words.new_full((*words.shape[:-1], 1), EOS_ID)
        new_tokens = F.pad(torch.cat([words, eos], -1), (0, self.width - t - 1), value=PAD_ID)  # (b, k, W)
        new_logps = F.pad(logps, (0, self.width - t - 1))
        best_scores, best = torch.cat([self.scores[orig], scores], 1).topk(self.nbest, dim=1)  # (b, nbest)
        best_w = best[..., None].expand(-1, -1, self.width)
        self.scores[orig] = best_scores
        self.tokens[orig] = torch.cat([self.tokens[orig], new_tokens], 1).gather(1, best_w)
        self.logps[orig] = torch.cat([self.logps[orig], new_logps], 1).gather(1, best_w)
        self.length[orig] = F.pad(self.length[orig], (0, scores.size(1)), value=t + 1).gather(1, best)
        self.count[orig] += scores.gt(NEG_INF).sum(1)

    def hypotheses(self) -> list[list[Hypothesis]]:
        """Per sentence a list of Hypothesis, best first, -inf slots left out."""
        out: list[list[Hypothesis]] = []
        for scores, toks, lps, lens in zip(self.scores.tolist(), self.tokens.tolist(), self.logps.tolist(),
                                           self.length.tolist()):
            out.append([Hypothesis(w[: n - 1], s, lp[:n]) for s, w, lp, n in zip(scores, toks, lps, lens)
                        if s > NEG_INF])
        return out
