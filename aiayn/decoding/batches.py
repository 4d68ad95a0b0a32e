"""What every engine shares below the text: how long a source and a translation may be (`Limits`, the word cap
written once: `word_cap`), the length-sorted batches both engines cut (`length_sorted`) and how many sentences a batch
holds unless asked (`BATCH`, `default_batch_size`), and how many batches a CPU searches at once (`side_by_side`). No
torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aiayn.config import SearchConfig
from aiayn.errors import UsageError

BATCH = 64  # sentences a batch by default (CTranslate2: always; aiayn's engine: beam search)
ONE_ROW_BATCH = 128  # aiayn's engine where each sentence is one decoder row (greedy search, one sample)
PARALLEL_BATCHES = 2  # batches a CPU searches at once by default, at most its threads (docs/decoding.md)


def side_by_side(asked: int | None, threads: int, cpu: bool = True) -> int:
    """How many batches an engine of `threads` CPU threads searches at once when `asked` (None: PARALLEL_BATCHES);
    each gets threads // that many. cpu False (a GPU, aiayn's fixed-shape search): one. A UsageError for fewer than
    one, or for more than one where cpu is False (what `--parallel-batches` says for both engines)."""
    if asked is not None and asked < 1:
        raise UsageError(f"parallel batches must be at least 1, not {asked}")
    if not cpu:
        if (asked or 1) > 1:
            raise UsageError("--parallel-batches searches batches side by side on CPU threads; a GPU (and aiayn's "
                             "--search-impl fixed) decodes one batch at a time: leave it out")
        return 1
    return max(1, min(asked or PARALLEL_BATCHES, threads))


def default_batch_size(search: SearchConfig) -> int:
    """Sentences a batch of aiayn's engine when none is asked for: BATCH, or ONE_ROW_BATCH where the search runs one
    decoder row a sentence. A step costs a fixed ~1 ms of operator calls on a CPU however few its rows, which a greedy
    batch of 64 shares over 64 rows where beam 4 has 256 (docs/decoding.md has the measurement; CTranslate2's step
    costs little, and it is fastest at 64)."""
    rows = search.nbest if search.sampling else search.beam
    return ONE_ROW_BATCH if rows == 1 else BATCH


@dataclass(frozen=True)
class Limits:
    """What an engine takes and gives: `input_tokens`, the most source tokens (subword tokens + EOS; longer inputs
    are cut, with a warning); `words`, the most words any translation may have whatever the search asks (a
    position table's rows less BOS), or None where positions are computed on demand (sinusoids in aiayn)."""

    input_tokens: int
    words: int | None

    def word_limit(self, search: SearchConfig, tokens: int) -> int:
        """The most words a translation of a source of `tokens` tokens (EOS included) may have under `search`."""
        return search.word_limit(tokens, self.words)


def word_cap(positions: int | None) -> int | None:
    """The most words a translation may have when the decoder's positions come from a table of `positions` rows
    (None: no table): BOS and the words each take a row, so words < rows."""
    return None if positions is None else positions - 1


def length_sorted(sources: Sequence[Sequence[int] | None], batch_size: int, longest_first: bool) -> list[list[int]]:
    """Source indices in batches of `batch_size`, sorted by source length (less padding; ties in input order),
    the longest first or last; None (a blank line) left out. aiayn's engine takes the longest first (the batch that
    needs most memory runs first), CTranslate2's the shortest (with limit_batches' limits)."""
    order = sorted((i for i, s in enumerate(sources) if s is not None), key=lambda i: len(sources[i]),
                   reverse=longest_first)
    return [order[start: start + batch_size] for start in range(0, len(order), batch_size)]


def own_limits(sources: Sequence[Sequence[int] | None], search: SearchConfig, cap: int | None) -> dict[int, int]:
    """{source index: its word limit int(a * x + b)} (x = tokens with EOS, raised to min_len, capped at `cap`), the
    blank (None) sources left out: aiayn.decoding.search.max_output_lengths, in plain Python."""
    return {i: search.word_limit(len(source), cap) for i, source in enumerate(sources) if source is not None}


def limit_batches(sources: Sequence[Sequence[int] | None], search: SearchConfig, cap: int | None,
                  batch_size: int) -> list[tuple[int, list[int]]]:
    """(word limit, source indices) batches for an engine that takes one limit per call (CTranslate2): the
    length-sorted batches, shortest first, each batch's limit the largest of its sentences' own (`own_limits`),
    which a caller checks its outputs against."""
    limits = own_limits(sources, search, cap)
    return [(max(limits[i] for i in idx), idx) for idx in length_sorted(sources, batch_size, longest_first=False)]
