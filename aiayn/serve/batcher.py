"""Dynamic batching: requests that arrive together are decoded together, by one model worker thread.

    request ─encode─> queue (bounded, in sentences) ─collect─> batch (<= max_batch_tokens) ─model thread─> futures
                          waiting <= max_wait_ms after the oldest job arrived or the last batch ended

Everything but the decoding runs on the event loop, so the queue needs no locks: `submit` encodes the texts and
appends a job, the collector task takes jobs oldest first while the batch stays within the token budget (padding
counted: rows x longest source, as fairseq's --max-tokens) and hands the batch to a one-thread executor; the loop
stays free to accept requests while the model runs, and those pile up into the next batch. Jobs in one batch share
one search: a job asking for more n-best rides with jobs asking for the same number (the n-best size changes
when beam search stops, see aiayn.decoding.search.beam_search), and others wait for the next batch. A job that asks
for word alignments (`submit(..., alignments=True)`: what carries numbers, glossary terms and tags through a
translation, aiayn.markup) shares the batch's search; its hypotheses alone are then aligned, on the model thread
(`word_alignments`), so the jobs that do not ask pay nothing.

A new model without downtime: `swap(translator)` (on the event loop) serves the new model from the next job on.
Each job keeps the translator that encoded it (vocabularies may differ), and a batch holds jobs of one translator
only, so every request is answered by exactly one model: jobs queued before the swap by the old one, later jobs by
the new one; the old model is freed when its last job is answered.

Decoding a sentence alone or among others gives the same translation (Translator sorts and pads; tests check
this), so a batched server answers exactly what offline `aiayn translate` does.

Overload and shutdown: a full queue raises QueueFull (HTTP 503 + Retry-After), a request of more sentences than
the whole queue holds TooLarge (413: it could never be admitted); a job not answered within
timeout_s raises RequestTimeout (504) and is dropped if it has not started; `close()` stops new jobs, finishes
every queued one, then stops the worker (the server's SIGTERM path).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

from aiayn.decoding.lines import Translation, aligned_lines, encode_prefixes
from aiayn.decoding.translator import Translator

T = TypeVar("T")


@dataclass(frozen=True)
class BatchConfig:
    """How requests are grouped and how much may wait."""

    max_batch_tokens: int = 2048  # source tokens per decoding batch, padding counted (sentences x longest)
    max_wait_ms: float = 5.0  # a batch not full waits at most this long for more jobs to join it
    max_queue: int = 1024  # sentences waiting or decoding; more -> 503 (memory stays bounded)
    timeout_s: float = 30.0  # a request not answered in this time -> 504
    enabled: bool = True  # False: one request per batch (what a server without dynamic batching does)

    def __post_init__(self) -> None:
        if self.max_batch_tokens < 1 or self.max_queue < 1 or self.max_wait_ms < 0 or self.timeout_s <= 0:
            raise ValueError(f"bad batching settings: {self}")


class QueueFull(Exception):
    """The queue holds max_queue sentences already (or the server is shutting down): retry after retry_after_s."""

    def __init__(self, message: str, retry_after_s: int, max_queue: int | None = None):
        super().__init__(message)
        self.retry_after_s, self.max_queue = retry_after_s, max_queue


class TooLarge(Exception):
    """A request of more sentences than the whole queue holds (max_queue): it could never be admitted."""

    def __init__(self, message: str, max_queue: int):
        super().__init__(message)
        self.max_queue = max_queue


class RequestTimeout(Exception):
    """A request waited longer than timeout_s."""

    def __init__(self, message: str, timeout_s: float):
        super().__init__(message)
        self.timeout_s = timeout_s


MAX_SEARCHES = 64  # searches (n-best size and request options) whose translators are kept for batching


@dataclass(eq=False)
class _Job:
    """Texts to translate (sources, encoded by `translator`, which decodes them with its n-best size), or a call to
    make on the model's thread (call; sources empty)."""

    sources: list[list[int] | None]  # ids + EOS per text (None = blank)
    translator: Translator | None
    future: asyncio.Future
    call: Callable[[], object] | None = None
    prefixes: list[list[int]] | None = None  # target prefix ids per text ([]: none)
    alignments: list[bool] = field(default_factory=list)  # per text, its translations' word links (this job's alone)
    arrived: float = field(default_factory=time.perf_counter)

    @property
    def size(self) -> int:
        """Its share of the queue bound: a sentence each; a call counts as one."""
        return len(self.sources) or 1

    @property
    def width(self) -> int:
        return max((len(s) for s in self.sources if s), default=0)


class Batcher:
    """Queue of translation jobs decoded in batches by one worker thread (see the module docstring).

    Create it anywhere; it starts on the first `submit` in a running event loop and binds to that loop."""

    def __init__(self, translator: Translator, config: BatchConfig | None = None):
        self.translator, self.config = translator, config or BatchConfig()
        self._queue: deque[_Job] = deque()
        self._queued = 0  # sizes of the jobs not answered yet (queued or running)
        self._arrived: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._closing = False
        self._idle_since = 0.0  # when the model thread last finished a job
        self._by_nbest: dict[tuple, Translator] = {(translator.search.nbest, (), False): translator}
        # counters for /info and the load benchmark; model_busy_s: seconds the model thread spent on batches
        self.stats = {"batches": 0, "sentences": 0, "requests": 0, "rejected": 0, "timed_out": 0, "model_busy_s": 0.0}
        # after each decoded batch: on_batch(sentences, source tokens, tokens of the best translations); the metrics
        # of aiayn.serve.observe set it
        self.on_batch: Callable[[int, int, int], None] | None = None

    # ---- the event loop side

    async def submit(self, texts: Sequence[str], nbest: int = 1, options: dict | None = None,
                     prefixes: Sequence[str] | None = None, full_vocabulary: bool = False,
                     alignments: bool | Sequence[bool] = False) -> list[list[Translation]]:
        """Translate `texts` (up to `nbest` hypotheses each, best first) among whatever else is queued. options:
        SearchConfig fields that differ from the server's (sampling, top_k, ...; a bad one is a UsageError before
        queuing); prefixes: per text, the text its translations start with ("": none); full_vocabulary: without the
        server's shortlist; alignments: each Translation's `alignment` (hard word links, as the engine's
        translate_nbest(alignments=True) gives them: `word_alignments`), computed on the model thread for this
        request's hypotheses only (a flag per text: those texts' alone, the others' None). Sampling seeds text i of
        the request by i, so a request's samples do not depend on what it is batched with."""
        wanted = aligned_lines(alignments, len(texts))
        self._admit(len(texts))
        translator = self._translator(nbest, options, full_vocabulary)
        sources = translator.encode(texts)
        prefix_ids = None
        if prefixes is not None and any(prefixes):
            prefix_ids = encode_prefixes(translator.vocab, prefixes)
            translator.check_prefixes(sources, prefix_ids)
        return await self._wait(_Job(sources, translator, self._loop().create_future(), prefixes=prefix_ids,
                                     alignments=wanted))

    async def run(self, fn: Callable[..., T], *args) -> T:
        """fn(*args) on the model's thread between two batches (for work that touches the model, e.g. recording
        attention), queued and timed like a request."""
        self._admit(1)
        return await self._wait(_Job([], None, self._loop().create_future(), call=lambda: fn(*args)))

    def swap(self, translator: Translator) -> None:
        """Serve `translator` from the next request on; queued requests keep the model that encoded them (see the
        module docstring). Call it on the event loop."""
        self.translator = translator
        self._by_nbest = {(translator.search.nbest, (), False): translator}

    async def close(self) -> None:
        """Refuse new jobs, answer every queued one, stop the worker thread."""
        self._closing = True
        if self._task is not None:
            self._arrived.set()
            await self._task
        if self._pool is not None:
            await asyncio.to_thread(self._pool.shutdown, wait=True)  # the loop must not block on it

    @property
    def queued(self) -> int:
        """Sentences queued or being decoded (and calls waiting for the model, one each)."""
        return self._queued

    @property
    def closing(self) -> bool:
        return self._closing

    def _admit(self, size: int) -> None:
        if self._closing:
            raise QueueFull("the server is shutting down", retry_after_s=5)
        most = self.config.max_queue
        if size > most:
            self.stats["rejected"] += 1
            raise TooLarge(f"the request has {size} sentences, more than the whole queue holds (max_queue {most}); "
                           "send them in smaller requests", max_queue=most)
        if self._queued + size > most:
            self.stats["rejected"] += 1
            raise QueueFull(f"the queue is full ({self._queued} sentences waiting, max_queue {most}); retry later",
                            retry_after_s=1, max_queue=most)

    def _translator(self, nbest: int, options: dict | None = None, full_vocabulary: bool = False) -> Translator:
        """The current translator with search.nbest = nbest and `options`, and without its shortlist if
        `full_vocabulary`, sharing its model (a shallow copy: only `search` and `shortlist` differ)."""
        full_vocabulary = full_vocabulary and self.translator.shortlist is not None
        key = (nbest, tuple(sorted((options or {}).items())), full_vocabulary)
        if key not in self._by_nbest:
            t = copy.copy(self.translator)
            t.search = dataclasses.replace(self.translator.search, nbest=nbest, **(options or {}))
            t.shortlist = None if full_vocabulary else t.shortlist
            if len(self._by_nbest) >= MAX_SEARCHES:  # requests choose seeds freely: forget the oldest search
                del self._by_nbest[next(iter(self._by_nbest))]
            self._by_nbest[key] = t
        return self._by_nbest[key]

    def _loop(self) -> asyncio.AbstractEventLoop:
        """The running loop; the first call starts the collector task and the model thread on it."""
        loop = asyncio.get_running_loop()
        if self._task is None:
            self._arrived = asyncio.Event()
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="aiayn-model")
            self._task = loop.create_task(self._collect_forever())
        return loop

    async def _wait(self, job: _Job):
        self._queue.append(job)
        self._queued += job.size
        self._arrived.set()
        try:
            # shield: a timeout must not cancel the future the worker's results are delivered to
            return await asyncio.wait_for(asyncio.shield(job.future), self.config.timeout_s)
        except asyncio.TimeoutError:
            self.stats["timed_out"] += 1
            raise RequestTimeout(f"no answer within timeout_s = {self.config.timeout_s:g} s",
                                 self.config.timeout_s) from None
        finally:
            if not job.future.done():  # timed out, or the client went away
                job.future.cancel()
                if job in self._queue:  # not started: nobody will run it
                    self._queue.remove(job)
                    self._queued -= job.size

    async def _collect_forever(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._queue:
                if self._closing:
                    return
                self._arrived.clear()
                await self._arrived.wait()
                continue
            await self._wait_for_company()
            if not self._queue:  # all that was queued timed out meanwhile
                continue
            batch = self._take_batch()
            started = time.perf_counter()
            try:
                results = await loop.run_in_executor(self._pool, self._run, batch)
            except Exception as e:  # a bug or out of memory: every request of the batch gets the error
                results = [e] * len(batch)
            for job, result in zip(batch, results):
                self._queued -= job.size
                if job.future.done():  # timed out while running
                    continue
                if isinstance(result, Exception):
                    job.future.set_exception(result)
                else:
                    job.future.set_result(result)
            self._idle_since = time.perf_counter()
            if batch[0].call is None:
                self.stats["model_busy_s"] += self._idle_since - started
                self.stats["batches"] += 1
                self.stats["requests"] += len(batch)
                self.stats["sentences"] += sum(len(j.sources) for j in batch)
                if self.on_batch is not None:
                    self.on_batch(sum(len(j.sources) for j in batch),
                                  sum(len(s) for j in batch for s in j.sources if s),
                                  sum(len(hs[0].tokens) for r in results if isinstance(r, list) for hs in r if hs))

    async def _wait_for_company(self) -> None:
        """Give other requests up to max_wait_ms to join, unless the batch is full already."""
        if not self.config.enabled or self._queue[0].call is not None:
            return
        # Counted from the later of the head's arrival and the end of the last batch: the clients that batch just
        # answered are sending their next requests, and without the wait the batches would alternate between two
        # halves of the clients.
        deadline = max(self._queue[0].arrived, self._idle_since) + self.config.max_wait_ms / 1000
        while not self._closing and self._queue and self._budget_left() \
                and (left := deadline - time.perf_counter()) > 0:
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), left)
            except asyncio.TimeoutError:
                return

    def _budget_left(self) -> bool:
        """Whether jobs of the head's search could still join without going over the token budget."""
        translator, rows, width = self._queue[0].translator, 0, 0
        for job in self._queue:
            if job.call is None and job.translator is translator:
                rows, width = rows + len(job.sources), max(width, job.width)
        return rows * width < self.config.max_batch_tokens

    def _take_batch(self) -> list[_Job]:
        """The head, and after it the jobs of its translator (same model, same n-best), oldest first, while rows x
        longest stays within the budget; a call or batching off: the head alone."""
        head = self._queue.popleft()
        if head.call is not None or not self.config.enabled:
            return [head]
        batch, rows, width, rest = [head], len(head.sources), head.width, deque()
        for job in self._queue:
            w = max(width, job.width)
            if job.call is None and job.translator is head.translator and (rows + len(job.sources)) * w <= \
                    self.config.max_batch_tokens:
                batch.append(job)
                rows, width = rows + len(job.sources), w
            else:
                rest.append(job)
        self._queue = rest
        return batch

    # ---- the worker thread

    def _run(self, batch: list[_Job]) -> list:
        """A call, or all sentences of the batch searched at once, the answers split per job."""
        if batch[0].call is not None:
            return [batch[0].call()]
        translator = batch[0].translator
        sources = [s for job in batch for s in job.sources]
        prefixes = None
        if any(job.prefixes for job in batch):
            prefixes = [p for job in batch for p in job.prefixes or [[]] * len(job.sources)]
        line_numbers = [i for job in batch for i in range(len(job.sources))]  # sampling's seeds: per request
        hyps = translator.search_ids(sources, prefixes=prefixes, line_numbers=line_numbers)
        decode = translator.vocab.decode
        parts, start = [], 0
        for job in batch:
            parts.append(hyps[start: start + len(job.sources)])
            start += len(job.sources)
        links = _links_of(translator, batch, parts)
        out = []
        for k, part in enumerate(parts):
            found = links.get(k, [[None] * len(hs) for hs in part])
            out.append(found if isinstance(found, Exception) else [
                [Translation(decode(h.tokens), h.score, h.tokens, alignment=a) for h, a in zip(hs, ls)]
                for hs, ls in zip(part, found)])
        return out


def _links_of(translator, batch: list[_Job], parts: list[list]) -> dict[int, list | Exception]:
    """The word links of the hypotheses of the batch's jobs that ask for them (k -> per text, per hypothesis),
    aligned together; where aligning fails, those jobs get the error and the others their translations."""
    asking = [(k, n) for k, job in enumerate(batch) for n, wanted in enumerate(job.alignments) if wanted]
    if not asking:
        return {}
    try:
        found = word_alignments(translator, [batch[k].sources[n] for k, n in asking],
                                [[h.tokens for h in parts[k][n]] for k, n in asking])
    except Exception as e:
        return dict.fromkeys({k for k, _ in asking}, e)
    out: dict[int, list | Exception] = {}
    for (k, n), links in zip(asking, found):
        out.setdefault(k, [[None] * len(hs) for hs in parts[k]])[n] = links
    return out


def word_alignments(engine, sources: Sequence[list[int] | None], targets: Sequence[Sequence[list[int]]]
                    ) -> list[list[list[tuple[int, int]]]]:
    """Per source (ids + EOS; None: blank), the word links of each of its hypotheses (`targets`: their ids), as the
    engine's translate_nbest(alignments=True) gives them (the engine's `align_ids`)."""
    rows = [(n, k) for n, ts in enumerate(targets) for k in range(len(ts))]  # every hypothesis, one list
    links = engine.align_ids([sources[n] for n, _ in rows], [targets[n][k] for n, k in rows])
    out: list[list] = [[None] * len(ts) for ts in targets]
    for (n, k), pairs in zip(rows, links):
        out[n][k] = pairs
    return out
