"""`aiayn serve`: a checkpoint, or many language pairs, behind HTTP (aiayn.serve): LibreTranslate's POST /translate,
/detect and /languages, a page at /, /docs."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
from pathlib import Path

from aiayn.cli.common import (
    CHECKPOINT_HELP,
    add_device_arg,
    add_language_args,
    add_precision_arg,
    add_search_args,
    non_negative_float,
    non_negative_int,
    number,
    positive_float,
    positive_int,
    search_config,
)
from aiayn.errors import UsageError
from aiayn.extras import require


def serve_command(args: argparse.Namespace) -> int:
    require("aiayn serve", "serve")
    from aiayn.decoding.ct2 import is_ct2_model
    from aiayn.rundir import inference_checkpoint
    from aiayn.runtime import resolve_device
    from aiayn.serve import BatchConfig, Limits
    from aiayn.serve.observe import metrics_shared_by_workers
    from aiayn.serve.reload import ModelSource, read_admin_key
    from aiayn.serve.workers import ServeSpec, auto_workers, serve, usable_cores

    if args.nbest != 1:
        raise UsageError('--nbest does not apply to serve: each request asks for its n-best ("alternatives": n)')
    many = len(args.checkpoint or []) > 1 or args.models is not None
    if not args.checkpoint and args.models is None:
        raise UsageError("give the model to serve: --checkpoint PATH (repeat it, or --models FOLDER, for several)")
    if not many and (args.max_models or args.max_model_memory):
        raise UsageError("--max-models and --max-model-memory apply to a server of several models (repeat "
                         "--checkpoint, or --models FOLDER)")
    try:
        batching = BatchConfig(max_batch_tokens=args.max_batch_tokens, max_wait_ms=args.max_wait_ms,
                               max_queue=args.max_queue, timeout_s=args.timeout, enabled=not args.no_batching)
        limits = Limits(max_chars=args.max_chars, max_texts=args.max_texts)
        admin_key = read_admin_key(args.admin_key) if args.admin_key else None
        if many:
            pairs = serve_catalog(args)
        else:
            named, path = model_arg(args.checkpoint[0])
            pair, said = serve_languages(path, *(named or (args.source_lang, args.target_lang)))
            said = "--checkpoint SRC:TGT=PATH" if named else said
    except ValueError as e:
        raise UsageError(str(e)) from None
    if many and len({pair.source for pair, _ in pairs}) > 1:
        require("aiayn serve of several source languages (their detection)", "serve", ("lingua",))
    ct2 = [p for p in ([path for _, path in pairs] if many else [path]) if is_ct2_model(p)]
    if ct2 and args.lp != "power":
        raise UsageError(f"{ct2[0]} is a CTranslate2 folder, whose length penalty is |Y|^alpha: serve it with --lp "
                         "power (the paper's GNMT penalty has no CTranslate2 equivalent)")
    if ct2 and args.shortlist not in (None, True):
        raise UsageError("--shortlist FILE: a CTranslate2 folder decodes with its own vocabulary map; give "
                         "--shortlist alone")
    if not many and not ct2:
        checkpoint = inference_checkpoint(path)  # a missing one is said here, before any worker starts
        if args.shortlist:
            from aiayn.decoding.shortlist import run_file

            run_file(path, None if args.shortlist is True else args.shortlist)  # likewise
    elif not many:
        checkpoint = path
    device = str(resolve_device(args.device))
    workers = auto_workers(device) if args.workers == "auto" else args.workers
    threads = args.threads or (0 if "OMP_NUM_THREADS" in os.environ else max(1, usable_cores() // workers))

    def source(path: str) -> ModelSource:
        return ModelSource(path, search_config(args), args.precision, device, args.shortlist)

    options = dict(batching=batching, limits=limits, host=args.host, port=args.port, threads=threads,
                   log_level=args.log_level, read_timeout_s=args.read_timeout, max_connections=args.max_connections,
                   admin_key=admin_key)
    if many:  # app_options: create_app's other arguments (each worker makes its own app)
        spec = ServeSpec(None, **options, app_options=access_options(args), max_models=args.max_models,
                         catalog=tuple((pair, source(path)) for pair, path in pairs),
                         max_bytes=int(args.max_model_memory * 2**20))
        budget = ", ".join(f for f in [f"at most {args.max_models} at once" if args.max_models else "",
                                       f"{args.max_model_memory:g} MB of weights at most"
                                       if args.max_model_memory else ""] if f) or "no budget"
        what = (f"{len(pairs)} pairs ({', '.join(f'{p.source}->{p.target}' for p, _ in pairs)}), each model loaded "
                f"when first asked for ({budget})")
    else:
        spec = ServeSpec(source(path), **options, app_options={"pair": pair, **access_options(args)})
        what = f"{checkpoint}{' with its shortlist' if args.shortlist else ''}, {pair} ({said})"
    banner = f"serving {what}, at http://{args.host}:{args.port}/ (API docs: /docs)"
    # Ctrl-C or SIGTERM: uvicorn stops accepting, lets the requests in flight finish, then the app's lifespan drains
    # the batchers (in every worker); SIGHUP: every worker loads the checkpoints again (aiayn.serve.reload)
    with metrics_shared_by_workers() if workers > 1 else contextlib.nullcontext():  # any /metrics answers for all
        return serve(spec, workers, banner)


MODEL_ARG = re.compile(r"([A-Za-z][A-Za-z0-9_-]*):([A-Za-z][A-Za-z0-9_-]*)=(.+)")
PAIR_FOLDER = re.compile(r"([a-z]{2,3})[-_]([a-z]{2,3})")  # models/en-es: a folder named by its pair


def model_arg(text: str) -> tuple[tuple[str, str] | None, str]:
    """--checkpoint's value: ((source, target) or None, the path): "en:es=runs/a" names the pair, "runs/a" not."""
    found = MODEL_ARG.fullmatch(text)
    return ((found[1], found[2]), found[3]) if found else (None, text)


def serve_catalog(args: argparse.Namespace) -> list:
    """[(LanguagePair, path)] of a server of several models: each --checkpoint, then each model folder under
    --models; a model's languages are the ones named (SRC:TGT=PATH), else the ones its run records, else (under
    --models) the folder's name (en-es). ValueError for a model whose languages nothing says, or a path missing."""
    import sys

    from aiayn.data.folder import run_languages
    from aiayn.serve import LanguagePair

    if args.source_lang or args.target_lang:
        raise ValueError("--source-lang/--target-lang name the languages of one model; for several, name each "
                         "model's pair: --checkpoint SRC:TGT=PATH")
    if args.shortlist not in (None, True):
        raise ValueError("--shortlist FILE belongs to one model's vocabulary; with several models give --shortlist "
                         "alone (each run's own)")
    pairs = []
    for text in args.checkpoint or []:
        named, path = model_arg(text)
        if not Path(path).exists():
            raise ValueError(f"--checkpoint {path}: no such file or folder")
        languages = named or run_languages(path)
        if languages is None:
            raise ValueError(f"--checkpoint {path}: its run records no languages; name them: --checkpoint "
                             f"SRC:TGT={path} (e.g. en:es={path})")
        pairs.append((LanguagePair(*languages), path))
    if args.models is not None:
        if not args.models.is_dir():
            raise ValueError(f"--models {args.models}: no such folder")
        found = 0
        for folder in sorted(p for p in args.models.iterdir() if (p.is_dir() or p.suffix == ".argosmodel")
                             and not p.name.startswith(".")):
            named = PAIR_FOLDER.fullmatch(folder.name)
            languages = run_languages(folder) or (named and (named[1], named[2]))
            if not languages:
                print(f"warning: --models: {folder} is skipped: its run records no languages and its name is not a "
                      "pair (name the folder SRC-TGT, e.g. en-es)", file=sys.stderr, flush=True)
                continue
            pairs.append((LanguagePair(*languages), str(folder)))
            found += 1
        if not found:
            raise ValueError(f"--models {args.models}: no model folder in it (one folder per model: a run "
                             "directory, named by its pair where its run records none, e.g. en-es)")
    seen: dict = {}
    for pair, path in pairs:
        if (pair.source, pair.target) in seen:
            raise ValueError(f"two models translate {pair}: {seen[pair.source, pair.target]} and {path}; serve one "
                             "(or name another pair: --checkpoint SRC:TGT=PATH)")
        seen[pair.source, pair.target] = path
    return pairs


def serve_languages(checkpoint: str, source: str | None, target: str | None):
    """(LanguagePair, where it comes from): the flags given, else the languages recorded with the model (its run's
    prepared data, its import or its CTranslate2 export: data.run_languages), else the paper's en -> de. ValueError
    for a code that is not one."""
    from aiayn.data.folder import run_languages
    from aiayn.serve import LanguagePair

    recorded = run_languages(checkpoint)
    default = recorded or ("en", "de")
    pair = LanguagePair(source or default[0], target or default[1])
    if source and target:
        return pair, "--source-lang/--target-lang"
    return pair, ("recorded with the model" if recorded else
                  "not recorded by the run's data: the default; --source-lang/--target-lang name others")


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
                   help="sentences queued at most; more get 503 + Retry-After (default 1024)")
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
