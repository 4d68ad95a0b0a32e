"""A new checkpoint without downtime: SIGHUP, or POST /admin/reload with the admin key, swaps the served models while
requests flow (docs/serving-operations.md "A new checkpoint without downtime").

    SIGHUP to the main process ─┐
    POST /admin/reload ─────────┴─> WorkerBoard.request(): generation + 1 ─> every worker (polling it) has each of
                                    its loaded models read its checkpoint again in a thread (aiayn.serve.models),
                                    then Batcher.swap on its event loop

Each loaded model is read again from where it came (aiayn.serve.engines: a run directory gives its averaged, else
best, else newest checkpoint, so a run that trained further is picked up) while its model thread goes on decoding
with the old one; the swap itself happens on the event loop between two batches (aiayn.serve.batcher), so each
request is answered by exactly one model. A model that cannot be read again keeps serving the one it has and its
worker says why in its log; the request that asked for the reload gets the error. The workers' shared state is
aiayn.serve.board, the admin key's check aiayn.serve.admin.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from aiayn.serve.admin import refusal
from aiayn.serve.board import WorkerBoard

POLL_S = 0.2  # how often a worker looks at the board
RELOAD_WAIT_S = 300.0  # how long POST /admin/reload waits for the other workers to load


class Reloader:
    """One worker's side of reloading: watches the board, loads and swaps; serves POST /admin/reload and
    GET /workers (its `router`)."""

    def __init__(self, board: WorkerBoard, worker: int = 0, admin_key: str | None = None):
        self.board, self.worker = board, worker
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
        """Every loaded model of `app` reads its checkpoint again (in a thread: the model threads go on decoding) and
        is swapped in on the event loop (aiayn.serve.models); what was read."""
        server = app.state.server
        async with self._lock:
            if self.board.served(self.worker) >= generation:
                return "the models loaded"
            try:
                paths = await server.models.reload()
            except Exception as e:
                self.board.mark(self.worker, generation, ok=False)
                print(f"error: worker {self.worker} (pid {os.getpid()}) could not load every model again: {e}; it "
                      "goes on serving the models it has", file=sys.stderr, flush=True)
                raise
            read = ", ".join(paths) or "no model loaded (each reads its checkpoint when first asked for)"
            self.board.mark(self.worker, generation, ok=True)
            print(f"worker {self.worker} (pid {os.getpid()}) serves {read} (generation {generation})",
                  file=sys.stderr, flush=True)
            return read

    async def _reload_route(self, request: Request) -> JSONResponse:
        if (refused := refusal(request, self._admin_key)) is not None:
            return refused
        started, generation = time.perf_counter(), self.board.request()
        try:
            path = await self.reload(request.app, generation)
        except Exception as e:
            return JSONResponse({"error": f"could not load every model again: {e}; the server goes on serving "
                                          "the models it had"}, status_code=500)
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
