"""Serving: a trained model behind HTTP, with dynamic batching and a page to try it (`aiayn serve`).

Reading guide:
    batcher.py   `Batcher`: concurrent requests queue up and are decoded together (up to a token budget, waiting a
                 few ms at most) by ONE model thread, so the event loop never waits on the model and throughput
                 under load approaches offline batch translation; the bounded queue, the per-request timeout and the
                 drain on shutdown live here. `BatchConfig` holds its knobs.
    app.py       `create_app(translator, batching, limits)`: the FastAPI app: POST /translate (LibreTranslate's
                 shape), POST /attention, GET /health, GET /info, GET / (the page), /docs; request limits
                 (`Limits`) and the JSON errors.
    access.py    who may use the server and how much: API keys (--api-keys, read again when the file changes), per-
                 minute budgets per key or address (429 + Retry-After), CORS; ASGI middleware that replays the body.
    observe.py   GET /metrics (Prometheus; summed over worker processes) and one JSON access-log line a request.
    page.html    the page: translation as you type, n-best with scores, the attention view of aiayn.viz.
    aiayn/cli/serve.py   the command: loads a checkpoint (safetensors: no pickle), runs uvicorn on 127.0.0.1; on
                 SIGTERM uvicorn lets the requests in flight finish, then the batcher drains and the process exits.

FastAPI, uvicorn and prometheus_client are the optional extra `serve` (pip install -e ".[serve]"); nothing outside
this package and aiayn/cli/serve.py imports them. docs/serving.md: routes, shapes, limits, batching, access, metrics,
measured throughput.
"""

from aiayn.serve.app import Limits, create_app
from aiayn.serve.batcher import BatchConfig, Batcher

__all__ = ["BatchConfig", "Batcher", "Limits", "create_app"]
