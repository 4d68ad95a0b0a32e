"""Serving: a catalogue of models (one model is a catalogue of one) behind HTTP, with dynamic batching and a page
(`aiayn serve`).

Reading guide:
    batcher.py   `Batcher`: concurrent requests queue up and are decoded together (up to a token budget, waiting a
                 few ms at most) by ONE model thread, so the event loop never waits on the model and throughput
                 under load approaches offline batch translation; the bounded queue, the per-request timeout and the
                 drain on shutdown live here. `BatchConfig` holds its knobs.
    config.py    `ServeConfig`: the catalogue, batching, limits, access, logs and listening address, built once from
                 the flags and handed to every worker.
    catalog.py   which models a server serves and each one's language pair (--checkpoint [SRC:TGT=]PATH, --models).
    app.py       `create_app(models, config)`: the FastAPI app: POST
                 /translate, POST /detect and GET /languages (LibreTranslate's), POST /attention, GET /health, GET
                 /info, GET / (the page), /docs (Swagger UI served locally); request limits (`Limits`), JSON errors.
    models.py    `Models`: the pairs a server translates, one model each, loaded when first asked for and unloaded
                 least recently used first under a budget (--max-models, --max-model-memory); the route of a request
                 (its pair, else a pivot through a shared language); GET /languages; a reload per model.
    pivot.py     a request's texts translated along their routes: grouped by route, a pivot's two models chained;
                 numbers, symbols and glossary terms carried through the word alignments (aiayn.markup).
    segments.py  a plain text's lines and sentences (format "text"; "html" goes through aiayn.markup.html).
    detect.py    `Detector`: "auto" and POST /detect, lingua among every language served, answered as
                 LibreTranslate answers (confidence 0-100; nothing to detect: 0 and the fallback language).
    libre.py     LibreTranslate's side: `LanguagePair` (the pair a model translates), and the request and answer
                 models of every route.
    bodies.py    request bodies: JSON, or a form (urlencoded or multipart) as LibreTranslate's clients send, read
                 within a byte limit into one dict, validated with one clear message a field; their OpenAPI schemas.
    access.py    who may use the server and how much: API keys (--api-keys, read again when the file changes), per-
                 minute budgets per key or address (429 + Retry-After), CORS; ASGI middleware that replays the body.
    observe.py   GET /metrics (Prometheus; summed over worker processes) and one JSON access-log line a request.
    page.html    the page: translation as you type, n-best with scores, the attention view of aiayn.viz; a Files tab.
    files.py     LibreTranslate's file API: /translate_file, /download_file, /frontend/settings.
    workers.py   `serve(spec, workers)`: the server in one process, or N worker processes (each its own model copy
                 and torch threads) behind one listening socket; the main process forwards SIGTERM / Ctrl-C (every
                 worker drains), turns SIGHUP into a reload and starts a dead worker again.
    engines.py   a path turned into the engine that decodes it (`ModelSource`), or an engine in memory (`Loaded`).
    reload.py    a new checkpoint without downtime: SIGHUP or POST /admin/reload -> every worker's loaded models
                 read their checkpoints again and are swapped in between two batches (GET /workers).
    board.py     `WorkerBoard`: what the worker processes share in memory (reload generations, counters, budgets).
    admin.py     the admin key (--admin-key): read from a file or the environment, checked on admin routes.
    state.py     what the routes share: `Server` (the models, the detector, search settings, limits) and `Limits`.
    guard.py     clients that misbehave, bounded at the connection: uvicorn's h11 protocol with a read timeout (408)
                 and a head size limit (431); an unread body's connection is closed after the answer.
    aiayn/cli/serve.py   the command: the flags -> ServeConfig, then workers.serve on 127.0.0.1.

FastAPI, uvicorn, python-multipart, fastapi-offline, prometheus_client and lingua-language-detector are the optional
extra `serve` (pip install -e ".[serve]"); nothing outside this package and aiayn/cli/serve.py imports them.
docs/serving.md: routes, shapes, limits, many pairs, language detection; docs/serving-access.md: access,
misbehaving clients; docs/serving-operations.md: workers, reloading, metrics; docs/serving-performance.md: batching,
measured throughput.
"""

from aiayn.serve.app import create_app
from aiayn.serve.batcher import BatchConfig, Batcher
from aiayn.serve.config import ServeConfig
from aiayn.serve.engines import Loaded, ModelSource
from aiayn.serve.libre import LanguagePair
from aiayn.serve.models import Models
from aiayn.serve.state import Limits

__all__ = ["BatchConfig", "Batcher", "LanguagePair", "Limits", "Loaded", "ModelSource", "Models", "ServeConfig",
           "create_app"]
