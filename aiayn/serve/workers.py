"""Worker processes: `aiayn serve --workers N` runs N copies of the server behind one port (docs/serving-operations.md
"Workers").

    main process: starts N workers (spawned), forwards SIGTERM / Ctrl-C, turns SIGHUP into a reload
    │             (aiayn.serve.reload), starts a worker again if one dies
    ├── worker 0: its own model copy, torch threads, batcher and event loop (uvicorn), its own listening socket
    └── worker 1: ...                                                        on the same port (SO_REUSEPORT)

On Linux each worker listens on a socket of its own bound to the same port (SO_REUSEPORT), and the kernel spreads
new connections over them evenly (by a hash of the client's address and port); a worker opens its socket once its
model is loaded. Elsewhere the workers share one socket that the main process binds, and the worker that wakes
first may accept a whole burst of connections (asyncio accepts all that are waiting): one socket each is the
better way where there is one. A keep-alive connection stays with its worker, so a worker's dynamic batching sees
the requests of its own connections. Why workers at all: one process runs the model on one thread at a time and
does its HTTP work between batches on the same cores; N single-threaded workers keep N cores decoding, each on
batches that are still large under load (measured in docs/serving-performance.md).

Stopping: SIGTERM or SIGINT to the main process (Ctrl-C sends it to every process of the terminal's group, which is
the same) -> each worker stops accepting, answers the requests it has, drains its batcher and exits; then the main
process exits 0. A worker whose main process has gone (SIGKILL) stops by itself.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import sys
import threading
import time

from aiayn.runtime import configure_process
from aiayn.serve.board import WorkerBoard
from aiayn.serve.config import ServeConfig
from aiayn.serve.guard import KEEP_ALIVE_S, MAX_HEAD_BYTES, guarded_protocol

PARENT_POLL_S = 0.5
# Linux: each worker listens on a socket of its own (SO_REUSEPORT) and the kernel spreads new connections over them
# evenly; elsewhere the workers share one socket, and the one that wakes first may accept a whole burst of them
REUSE_PORT = sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")
RESTART_AFTER_S = 2.0  # a worker is started again at most this often
BACKLOG = 2048


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def auto_workers(device: str) -> int:
    """--workers auto: one single-threaded worker per usable core on a CPU (docs/serving-performance.md has the
    measurements that chose it); one process for a GPU, which decodes the batches of every client."""
    return 1 if device.startswith("cuda") else usable_cores()


def build_server(spec: ServeConfig, board: WorkerBoard, worker: int):
    """Worker `worker`'s uvicorn.Server (not started), its catalogue's models loaded as far as the budget goes
    (aiayn.serve.models: the others when first asked for)."""
    import uvicorn

    from aiayn.serve.app import create_app
    from aiayn.serve.reload import Reloader

    # a spawned worker starts with glibc's defaults: it reuses freed memory as `aiayn serve` does unless --low-memory
    configure_process(threads=spec.threads, keep_freed_memory=spec.keep_freed_memory)
    models = spec.models()
    models.preload()
    app = create_app(models, spec, Reloader(board, worker, spec.admin_key), buckets=board.buckets)
    config = uvicorn.Config(app, host=spec.host, port=spec.port, log_level=spec.log_level,
                            http=guarded_protocol(spec.read_timeout_s, spec.max_connections),
                            timeout_keep_alive=KEEP_ALIVE_S, limit_concurrency=None,
                            h11_max_incomplete_event_size=MAX_HEAD_BYTES, backlog=BACKLOG,
                            timeout_graceful_shutdown=None)
    return uvicorn.Server(config)


def serve(spec: ServeConfig, workers: int, banner: str) -> int:
    """`aiayn serve`: the server in this process (workers == 1) or in `workers` worker processes; the exit status.
    banner: what is served where, printed once the server is about to listen."""
    configure_process(kernel_cache=True)  # `aiayn serve` did at start; a caller of serve() may not have
    how = "stop: Ctrl-C or SIGTERM, which finish the requests in flight; reload the checkpoint: SIGHUP to pid"
    if workers == 1:
        serve_one(spec, f"{banner}; {how} {os.getpid()}")
        return 0

    def announce(pids: list[int]) -> None:
        print(f"{banner}, {workers} workers (pids {', '.join(map(str, pids))}, {spec.threads or 'default'} torch "
              f"thread(s) each); {how} {os.getpid()}", file=sys.stderr, flush=True)
    return serve_workers(spec, workers, announce)


def serve_one(spec: ServeConfig, banner: str) -> None:
    """The server in this process (--workers 1): SIGHUP asks for a reload; SIGTERM and Ctrl-C stop it gracefully
    (uvicorn lets the requests in flight finish, the batcher drains, then the signal is raised again)."""
    board = WorkerBoard(multiprocessing.get_context("spawn"), 1)
    server = build_server(spec, board, 0)
    print(banner, file=sys.stderr, flush=True)  # once its models are loaded
    signal.signal(signal.SIGHUP, lambda sig, frame: board.request())
    server.run()


def serve_workers(spec: ServeConfig, workers: int, announce) -> int:
    """Run `workers` worker processes behind spec.host:spec.port until SIGTERM or SIGINT; the exit status.
    announce(pids) is called once every worker is ready."""
    ctx = multiprocessing.get_context("spawn")
    board = WorkerBoard(ctx, workers)
    check_port(spec.host, spec.port)  # a port in use is said now, not by each worker
    shared = None if REUSE_PORT else listen(spec.host, spec.port)
    stop: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda s, frame: stop.append(s))
    signal.signal(signal.SIGHUP, lambda s, frame: board.request())

    def start(worker: int):
        p = ctx.Process(target=_worker_main, args=(spec, board, worker, shared, os.getpid()),
                        name=f"aiayn-serve-{worker}", daemon=False)
        p.start()
        return p

    procs = [start(w) for w in range(workers)]
    started = [time.monotonic()] * workers
    ever_ready, announced, status = [False] * workers, False, 0
    while not stop:
        time.sleep(0.1)
        for w, p in enumerate(procs):
            ever_ready[w] = ever_ready[w] or board.ready(w)
            if p.is_alive() or stop:
                continue
            if not announced:  # at start: a worker that cannot start means a server that cannot
                print(f"error: worker {w} (pid {p.pid}) exited with status {p.exitcode} before the server was ready "
                      "(its error is above); stopping", file=sys.stderr, flush=True)
                stop.append(signal.SIGTERM)
                status = 1
                break
            if time.monotonic() - started[w] < RESTART_AFTER_S:  # a worker that keeps dying is started more slowly
                continue
            print(f"warning: worker {w} (pid {p.pid}) ended with status {p.exitcode}; starting it again",
                  file=sys.stderr, flush=True)
            board.stopped(w)
            procs[w], started[w] = start(w), time.monotonic()
        if not announced and all(ever_ready):
            announce([p.pid for p in procs])
            announced = True
    for p in procs:
        if p.is_alive():
            os.kill(p.pid, signal.SIGTERM)
    for p in procs:
        p.join()
    if shared is not None:
        shared.close()
    return status


def listen(host: str, port: int, reuse_port: bool = False, listening: bool = True) -> socket.socket:
    """A socket bound to host:port, listening; reuse_port: one of the workers' sockets (SO_REUSEPORT), else the one
    the workers share."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    # proto IPPROTO_TCP: asyncio sets TCP_NODELAY only on connections of such a socket, and without it a response
    # (head, then body) waits on the client's delayed ACK: ~50 ms a request
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    if listening:
        sock.listen(BACKLOG)
    sock.set_inheritable(not reuse_port)
    return sock


def check_port(host: str, port: int) -> None:
    """OSError if host:port is taken: by a program that binds it alone, or by another server that, like this one,
    shares it with SO_REUSEPORT (which would otherwise get half of the connections)."""
    listen(host, port, reuse_port=REUSE_PORT, listening=False).close()
    try:
        with socket.create_connection(({"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(host, host), port),
                                      timeout=1):
            raise OSError(f"cannot listen on {host}:{port}: another server is listening there")
    except (ConnectionRefusedError, TimeoutError):
        pass


def _worker_main(spec: ServeConfig, board: WorkerBoard, worker: int, shared: socket.socket | None, parent: int
                 ) -> None:
    """A worker process: SIGHUP is the main process's to handle (a hangup of the terminal reaches every process of
    its group); the worker stops when asked, or when its main process is gone."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    # uvicorn raises SIGTERM again once it has drained: exit as a normal end, so that finalizers run (multiprocessing
    # would otherwise report the semaphore of tqdm's lock as leaked)
    signal.signal(signal.SIGTERM, lambda sig, frame: sys.exit(0))
    try:
        server = build_server(spec, board, worker)
    except KeyboardInterrupt:  # Ctrl-C while loading
        return
    except Exception as e:
        print(f"error: worker {worker}: {e}", file=sys.stderr, flush=True)
        sys.exit(1)

    def watch_parent() -> None:
        while not server.should_exit:
            if os.getppid() != parent:
                server.should_exit = True
            time.sleep(PARENT_POLL_S)

    threading.Thread(target=watch_parent, daemon=True, name="aiayn-watch-parent").start()
    # its own socket once it can serve: no connection waits on a worker still loading its model
    sock = shared or listen(spec.host, spec.port, reuse_port=True)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn raises Ctrl-C's SIGINT again once it has drained
        pass
