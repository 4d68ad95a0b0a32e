"""`aiayn serve`: a checkpoint behind HTTP (aiayn.serve): LibreTranslate's POST /translate, a page at /, /docs."""

from __future__ import annotations

import argparse
import sys

from aiayn.cli.common import (
    add_device_arg,
    add_search_args,
    add_weights_arg,
    non_negative_float,
    number,
    positive_float,
    positive_int,
    search_config,
)
from aiayn.errors import UsageError
from aiayn.extras import require


def run(args: argparse.Namespace) -> int:
    require("aiayn serve", "serve")
    import uvicorn

    from aiayn.rundir import inference_checkpoint
    from aiayn.runtime import resolve_device
    from aiayn.serve import BatchConfig, Limits, create_app
    from aiayn.translate import Translator

    if args.nbest != 1:
        raise UsageError('--nbest does not apply to serve: each request asks for its n-best ("alternatives": n)')
    try:
        batching = BatchConfig(max_batch_tokens=args.max_batch_tokens, max_wait_ms=args.max_wait_ms,
                               max_queue=args.max_queue, timeout_s=args.timeout, enabled=not args.no_batching)
        limits = Limits(max_chars=args.max_chars, max_texts=args.max_texts)
    except ValueError as e:
        raise UsageError(str(e)) from None
    checkpoint = inference_checkpoint(args.checkpoint)
    translator = Translator.load(checkpoint, search_config(args), args.weights, device=resolve_device(args.device))
    app = create_app(translator, batching, limits, checkpoint=str(checkpoint))
    print(f"serving {checkpoint} at http://{args.host}:{args.port}/ (API docs: /docs; stop: Ctrl-C or SIGTERM, "
          "which finishes the requests in flight)", file=sys.stderr, flush=True)
    # uvicorn's graceful shutdown: stop accepting, let requests in flight finish, then the app's lifespan drains
    # the batcher; it then re-raises the signal, so the process ends as SIGTERM asked.
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, timeout_graceful_shutdown=None)
    return 0


def register(sub) -> None:
    p = sub.add_parser("serve", help="serve a trained model over HTTP (API + web page)",
                       description="Serve a model over HTTP: POST /translate in LibreTranslate's shape, /attention, "
                                   "/health, /info, OpenAPI at /docs and a page at / that translates as you type. "
                                   "Concurrent requests are decoded together (dynamic batching). Binds to "
                                   "127.0.0.1 unless --host says otherwise. docs/serving.md.")
    p.add_argument("--checkpoint", required=True,
                   help="run directory (its averaged, else best, else newest checkpoint) or a checkpoint file")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1: this machine only; 0.0.0.0 exposes it to the network)")
    p.add_argument("--port", type=number(int, low=0, below=65536), default=8000, help="port (default 8000)")
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
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"],
                   help="uvicorn's log level (default info: one line per request)")
    add_search_args(p)
    add_weights_arg(p)
    add_device_arg(p, default="cpu")
    p.set_defaults(func=run)
