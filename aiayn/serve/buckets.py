"""Where the access gate's per-minute budgets keep their token buckets (aiayn.serve.access.Budgets).

    LocalBuckets    a dict in the process: one server process (--workers 1), and the tests
    SharedBuckets   a fixed table in shared memory behind one lock, made by the main process and handed to every
                    worker (through aiayn.serve.reload.WorkerBoard): with --workers N a client's budget is one
                    budget, whichever worker each of its connections reaches, not N of them

A bucket is (requests left, characters left, when it was last refilled), in the units of the budgets' clock, which
must be shared by the processes (time.monotonic is: CLOCK_MONOTONIC is system-wide). A bucket idle for a minute is
full again, so forgetting it changes nothing: both tables reuse such slots, and memory stays bounded by the clients
of the last minute. Both are used as `with table.locked(): where, b = table.find(client, now); ...;
table.put(where, b)` (`where`: what find located, so that put does not look again).
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass

MINUTE = 60.0


@dataclass
class Bucket:
    requests: float
    chars: float
    stamp: float


class LocalBuckets:
    """The buckets of one process, in a dict pruned of idle clients as it grows."""

    def __init__(self):
        self._buckets: dict[str, Bucket] = {}
        self._prune_at = 10_000

    def locked(self):
        return contextlib.nullcontext()  # one event loop: nothing else charges between get and put

    def find(self, client: str, now: float) -> tuple[str, Bucket | None]:
        return client, self._buckets.get(client)

    def put(self, client: str, bucket: Bucket) -> None:
        if client not in self._buckets and len(self._buckets) >= self._prune_at:
            self._buckets = {c: b for c, b in self._buckets.items() if bucket.stamp - b.stamp < MINUTE}
            self._prune_at = max(10_000, 2 * len(self._buckets))
        self._buckets[client] = bucket

    def __len__(self) -> int:
        return len(self._buckets)


class SharedBuckets:
    """Buckets in shared memory, for worker processes: an open-addressing table of `slots` entries keyed by a 64-bit
    hash of the client, probed linearly over at most PROBES slots. A slot empty or idle for a minute is free; where
    all PROBES are in use (more clients within a minute than the table holds) the stalest is taken over, and its
    client starts again with a full bucket. ctx: a multiprocessing context (spawned processes inherit its arrays and
    lock when the table is passed to them)."""

    PROBES = 32

    def __init__(self, ctx, slots: int = 32_768):
        self.slots = slots
        self._lock = ctx.Lock()
        self._keys = ctx.Array("q", slots, lock=False)  # 0: never used
        self._requests = ctx.Array("d", slots, lock=False)
        self._chars = ctx.Array("d", slots, lock=False)
        self._stamps = ctx.Array("d", slots, lock=False)

    def locked(self):
        return self._lock

    @staticmethod
    def _key(client: str) -> int:
        return int.from_bytes(hashlib.blake2b(client.encode(), digest_size=8).digest(), "little", signed=True) or 1

    def _slot(self, key: int, now: float) -> tuple[int, bool]:
        """(slot, whether it holds this key's bucket): the key's slot, else the first free one, else the stalest."""
        start, free, stalest = key % self.slots, None, None
        for i in range(self.PROBES):
            s = (start + i) % self.slots
            if self._keys[s] == key:
                return s, True
            if free is None and (self._keys[s] == 0 or now - self._stamps[s] >= MINUTE):
                free = s
            if stalest is None or self._stamps[s] < self._stamps[stalest]:
                stalest = s
        return (free if free is not None else stalest), False

    def find(self, client: str, now: float) -> tuple[tuple[int, int], Bucket | None]:
        """((slot, key), the client's bucket or None): the slot is where put writes it."""
        key = self._key(client)
        s, found = self._slot(key, now)
        return (s, key), (Bucket(self._requests[s], self._chars[s], self._stamps[s]) if found else None)

    def put(self, where: tuple[int, int], bucket: Bucket) -> None:
        (s, key) = where
        self._keys[s], self._requests[s], self._chars[s], self._stamps[s] = \
            key, bucket.requests, bucket.chars, bucket.stamp

    def __len__(self) -> int:
        return sum(1 for k in self._keys if k)
