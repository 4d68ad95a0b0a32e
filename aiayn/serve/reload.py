"""A new checkpoint without downtime: SIGHUP, or POST /admin/reload with the admin key, swaps the served model while
requests flow (docs/serving-operations.md "A new checkpoint without downtime").

    SIGHUP to the main process ─┐
    POST /admin/reload ─────────┴─> WorkerBoard.request(): generation + 1 ─> every worker (polling it) loads the
                                    checkpoint again in a thread, then Batcher.swap on its event loop

Each worker loads `--checkpoint` again (a run directory: its averaged, else best, else newest checkpoint, so a run
that trained further is picked up) while its model thread goes on decoding with the old model; the swap itself
happens on the event loop between two batches (aiayn.serve.batcher), so each request is answered by exactly one
model. A worker that cannot load the checkpoint keeps serving the one it has and says why in its log; the request
that asked for the reload gets the error.

`WorkerBoard` is what the worker processes share (shared memory, no locks: a lost increment of the generation would
only merge two reload requests that came at the same moment into one): the generation asked for, and per worker the
generation it serves, the last one it failed to load, its pid, whether it is ready, and its batching counters (for
GET /workers: /info and /health answer for the one worker that took the connection); and the access gate's budget
buckets (aiayn.serve.buckets.SharedBuckets, behind a lock of their own).
"""

from __future__ import annotations

import asyncio
import hmac
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from aiayn.decoding.ct2 import CT2Translator, is_ct2_model
from aiayn.decoding.search import SearchConfig
from aiayn.decoding.translator import Translator
from aiayn.serve.buckets import SharedBuckets

STATS = ("batches", "sentences", "requests", "rejected", "timed_out", "model_busy_s")  # Batcher.stats' counters
POLL_S = 0.2  # how often a worker looks at the board
RELOAD_WAIT_S = 300.0  # how long POST /admin/reload waits for the other workers to load
MIN_KEY_CHARS = 16


@dataclass(frozen=True)
class ModelSource:
    """Where the served model comes from and how it decodes: what a worker loads at start and on every reload."""

    checkpoint: str  # a run directory, a checkpoint file, a CTranslate2 folder or an Argos package (--checkpoint)
    search: SearchConfig
    precision: str = "fp32"  # --precision: the number format decoding runs in
    device: str = "cpu"
    shortlist: bool | str | None = None  # --shortlist: True, the run's (read again at each reload); a path, that file

    def load(self) -> tuple[Translator, Path]:
        """The translator, and the checkpoint file it was read from; a folder `aiayn export --to ct2` wrote, or an
        Argos Translate package, is decoded by CTranslate2 (aiayn.decoding.ct2.CT2Translator: the same id-level
        API), in the compute type of `precision`, with its vocabulary map where `shortlist` is asked for."""
        from aiayn.rundir import inference_checkpoint

        if is_ct2_model(self.checkpoint):
            return CT2Translator(self.checkpoint, torch.device(self.device).type,
                                 CT2Translator.COMPUTE_TYPES[self.precision], use_vmap=bool(self.shortlist),
                                 search=self.search), Path(self.checkpoint)
        path = inference_checkpoint(Path(self.checkpoint))
        return Translator.load(path, self.search, self.precision, device=self.device, shortlist=self.shortlist), path



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


def read_admin_key(where: str) -> str:
    """The admin key from `where`: a file holding it (its first line), or env:NAME for an environment variable. Never
    the key itself: a command line is visible to every user of the machine (ps). Errors never show the key."""
    if where.startswith("env:"):
        key = os.environ.get(where[4:], "")
        if not key:
            raise ValueError(f"--admin-key {where}: the environment variable {where[4:]} is not set or empty")
    else:
        path = Path(where)
        if not path.is_file():
            raise ValueError("--admin-key takes a file holding the key, or env:NAME for an environment variable, not "
                             "the key itself (a command line is visible to every user of the machine); no such file")
        lines = path.read_text(encoding="utf-8").splitlines()
        key = lines[0].strip() if lines else ""
    if len(key) < MIN_KEY_CHARS:
        raise ValueError(f"the admin key (--admin-key) has fewer than {MIN_KEY_CHARS} characters; make one with: "
                         "python -c 'import secrets; print(secrets.token_urlsafe(32))'")
    return key


class Reloader:
    """One worker's side of reloading: watches the board, loads and swaps; serves POST /admin/reload and
    GET /workers (its `router`)."""

    def __init__(self, source: ModelSource | None, board: WorkerBoard, worker: int = 0, admin_key: str | None = None):
        self.source, self.board, self.worker = source, board, worker
        self._admin_key = admin_key.encode() if admin_key else None
        self._lock = asyncio.Lock()
        self._task: asyncio.Task | None = None
        self._app = None
        self.router = APIRouter()
        self.router.add_api_route("/admin/reload", self._reload_route, methods=["POST"],
                                  summary="Load the checkpoint again and swap it in while requests flow (every "
                                          "worker); needs the header X-Admin-Key: <admin key>")
        self.router.add_api_route("/workers", self._workers_route, methods=["GET"],
                                  summary="The worker processes: pid, generation of the model served, counters")

    def start(self, app) -> None:
        """At the app's startup: this worker is ready, and watches the board."""
        self._app = app
        self.board.started(self.worker)
        self._task = asyncio.get_running_loop().create_task(self._watch())

    async def stop(self) -> None:
        self.board.stopped(self.worker)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _watch(self) -> None:
        while True:
            self.board.publish(self.worker, self._app.state.server.models.stats)
            target = self.board.requested
            if target > max(self.board.served(self.worker), self.board.failed(self.worker)):
                try:
                    await self.reload(self._app, target)
                except Exception:  # reported in the log by reload(); this worker goes on with the model it has
                    pass
            await asyncio.sleep(POLL_S)

    async def reload(self, app, generation: int) -> str:
        """Load the checkpoint (in a thread: the model thread goes on decoding) and swap it into `app` on the event
        loop; a server of many models (source None): every loaded model reads its own again (aiayn.serve.models).
        What was read."""
        server = app.state.server
        async with self._lock:
            if self.board.served(self.worker) >= generation:
                return str(server.info.get("checkpoint", "the models loaded"))
            try:
                if self.source is None:
                    paths = await server.models.reload()
                    read = ", ".join(paths) or "no model loaded (each reads its checkpoint when first asked for)"
                else:
                    translator, path = await asyncio.to_thread(self.source.load)
                    server.swap(translator, str(path))
                    read = str(path)
            except Exception as e:
                self.board.mark(self.worker, generation, ok=False)
                print(f"error: worker {self.worker} (pid {os.getpid()}) could not load {self._what()}: {e}; it goes "
                      "on serving the model it has", file=sys.stderr, flush=True)
                raise
            self.board.mark(self.worker, generation, ok=True)
            print(f"worker {self.worker} (pid {os.getpid()}) serves {read} (generation {generation})",
                  file=sys.stderr, flush=True)
            return read

    def _what(self) -> str:
        return self.source.checkpoint if self.source is not None else "every model"

    def _authorized(self, request: Request) -> JSONResponse | None:
        """None if the request carries the admin key, else the error to answer."""
        if self._admin_key is None:
            return JSONResponse({"error": "admin routes are off: start the server with --admin-key"}, status_code=403)
        given = request.headers.get("x-admin-key", "").strip()
        if not given:
            return JSONResponse({"error": "this route needs the admin key: send it as an X-Admin-Key: KEY header"},
                                status_code=403)
        if not hmac.compare_digest(given.encode(), self._admin_key):
            return JSONResponse({"error": "the admin key is not valid"}, status_code=403)
        return None

    async def _reload_route(self, request: Request) -> JSONResponse:
        if (refused := self._authorized(request)) is not None:
            return refused
        started, generation = time.perf_counter(), self.board.request()
        try:
            path = await self.reload(request.app, generation)
        except Exception as e:
            return JSONResponse({"error": f"could not load {self._what()}: {e}; the server goes on serving "
                                          "the model it had"}, status_code=500)
        deadline = started + RELOAD_WAIT_S
        others = [w for w in range(self.board.workers) if w != self.worker]
        # a worker that is not ready (starting again after a crash) loads the checkpoint as it is now anyway
        def behind() -> list[int]:
            return [w for w in others if self.board.ready(w) and self.board.served(w) < generation]

        while behind() and time.perf_counter() < deadline:
            if all(self.board.failed(w) >= generation for w in behind()):
                break
            await asyncio.sleep(POLL_S / 2)
        late = behind()
        failed = [w for w in late if self.board.failed(w) >= generation]
        answer = {"checkpoint": path, "generation": generation, "workers": self.board.workers,
                  "reloaded": self.board.workers - len(late), "seconds": round(time.perf_counter() - started, 3)}
        if failed:
            return JSONResponse({**answer, "error": f"worker(s) {failed} could not load it (their log says why) "
                                                    "and go on serving the model they had"}, status_code=500)
        if late:
            return JSONResponse({**answer, "error": f"worker(s) {late} had not loaded it within {RELOAD_WAIT_S:g} s"},
                                status_code=504)
        return JSONResponse(answer)

    async def _workers_route(self, request: Request) -> JSONResponse:
        self.board.publish(self.worker, request.app.state.server.models.stats)
        return JSONResponse(self.board.report())
