"""Serving: a trained model behind HTTP, with dynamic batching and a page to try it (`aiayn serve`).

Reading guide:
    batcher.py   `Batcher`: concurrent requests queue up and are decoded together (up to a token budget, waiting a
                 few ms at most) by ONE model thread, so the event loop never waits on the model and throughput
                 under load approaches offline batch translation; the bounded queue, the per-request timeout and the
                 drain on shutdown live here. `BatchConfig` holds its knobs.
    app.py       `create_app(translator, batching, limits)`: the FastAPI app: POST /translate (LibreTranslate's
                 shape), POST /attention, GET /health, GET /info, GET / (the page), /docs; request limits
                 (`Limits`) and the JSON errors.
    page.html    the page: translation as you type, n-best with scores, the attention view of aiayn.viz.
    aiayn/cli/serve.py   the command: loads a checkpoint (safetensors: no pickle), runs uvicorn on 127.0.0.1; on
                 SIGTERM uvicorn lets the requests in flight finish, then the batcher drains and the process exits.

FastAPI and uvicorn are the optional extra `serve` (pip install -e ".[serve]"); nothing outside this package and
aiayn/cli/serve.py imports them. docs/serving.md: routes, shapes, limits, batching, measured throughput.
"""

from aiayn.serve.app import Limits, create_app
from aiayn.serve.batcher import BatchConfig, Batcher

__all__ = ["BatchConfig", "Batcher", "Limits", "create_app"]
