"""`aiayn serve`: a checkpoint, or many language pairs, behind HTTP (aiayn.serve): LibreTranslate's POST /translate,
/detect and /languages, a page at /, /docs."""

from __future__ import annotations

import argparse
import contextlib
import os
from pathlib import Path

from aiayn.cli.common import (
    CHECKPOINT_HELP,
    add_device_arg,
    add_language_args,
    add_precision_arg,
    add_search_args,
    low_memory,
    non_negative_float,
    non_negative_int,
    number,
    positive_float,
    positive_int,
    search_config,
)
from aiayn.errors import UsageError, UserError
from aiayn.extras import require


def serve_command(args: argparse.Namespace) -> int:
    require("aiayn serve", "serve")
    require("aiayn serve", "serve", ("lingua",))  # "auto" and /detect choose among the languages served
    from aiayn.serve.observe import metrics_shared_by_workers
    from aiayn.serve.workers import auto_workers, serve

    config = serve_config(args)
    workers = auto_workers(args.device_resolved) if args.workers == "auto" else args.workers
    pairs = ", ".join(f"{p.source}->{p.target}" for p, _ in config.catalog)
    budget = ", ".join(f for f in [f"at most {args.max_models} loaded at once" if args.max_models else "",
                                   f"{args.max_model_memory:g} MB of weights at most" if args.max_model_memory else ""]
                       if f)
    what = "; ".join(f"{source.checkpoint}{' with its shortlist' if args.shortlist else ''}, {pair} ({said})"
                     for (pair, source), said in zip(config.catalog, args.said))
    several = f"{len(config.catalog)} pairs ({pairs}), each model loaded when first asked for ({budget or 'no budget'})"
    one = what + (f" ({budget})" if budget else "")
    banner = (f"serving {one if len(config.catalog) == 1 else several}, at http://{config.host}:{config.port}/ "
              "(API docs: /docs)")
    # Ctrl-C or SIGTERM: uvicorn stops accepting, lets the requests in flight finish, then the app's lifespan drains
    # the batchers (in every worker); SIGHUP: every worker loads the checkpoints again (aiayn.serve.reload)
    with metrics_shared_by_workers() if workers > 1 else contextlib.nullcontext():  # any /metrics answers for all
        return serve(config, workers, banner)


def serve_config(args: argparse.Namespace):
    """The ServeConfig of the flags (aiayn.serve.config), each checked with one clear error; sets
    args.device_resolved and args.said (where each model's pair comes from) for the banner."""
    from aiayn.decoding.ct2 import is_ct2_model
    from aiayn.runtime import resolve_device
    from aiayn.serve import BatchConfig, Limits
    from aiayn.serve.admin import read_admin_key
    from aiayn.serve.catalog import build_catalog
    from aiayn.serve.config import ServeConfig
    from aiayn.serve.engines import ModelSource
    from aiayn.serve.files import FileConfig
    from aiayn.serve.workers import auto_workers, usable_cores

    if args.nbest != 1:
        raise UsageError('--nbest does not apply to serve: each request asks for its n-best ("alternatives": n)')
    if not args.checkpoint and args.models is None:
        raise UsageError("give the model to serve: --checkpoint PATH (repeat it, or --models FOLDER, for several)")
    try:
        batching = BatchConfig(max_batch_tokens=args.max_batch_tokens, max_wait_ms=args.max_wait_ms,
                               max_queue=args.max_queue, timeout_s=args.timeout, enabled=not args.no_batching)
        limits = Limits(max_chars=args.max_chars, max_texts=args.max_texts)
        admin_key = read_admin_key(args.admin_key) if args.admin_key else None
        files = FileConfig(**({"folder": args.files_dir} if args.files_dir else {}),
                           max_file_bytes=int(args.max_file_size * 2**20), timeout_s=args.file_timeout,
                           enabled=not args.disable_files_translation)
        listed = build_catalog(args.checkpoint or [], args.models, args.source_lang, args.target_lang)
    except UserError:
        raise
    except ValueError as e:
        raise UsageError(str(e)) from None
    if len(listed) > 1 and args.shortlist not in (None, True):
        raise UsageError("--shortlist FILE belongs to one model's vocabulary; with several models give --shortlist "
                         "alone (each run's own)")
    ct2 = [model.path for model in listed if is_ct2_model(model.path)]
    if ct2 and args.lp != "power":
        raise UsageError(f"{ct2[0]} is a CTranslate2 folder, whose length penalty is |Y|^alpha: serve it with --lp "
                         "power (the paper's GNMT penalty has no CTranslate2 equivalent)")
    if ct2 and args.shortlist not in (None, True):
        raise UsageError("--shortlist FILE: a CTranslate2 folder decodes with its own vocabulary map; give "
                         "--shortlist alone")
    if args.files_dir is not None:
        try:
            args.files_dir.mkdir(parents=True, exist_ok=True)
            probe = args.files_dir / f".aiayn-{os.getpid()}"
            probe.touch()
            probe.unlink()
        except OSError as e:
            raise UsageError(f"--files-dir {args.files_dir}: cannot write there ({e.strerror})") from None
    device = args.device_resolved = str(resolve_device(args.device))
    args.said = [model.said for model in listed]
    workers = auto_workers(device) if args.workers == "auto" else args.workers
    threads = args.threads or (0 if "OMP_NUM_THREADS" in os.environ else max(1, usable_cores() // workers))
    search = search_config(args)
    catalog = tuple((model.pair, ModelSource(model.path, search, args.precision, device, args.shortlist))
                    for model in listed)
    for pair, source in catalog:  # a missing checkpoint or shortlist is said here, before any worker starts
        try:
            source.check()
        except UserError as e:
            raise type(e)(f"the {pair.source}->{pair.target} model: {e}") from None
    return ServeConfig(catalog=catalog, batching=batching, limits=limits, max_models=args.max_models,
                       max_bytes=int(args.max_model_memory * 2**20), **access_options(args), host=args.host,
                       port=args.port, threads=threads, keep_freed_memory=not low_memory(args),
                       log_level=args.log_level, read_timeout_s=args.read_timeout,
                       max_connections=args.max_connections, admin_key=admin_key, files=files)


def access_options(args: argparse.Namespace) -> dict:
    """create_app's access= and observe= from the flags of "access, metrics and logs"; the key files are read once
    here, so that a wrong one is said before any worker starts; the warning for a server exposed without keys."""
    import re
    import sys

    from aiayn.serve.access import AccessConfig, KeyFile, exposure_warning
    from aiayn.serve.observe import ObserveConfig

    origins = tuple(o.strip() for o in (args.cors_origins or "").split(",") if o.strip())
    for origin in origins:
        if origin != "*" and not re.fullmatch(r"https?://[^/\s]+", origin):
            raise UsageError(f"--cors-origins: {origin!r} is not an origin: scheme://host[:port], without a path "
                             "(e.g. https://example.org), or *")
    for path in (args.api_keys, args.metrics_key_file):
        if path is not None:
            KeyFile(path)
    if args.access_log is not None:
        try:
            args.access_log.open("a", encoding="utf-8").close()
        except OSError as e:
            raise UsageError(f"--access-log {args.access_log}: cannot append to it ({e.strerror})") from None
    if line := exposure_warning(args.host, args.api_keys is not None):
        print(line, file=sys.stderr, flush=True)
    access = AccessConfig(api_keys=args.api_keys, req_limit=args.req_limit, char_limit=args.char_limit,
                          cors_origins=origins, metrics_key_file=args.metrics_key_file)
    observe = ObserveConfig(access_log=args.access_log, log_to_stderr=args.log_level in ("info", "debug"),
                            log_text=args.log_text)
    return {"access": access, "observe": observe}


def add_access_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("access, metrics and logs (docs/serving-access.md, docs/serving-operations.md)")
    g.add_argument("--api-keys", type=Path, metavar="FILE",
                   help="POST requests need a key from FILE (one a line, optionally 'req=N chars=N', # comments), "
                        "as api_key in the body or an Authorization: Bearer / X-API-Key header; FILE is read again "
                        "when it changes (default: no keys)")
    g.add_argument("--req-limit", type=non_negative_int, default=0,
                   help="requests a minute per key (per client address without keys); more get 429 + Retry-After "
                        "(default 0: no limit)")
    g.add_argument("--char-limit", type=non_negative_int, default=0,
                   help="characters of text a minute per key (per address without keys) (default 0: no limit)")
    g.add_argument("--cors-origins", metavar="ORIGIN,...",
                   help="web pages of these origins may call the API from a browser (e.g. https://example.org; * "
                        "for any) (default: none, no CORS headers)")
    g.add_argument("--metrics-key-file", type=Path, metavar="FILE",
                   help="GET /metrics needs the key in FILE as a Bearer token (Prometheus' credentials_file can "
                        "read the same file) (default: open, or any API key while --api-keys is on)")
    g.add_argument("--access-log", type=Path, metavar="FILE",
                   help="append the access log (one JSON line a request) to FILE (default: stderr at --log-level "
                        "info or debug)")
    g.add_argument("--log-text", action="store_true",
                   help="put the texts themselves in the access log (default: only their counts)")


def workers_arg(text: str) -> int | str:
    """--workers: auto, or an integer >= 1."""
    if text == "auto":
        return text
    try:
        return number(int, low=1)(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"must be auto or an integer >= 1, got {text!r}") from None


def register(sub) -> None:
    p = sub.add_parser("serve", help="serve trained models over HTTP (API + web page)",
                       description="Serve a model, or many language pairs, over HTTP: POST /translate in "
                                   "LibreTranslate's shape, /detect, /languages, /attention, /health, /info, OpenAPI "
                                   "at /docs and a page at / that translates as you type. Concurrent requests are "
                                   "decoded together (dynamic batching). Binds to 127.0.0.1 unless --host says "
                                   "otherwise. One model's pair: --source-lang and --target-lang, else the one "
                                   "`aiayn prepare` recorded for the run's data, else en -> de, the paper's. Several "
                                   "models (--checkpoint repeated, --models FOLDER): each loaded when first asked for, "
                                   "within --max-models / --max-model-memory; a pair no model translates goes "
                                   "through a pivot language where two models chain; source \"auto\" detects the "
                                   "language among the sources served. docs/serving.md.")
    p.add_argument("--checkpoint", action="append", metavar="[SRC:TGT=]PATH",
                   help=f"the model to serve: {CHECKPOINT_HELP}, a folder `aiayn export --to ct2` wrote, or an Argos "
                        "Translate package (.argosmodel or its folder; both decoded by CTranslate2: --lp power); "
                        "repeat it to serve several pairs, each named by SRC:TGT= (e.g. en:es=runs/a) or by what its "
                        "model records")
    g = p.add_argument_group("many pairs, one server (docs/serving.md)")
    g.add_argument("--models", type=Path, metavar="FOLDER",
                   help="serve every model under FOLDER (per subfolder a run directory, an imported run, a "
                        "CTranslate2 folder or an Argos package; or a .argosmodel file): its languages from its "
                        "record, else from the subfolder's name, e.g. en-es; with --checkpoint, both")
    g.add_argument("--max-models", type=non_negative_int, default=0,
                   help="models loaded at once (per worker); the least recently used idle one is unloaded to load "
                        "another (default 0: no limit)")
    g.add_argument("--max-model-memory", type=non_negative_float, default=0.0, metavar="MB",
                   help="the loaded models' weights in MB at most (per worker), likewise (default 0: no limit)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1: this machine only; 0.0.0.0 exposes it to the network)")
    p.add_argument("--port", type=number(int, low=0, below=65536), default=8000, help="port (default 8000)")
    add_language_args(p)
    g = p.add_argument_group("batching and limits")
    g.add_argument("--max-batch-tokens", type=positive_int, default=2048,
                   help="source tokens per decoding batch, padding counted (default 2048)")
    g.add_argument("--max-wait-ms", type=non_negative_float, default=5.0,
                   help="how long an idle model waits for more requests to join a batch (default 5)")
    g.add_argument("--no-batching", action="store_true", help="decode each request alone (to measure batching)")
    g.add_argument("--max-queue", type=positive_int, default=1024,
                   help="sentences queued per model; overfilled: 503 + Retry-After; too big for it: 413 (default 1024)")
    g.add_argument("--timeout", type=positive_float, default=30.0,
                   help="seconds a request may wait; then 504 (default 30)")
    g.add_argument("--max-chars", type=positive_int, default=1000,
                   help="characters per text; more get 413 (default 1000)")
    g.add_argument("--max-texts", type=positive_int, default=64, help="texts per request; more get 413 (default 64)")
    g = p.add_argument_group("workers, reloading and misbehaving clients")
    g.add_argument("--workers", type=workers_arg, default="auto",
                   help="server processes, each with its own model copy, behind the one port; auto: one per CPU core "
                        "(one on a GPU) (default auto; docs/serving-performance.md has the measurements)")
    g.add_argument("--threads", type=positive_int, default=None,
                   help="torch threads per worker (default: CPU cores / workers, or OMP_NUM_THREADS where set)")
    g.add_argument("--admin-key", metavar="FILE|env:NAME",
                   help="enables POST /admin/reload for requests with the header X-Admin-Key: KEY; the key is read "
                        "from FILE (its first line) or the environment variable NAME, never from the command line "
                        "(every user of the machine can read that)")
    g.add_argument("--read-timeout", type=positive_float, default=10.0,
                   help="seconds a client has to send a whole request, head and body; slower ones get 408 and are "
                        "disconnected (default 10)")
    g.add_argument("--max-connections", type=positive_int, default=1000,
                   help="open connections per worker at most; requests beyond get 503 (default 1000)")
    add_access_args(p)
    g = p.add_argument_group("documents: POST /translate_file (docs/serving-files.md)")
    g.add_argument("--files-dir", type=Path, metavar="DIR",
                   help="where uploads and translations wait to be downloaded, 30 minutes at most; every worker "
                        "shares it (default: aiayn-serve-files in the system's temporary folder)")
    g.add_argument("--max-file-size", type=positive_float, default=20.0, metavar="MB",
                   help="the largest upload in MB; larger get 413 (default 20)")
    g.add_argument("--file-timeout", type=positive_float, default=600.0, metavar="SECONDS",
                   help="seconds a document may take to translate; then 504 (default 600)")
    g.add_argument("--disable-files-translation", action="store_true",
                   help="POST /translate_file answers 403 (LibreTranslate's flag of the same name)")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"],
                   help="uvicorn's log level (default info: one line per request)")
    p.add_argument("--shortlist", nargs="?", const=True, default=None, metavar="FILE",
                   help="decode with a lexical shortlist (faster): the run's (built by `aiayn shortlist`; read again "
                        "at each reload), or FILE; a request may turn it off with \"shortlist\": false "
                        "(docs/serving.md)")
    add_search_args(p)
    add_precision_arg(p)
    add_device_arg(p)
    p.set_defaults(func=serve_command)
