"""What the worker processes of one server share (aiayn.serve.workers): `WorkerBoard`, in shared memory without
locks (a lost increment of the generation would only merge two reload requests that came at the same moment into
one): the reload generation asked for, and per worker the generation it serves, the last one it failed to load, its
pid, whether it is ready, and its batching counters (for GET /workers: /info and /health answer for the one worker
that took the connection); and the access gate's budget buckets (aiayn.serve.buckets.SharedBuckets, behind a lock
of their own)."""

from __future__ import annotations

import os

from aiayn.serve.buckets import SharedBuckets

STATS = ("batches", "sentences", "requests", "rejected", "timed_out", "model_busy_s")  # Batcher.stats' counters


class WorkerBoard:
    """State the worker processes share (see the module docstring). `ctx`: a multiprocessing context (its Value and
    Array live in shared memory that spawned processes inherit)."""

    def __init__(self, ctx, workers: int):
        self.workers = workers
        self._requested = ctx.Value("q", 0, lock=False)
        self._served = ctx.Array("q", workers, lock=False)
        self._failed = ctx.Array("q", workers, lock=False)
        self._pid = ctx.Array("q", workers, lock=False)
        self._ready = ctx.Array("b", workers, lock=False)
        self._stats = ctx.Array("d", workers * len(STATS), lock=False)
        self.buckets = SharedBuckets(ctx)  # the access gate's budgets: one per client across the workers
        self.main_pid = os.getpid()

    @property
    def requested(self) -> int:
        return self._requested.value

    def request(self) -> int:
        """Ask every worker to load the checkpoint again; the generation they will reach."""
        self._requested.value += 1
        return self._requested.value

    def started(self, worker: int) -> None:
        """A worker (new, or started again after a crash) serves the checkpoint as it is now."""
        self._pid[worker], self._served[worker], self._failed[worker] = os.getpid(), self.requested, 0
        self._ready[worker] = 1

    def stopped(self, worker: int) -> None:
        self._ready[worker] = 0

    def ready(self, worker: int) -> bool:
        return bool(self._ready[worker])

    def served(self, worker: int) -> int:
        return self._served[worker]

    def failed(self, worker: int) -> int:
        return self._failed[worker]

    def mark(self, worker: int, generation: int, ok: bool) -> None:
        if ok:
            self._served[worker] = max(self._served[worker], generation)
        else:
            self._failed[worker] = max(self._failed[worker], generation)

    def publish(self, worker: int, stats: dict) -> None:
        for k, name in enumerate(STATS):
            self._stats[worker * len(STATS) + k] = stats[name]

    def report(self) -> dict:
        """GET /workers' answer: each worker's state and counters, and the counters summed."""
        rows = []
        for w in range(self.workers):
            stats = {name: self._stats[w * len(STATS) + k] for k, name in enumerate(STATS)}
            rows.append({"worker": w, "pid": self._pid[w], "ready": self.ready(w), "generation": self._served[w],
                         "failed_generation": self._failed[w] or None,
                         "stats": {k: v if k == "model_busy_s" else int(v) for k, v in stats.items()}})
        total = {name: sum(r["stats"][name] for r in rows) for name in STATS}
        return {"main_pid": self.main_pid, "generation": self.requested, "workers": rows, "total": total}
