"""The HTTP API and the page: `create_app(models, config)` -> a FastAPI app around a catalogue of models (one model:
a catalogue of one); run it with uvicorn, as `aiayn serve` does.

Routes (docs/serving.md has examples); every POST takes JSON or a form (aiayn.serve.bodies), as LibreTranslate's:
    POST /translate   LibreTranslate's: {"q": str | [str], "source", "target", "alternatives": n} -> {"translatedText":
                      str | [str], "alternatives": [...] (n-best after the best, when asked), "detectedLanguage" (when
                      source is "auto": each text's language, aiayn.serve.detect), "scores": [...] (aiayn's: the
                      normalized log-prob of the best then of each alternative), "pivot" (aiayn's: the language a
                      text went through where no model translates its pair directly, aiayn.serve.models)}; a text
                      whose source (given, or detected) is its target comes back unchanged, as LibreTranslate's does;
                      numbers, symbols and glossary terms are carried through the word alignments (aiayn.serve.pivot),
                      format "html" goes through the markup layer (aiayn.markup.html: whole sentences, tags placed)
    POST /detect      LibreTranslate's: {"q": str} -> [{"confidence": 0-100, "language"}, ...] among every language
                      served (as a source or a target)
    GET  /languages   LibreTranslate's: [{"code", "name", "targets"}] for every language served
    POST /attention   {"q": str, "translation": str | null, "source", "target"} -> aiayn.viz.attention's JSON
    GET  /health      {"status": "ok", "queued": sentences}
    GET  /info        models (each pair, checkpoint, loaded or not), search defaults, limits, batching, version
    GET  /metrics     Prometheus metrics (aiayn.serve.observe); API keys, budgets and CORS: aiayn.serve.access
    GET  /            the page: translation as you type, n-best with scores, the attention view
    GET  /docs        Swagger UI, served from this server (no CDN); /redoc likewise; /openapi.json the schema

Every error of every route is JSON {"error": message} (plus "limit" and "max" when a limit was hit): 400 a body that
is empty, not UTF-8, not JSON (or nested deeper than MAX_DEPTH) or an unreadable form, or a language pair not served
(nor through a pivot); 413 a body, text or list over its limit, or more sentences than the whole queue holds; 415 a
Content-Type not read; 422 a well-formed request that is wrong (missing q, empty text, too many alternatives, an
option the pair's model does not have); 500 a pair whose model cannot be loaded (and, as JSON too, any fault of the
server's own); 503 + Retry-After a full queue; 504 no answer within the timeout. A request line or head that is not
HTTP gets a JSON 400 from the connection itself (aiayn.serve.guard).
"""

from __future__ import annotations

import copy
import dataclasses
from contextlib import asynccontextmanager
from importlib import resources

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi_offline import FastAPIOffline
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

import aiayn
from aiayn.decoding.lines import Translation
from aiayn.decoding.translator import Translator
from aiayn.errors import UsageError
from aiayn.markup.html import HtmlTranslation
from aiayn.serve.access import install_access
from aiayn.serve.batcher import QueueFull, RequestTimeout, TooLarge
from aiayn.serve.bodies import ApiError, body_schema, check_text, read_body, validate
from aiayn.serve.buckets import LocalBuckets, SharedBuckets
from aiayn.serve.config import ServeConfig
from aiayn.serve.detect import Detector
from aiayn.serve.files import install_files
from aiayn.serve.libre import (
    AttentionRequest,
    DetectedLanguage,
    DetectRequest,
    ErrorResponse,
    Language,
    TranslateRequest,
    TranslateResponse,
)
from aiayn.serve.models import Models
from aiayn.serve.observe import install_observability
from aiayn.serve.pivot import translate_along
from aiayn.serve.reload import Reloader
from aiayn.serve.segments import Piece, join, text_pieces
from aiayn.serve.state import Server


def _error(status: int, message: str, headers: dict[str, str] | None = None, **extra) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status, headers=headers)


def _server(request: Request) -> Server:
    return request.app.state.server


def _errors(*statuses: int) -> dict:
    """OpenAPI's entries for the errors a route may answer, each in the one error shape."""
    said = {400: "a body that cannot be read, or a language pair not served", 500: "the pair's model cannot be "
            "loaded (the other pairs are served)", 413: "a body, text or list over its "
            "limit", 415: "a Content-Type other than JSON or a form", 422: "a well-formed request that is wrong",
            501: "attention views need aiayn.viz", 503: "the queue is full (Retry-After) or the server is stopping",
            504: "no answer within the timeout"}
    return {status: {"model": ErrorResponse, "description": said[status]} for status in statuses}


BODY_ERRORS = (400, 413, 415, 422)
router = APIRouter()


@router.post("/translate", response_model=TranslateResponse, response_model_exclude_none=True,
             openapi_extra=body_schema(TranslateRequest), responses=_errors(*BODY_ERRORS, 500, 503, 504),
             summary="Translate a text or a list of texts (LibreTranslate's request and response)")
async def translate(request: Request) -> TranslateResponse:
    server = _server(request)
    limits, most = server.limits, server.max_alternatives
    req = validate(TranslateRequest, await read_body(request, limits.max_body_bytes),
                   expected={"q": "a string or a list of strings"})
    texts = [req.q] if isinstance(req.q, str) else req.q
    if not texts:
        raise ApiError(422, "q is an empty list; give at least one text")
    if len(texts) > limits.max_texts:
        raise ApiError(413, f"q has {len(texts)} texts, more than max_texts {limits.max_texts}",
                       limit="max_texts", max=limits.max_texts)
    for i, text in enumerate(texts):
        check_text(text, "q" if isinstance(req.q, str) else f"q[{i}]", limits.max_chars)
    if req.alternatives > most:
        raise ApiError(422, f"alternatives {req.alternatives} is more than this server's beam {server.search.beam} "
                            f"allows (at most {most})", limit="max_alternatives", max=most)
    prefixes = None if req.prefix is None else [req.prefix] if isinstance(req.prefix, str) else req.prefix
    if prefixes is not None and (isinstance(req.prefix, str) != isinstance(req.q, str) or len(prefixes) != len(texts)):
        raise ApiError(422, f"prefix must be like q: a string for a string q, a list of {len(texts)} for a list of "
                            f"{len(texts)}")
    detected = [_source(server, text, req.source, req.target) for text in texts]
    # a text already in its target language comes back as it is (LibreTranslate's answer); the others have a route
    routes = [None if d["language"] == req.target else server.models.route(d["language"], req.target)
              for d in detected]
    server.models.check_options(routes, req.search_options())  # a 422 before any decoding (sampling a CT2 model)
    try:
        texts_in = [_Text(text, route, d["language"], req.format) for text, route, d in zip(texts, routes, detected)]
        glossary = _glossary(req.glossary, req.format)
        nbests = await translate_along(server.models, routes, [t.sentences for t in texts_in], prefixes,
                                       nbest=req.alternatives + 1, options=req.search_options(),
                                       shortlist=req.shortlist, glossary=glossary, markup=req.format == "html")
    except UsageError as e:  # a search option that does not fit (top_k without sampling), a prefix too long or UNK,
        # a glossary whose entries conflict
        raise ApiError(422, str(e)) from None
    answers = [text.joined(found, req.alternatives + 1) for text, found in zip(texts_in, nbests)]
    best = [texts_[0] for texts_, _ in answers]
    alts = [texts_[1:] for texts_, _ in answers] if req.alternatives else None
    scores = [scores_ for _, scores_ in answers]
    detections = [DetectedLanguage(**d) for d in detected] if req.source == "auto" else None
    pivots = [route[0].target if route and len(route) > 1 else None for route in routes]
    if isinstance(req.q, str):
        return TranslateResponse(translatedText=best[0], alternatives=alts and alts[0], scores=scores[0],
                                 detectedLanguage=detections and detections[0], pivot=pivots[0])
    return TranslateResponse(translatedText=best, alternatives=alts, scores=scores, detectedLanguage=detections,
                             pivot=pivots if any(pivots) else None)


def _source(server: Server, text: str, source: str | None, target: str | None) -> dict:
    """{"confidence", "language"}: the source given (confidence 100), else (auto, or absent where several languages
    are read) the language detected among every one served: the first candidate that is the target (the text
    comes back unchanged) or that reaches it, else the detector's best guess (the route then says what is
    served). A language given that is neither a source nor a target here is a 400."""
    sources, codes = server.models.sources(), server.models.codes()
    if source not in (None, "auto"):
        if source not in codes:
            server.models.route(source, target)  # the 400 that names what is served
        return {"confidence": 100.0, "language": source}
    if source is None and len(sources) == 1:
        return {"confidence": 100.0, "language": sources[0]}
    found = server.detector.detect(text)
    for candidate in found:
        if candidate["language"] == target or server.models.reaches(candidate["language"], target):
            return candidate
    reach = [s for s in sources if server.models.reaches(s, target)]
    if found[0]["confidence"] == 0 and reach:  # nothing to detect: the fallback that reaches the target
        return {"confidence": 0.0, "language": "en" if "en" in reach else reach[0]}
    targets = sorted({t for _, t in server.models.entries})
    if target is not None and target not in targets:
        raise ApiError(400, f"target {target!r} is not served: this server translates {server.models.describe()}; "
                            f"send target {_either(targets)}")
    if target is not None and found[0]["language"] not in sources:  # served only as a target, into another one
        raise ApiError(400, f"the text reads as {found[0]['language']} (detected, confidence "
                            f"{found[0]['confidence']:g}), which is not translated into {target} here; send its "
                            f"source language: {_either(reach)}")
    return found[0]  # the route then says it reaches no such target


def _either(codes: list[str]) -> str:
    return " or ".join(f'"{code}"' for code in codes)


class _Text:
    """One text of a request: its sentences to translate, and its answers put back together from their n-best lists
    (plain text: aiayn.serve.segments' lines and sentences; HTML: aiayn.markup.html, tags carried through the
    alignments)."""

    def __init__(self, text: str, route: list | None, language: str, format: str):
        self.text, self.target = text, route and route[-1].target
        self.html = HtmlTranslation(text, language) if route and format == "html" else None
        self.parts = text_pieces(text) if route and self.html is None else [Piece(text, False)]
        self.sentences = self.html.sentences if self.html else [p.text for p in self.parts if p.translate]

    def joined(self, nbests: list[list[Translation]], n: int) -> tuple[list[str], list[float]]:
        """The text's n answers (answer k: each sentence's k-th translation, its best where it has fewer), and their
        scores (the mean of the sentences'; 0 if none)."""
        if not nbests:  # nothing translated (a text in its target language already, tags only): as it is, certain
            return [self.html.finish([], self.target) if self.html else self.text], [0.0]
        ranks = range(min(n, min(len(hs) for hs in nbests)))
        if self.html:
            texts = [self.html.finish([(hs[k].text, hs[k].alignment) for hs in nbests], self.target) for k in ranks]
        else:
            texts = [join(self.parts, [hs[k].text for hs in nbests]) for k in ranks]
        return texts, [sum(hs[k].score for hs in nbests) / max(1, len(nbests)) for k in ranks]


def _glossary(pairs: list | None, format: str):
    """The request's glossary (aiayn.decoding.glossary.Glossary: conflicting entries are a UsageError), or None."""
    if not pairs:
        return None
    if format == "html":
        raise ApiError(422, 'glossary: terms are placed in plain text; send "format": "text" with a glossary')
    from aiayn.decoding.glossary import Glossary

    return Glossary.of(pairs)


@router.post("/detect", response_model=list[DetectedLanguage], openapi_extra=body_schema(DetectRequest),
             responses=_errors(*BODY_ERRORS), summary="The text's language among every language served (source or "
                                                      "target), up to three candidates best first (confidence 0-100)")
async def detect(request: Request) -> JSONResponse:
    server = _server(request)
    req = validate(DetectRequest, await read_body(request, server.limits.max_body_bytes))
    check_text(req.q, "q", server.limits.max_chars)
    return JSONResponse(server.detector.detect(req.q))


@router.get("/languages", response_model=list[Language], summary="Every language served, each with the languages "
                                                                  "it is translated into (LibreTranslate's list)")
async def languages(request: Request) -> JSONResponse:
    return JSONResponse(_server(request).models.languages())


@router.post("/attention", openapi_extra=body_schema(AttentionRequest),
             responses=_errors(*BODY_ERRORS, 500, 501, 503),
             summary="Every head's attention weights for one sentence (aiayn.viz.attention's JSON)")
async def attention(request: Request) -> JSONResponse:
    server = _server(request)
    req = validate(AttentionRequest, await read_body(request, server.limits.max_body_bytes))
    check_text(req.q, "q", server.limits.max_chars)
    if req.translation is not None:
        check_text(req.translation, "translation", server.limits.max_chars)
    try:
        from aiayn.viz.attention import attention_data
    except ImportError as e:
        raise ApiError(501, f"attention views need aiayn.viz ({e})") from None
    source = _source(server, req.q, req.source, req.target)["language"]
    route = server.models.route(source, req.target)
    if len(route) > 1:
        raise ApiError(422, f"{source} -> {route[-1].target} is translated through {route[0].target} (two models); "
                            "attention is shown for one model: ask for a pair served directly")
    batcher = await server.models.batcher(route[0])
    if not isinstance(batcher.translator, Translator):  # aiayn's own engine alone records attention
        raise ApiError(422, f"the {route[0].source} -> {route[0].target} model is decoded by CTranslate2, which does "
                            "not give its attention weights: serve the run itself for attention views")
    # On the model's thread: recording switches flags on the shared model, which no batch may see meanwhile.
    data = await batcher.run(lambda: attention_data(batcher.translator, None, req.q, req.translation))
    return JSONResponse(data)


@router.get("/health", summary="Liveness: ok, and how many sentences are queued")
async def health(request: Request) -> JSONResponse:
    models = _server(request).models
    if models.closing:
        return JSONResponse({"status": "shutting down", "queued": models.queued}, status_code=503)
    return JSONResponse({"status": "ok", "queued": models.queued})


@router.get("/info", summary="Model config, languages, vocabulary size, search defaults, limits, batching, version")
async def info(request: Request) -> JSONResponse:
    server = _server(request)
    models = server.models
    return JSONResponse({**server.info, "models": [entry.describe() for entry in models.entries.values()],
                         "loaded_models": len(models.loaded()), "stats": models.stats})


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def index(request: Request) -> HTMLResponse:
    return HTMLResponse(_server(request).page, headers={"Content-Security-Policy": PAGE_CSP})


# ---------------------------------------------------------------------------------------------------------
# Errors as JSON.


async def _api_error(request: Request, e: ApiError) -> JSONResponse:
    return _error(e.status, str(e), e.headers, **e.extra)


async def _queue_full(request: Request, e: QueueFull) -> JSONResponse:
    limit = {} if e.max_queue is None else {"limit": "max_queue", "max": e.max_queue}  # None: shutting down
    return _error(503, str(e), {"Retry-After": str(e.retry_after_s)}, **limit)


async def _too_large(request: Request, e: TooLarge) -> JSONResponse:
    return _error(413, str(e), limit="max_queue", max=e.max_queue)


async def _timed_out(request: Request, e: RequestTimeout) -> JSONResponse:
    return _error(504, str(e), limit="timeout_s", max=e.timeout_s)


async def _server_fault(request: Request, e: Exception) -> JSONResponse:
    """Any other exception: a JSON 500 too (Starlette still logs its traceback)."""
    return _error(500, f"the server failed on this request ({type(e).__name__}); its log says where")


async def _client_gone(request: Request, e: ClientDisconnect) -> JSONResponse:
    """A client that went away while sending its body (or was cut off by the read timeout, aiayn.serve.guard) is
    nobody's fault: no traceback in the log (a client could otherwise fill it); the answer goes nowhere."""
    return _error(400, "the client went away before its request arrived whole")


async def _http_error(request: Request, e: HTTPException) -> JSONResponse:  # 404, 405 as JSON too
    return _error(e.status_code, str(e.detail), getattr(e, "headers", None))


async def _invalid(request: Request, e: RequestValidationError) -> JSONResponse:
    return _error(422, "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors()))


def create_app(models: Models, config: ServeConfig | None = None, reloader: Reloader | None = None,
               buckets: LocalBuckets | SharedBuckets | None = None) -> FastAPI:
    """The API and page around `models` (a catalogue: aiayn.serve.models; a server of one model is a catalogue of
    one), with `config`'s limits, access and logs (aiayn.serve.config; the catalogue and batching are the models').
    The search settings are the models' (requests choose the n-best size and aiayn's decoding fields). Batchers
    start with the first request and drain at shutdown. `reloader` (aiayn.serve.reload): POST /admin/reload,
    GET /workers, and the models read again when a reload is asked for. buckets: where the per-minute budgets live
    (aiayn.serve.buckets; workers share one SharedBuckets, so a client's budget holds across them)."""
    config = config or ServeConfig()
    search, limits = models.search, config.limits

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if reloader is not None:
            reloader.start(app)
        yield
        if reloader is not None:
            await reloader.stop()
        await models.close()  # uvicorn has let the requests in flight finish first: they needed the batchers

    # FastAPIOffline: FastAPI whose /docs and /redoc load Swagger UI and ReDoc from this server, not from a CDN.
    # validatorUrl None: Swagger UI would otherwise send the schema's address to an online validator.
    app = FastAPIOffline(title="aiayn translation server", version=aiayn.__version__, lifespan=lifespan,
                         swagger_ui_parameters={"validatorUrl": None},
                         description="The Transformer of 'Attention Is All You Need': translation with dynamic "
                                     f"batching, {models.describe()}. POST /translate, /detect and GET /languages "
                                     "speak LibreTranslate's API; every POST takes JSON or a form.")
    static_info = {
        "name": "aiayn",
        "version": aiayn.__version__,
        "search": dataclasses.asdict(search),
        "max_alternatives": search.beam - 1,
        "limits": {**dataclasses.asdict(limits), "max_body_bytes": limits.max_body_bytes},
        "batching": dataclasses.asdict(models.batching),
        "budget": {"max_models": models.max_models or None, "max_model_memory_mb": models.max_bytes // 2**20 or None},
        "api_key_required": bool(config.access.api_keys),  # the page asks for one (LibreTranslate: keyRequired)
    }
    app.state.server = Server(models, Detector(models.codes()), search, limits, static_info, _page())
    app.openapi = _openapi(app, app.state.server)
    app.include_router(router)
    install_files(app, config.files)  # LibreTranslate's file API
    if reloader is not None:
        app.include_router(reloader.router)
    for error, handler in [(ApiError, _api_error), (QueueFull, _queue_full), (TooLarge, _too_large),
                           (RequestTimeout, _timed_out), (HTTPException, _http_error),
                           (RequestValidationError, _invalid), (ClientDisconnect, _client_gone),
                           (Exception, _server_fault)]:
        app.add_exception_handler(error, handler)
    install_access(app, config.access, limits.max_body_bytes, buckets=buckets)  # keys, budgets, CORS
    install_observability(app, config.observe)  # /metrics, access log: last, so it sees every refusal
    return app


def _openapi(app: FastAPI, server: Server):
    """app.openapi, saying what this server accepts: its languages as enums, its limits as maxLength, maxItems
    and maximum (so Swagger UI offers the pairs, and a fuzzer's valid requests are mostly translated)."""
    models, limits = server.models, server.limits
    narrow = {"q": {"maxLength": limits.max_chars, "minLength": 1, "maxItems": limits.max_texts, "minItems": 1},
              "translation": {"maxLength": limits.max_chars, "minLength": 1},
              "source": {"enum": ["auto", *models.codes()]}, "target": {"enum": models.codes()},
              "alternatives": {"maximum": server.max_alternatives},
              "prefix": {"maxLength": limits.max_chars, "maxItems": limits.max_texts}}

    def openapi() -> dict:
        if app.openapi_schema is None:
            schema = copy.deepcopy(FastAPI.openapi(app))  # the routes' openapi_extra is shared by every app
            for path in ("/translate", "/detect", "/attention"):
                for media in schema["paths"][path]["post"]["requestBody"]["content"].values():
                    for name, prop in media["schema"]["properties"].items():
                        for option in prop.get("anyOf", [prop]):
                            _constrain(option, narrow.get(name, {}))
            app.openapi_schema = schema
        return app.openapi_schema
    return openapi


def _constrain(option: dict, constraints: dict) -> None:
    """Add to one JSON-schema type option the constraints that apply to its type."""
    kind = option.get("type")
    applies = {"string": ("maxLength", "minLength", "enum"), "integer": ("maximum",), "array": ("maxItems", "minItems")}
    option.update({k: v for k, v in constraints.items() if k in applies.get(kind, ())})
    if kind == "array" and "items" in option:  # a tuple (glossary's pairs) has prefixItems instead
        _constrain(option["items"], constraints)


# The page talks only to this server: inline script and style, requests to 'self', nothing else.
PAGE_CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'"


def _page() -> str:
    """page.html with the attention viewer of aiayn.viz inlined (or a note where aiayn.viz is missing)."""
    page = resources.files("aiayn.serve").joinpath("page.html").read_text(encoding="utf-8")
    try:
        from aiayn.viz.attention import view_template

        viewer = view_template()
    except ImportError:
        viewer = "<script>window.renderAttention = null;</script>"
    return page.replace("<!-- ATTENTION VIEWER -->", viewer)
