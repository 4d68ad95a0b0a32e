"""The HTTP API and the page: `create_app(translator)` -> a FastAPI app (run it with uvicorn; `aiayn serve` does).

Routes (docs/serving.md has examples):
    POST /translate   LibreTranslate's shape: {"q": str | [str], "alternatives": n} -> {"translatedText": str | [str],
                      "alternatives": [...] (n-best after the best, when asked), "scores": [...] (aiayn's: the
                      normalized log-prob of the best then of each alternative)}. "source", "target" and "format"
                      ("text") are accepted as LibreTranslate clients send them; the model translates its one pair.
    POST /attention   {"q": str, "translation": str | null} -> aiayn.viz.attention.attention_data's JSON
    GET  /health      {"status": "ok", "queued": sentences}
    GET  /info        model config, vocabulary size, search defaults, limits, batching, version
    GET  /metrics     Prometheus metrics (aiayn.serve.observe); API keys, budgets and CORS: aiayn.serve.access
    GET  /            the page: translation as you type, n-best with scores, the attention view
    GET  /docs        OpenAPI (Swagger UI; /openapi.json is the schema itself)

Every error is JSON {"error": message} (plus "limit" and "max" when a limit was hit): 400 a body that is not UTF-8
or not JSON, 413 a body, text or list over its limit, 422 a well-formed request that is wrong (missing q, empty text,
too many alternatives), 503 + Retry-After a full queue, 504 no answer within the timeout. Bodies are read here, not
by FastAPI, so that each of these has its own clear message; the schemas still appear in the OpenAPI document.
"""

from __future__ import annotations

import dataclasses
import json
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib import resources
from typing import Literal

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException

import aiayn
from aiayn.model import expected_parameters
from aiayn.serve.access import AccessConfig, install_access
from aiayn.serve.batcher import BatchConfig, Batcher, QueueFull, RequestTimeout
from aiayn.serve.observe import ObserveConfig, install_observability
from aiayn.serve.reload import Reloader
from aiayn.translate import Translator


@dataclass(frozen=True)
class Limits:
    """How much one request may ask for (larger -> 413 naming the limit)."""

    max_chars: int = 1000  # characters per text
    max_texts: int = 64  # texts per request

    def __post_init__(self) -> None:
        if self.max_chars < 1 or self.max_texts < 1:
            raise ValueError(f"limits must be >= 1: {self}")

    @property
    def max_body_bytes(self) -> int:
        """Room for max_texts texts of max_chars characters, each JSON-escaped (\\uXXXX: 6 bytes a character)."""
        return 6 * self.max_chars * self.max_texts + 4096


class TranslateRequest(BaseModel):
    """LibreTranslate's request (unknown fields such as api_key are ignored)."""

    model_config = ConfigDict(extra="ignore")
    q: str | list[str] = Field(description="a text, or a list of texts translated independently")
    source: str = Field("auto", description="accepted for LibreTranslate clients; the model has one language pair")
    target: str | None = Field(None, description="accepted for LibreTranslate clients; see /info")
    format: Literal["text"] = Field("text", description="only plain text")
    alternatives: int = Field(0, ge=0, description="n-best: this many further translations, best first (< beam)")


class TranslateResponse(BaseModel):
    translatedText: str | list[str]
    alternatives: list[str] | list[list[str]] | None = None
    scores: list[float] | list[list[float]] = Field(description="normalized log-prob of translatedText, then of "
                                                                "each alternative (a list per text for a list q)")


class AttentionRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    q: str = Field(description="one source sentence")
    translation: str | None = Field(None, description="the translation to show attention for; null: the model's own")


class ApiError(Exception):
    """An error answered as {"error": message, ...extra} with `status`."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None, **extra):
        super().__init__(message)
        self.status, self.headers, self.extra = status, headers, extra


def _error(status: int, message: str, headers: dict[str, str] | None = None, **extra) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status, headers=headers)


def _body_schema(model: type[BaseModel]) -> dict:
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": model.model_json_schema()}}}}


async def _read_json(request: Request, max_bytes: int):
    """The body as JSON, within max_bytes, with a clear error for each way it can be wrong."""
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > max_bytes:
        raise ApiError(413, f"the body has {length} bytes, more than max_body_bytes {max_bytes}",
                       limit="max_body_bytes", max=max_bytes)
    body, size = bytearray(), 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise ApiError(413, f"the body is larger than max_body_bytes {max_bytes}", limit="max_body_bytes",
                           max=max_bytes)
        body += chunk
    if not body.strip():
        raise ApiError(400, 'the body is empty; send JSON, e.g. {"q": "Hello"}')
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ApiError(400, f"the body is not valid UTF-8 (bad byte at offset {e.start}); send UTF-8 JSON") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ApiError(400, f'the body is not JSON ({e.msg} at line {e.lineno} column {e.colno}); send JSON, e.g. '
                            '{"q": "Hello"} with Content-Type: application/json') from None


# What a field must be, said once (pydantic reports each member of a union on its own).
EXPECTED = {"q": "a string or a list of strings"}


def _validate(model: type[BaseModel], obj) -> BaseModel:
    if not isinstance(obj, dict):
        raise ApiError(422, 'the body must be a JSON object, e.g. {"q": "Hello"}')
    try:
        return model.model_validate(obj)
    except ValidationError as e:
        problems: dict[str, str] = {}
        for err in e.errors(include_url=False, include_input=False):
            field = str(err["loc"][0]) if err["loc"] else "body"
            if model is TranslateRequest and field in EXPECTED:
                problems[field] = f"{field} must be {EXPECTED[field]}"
            else:
                problems.setdefault(field, f"{field}: {err['msg']}")
        raise ApiError(422, "; ".join(problems.values())) from None


def _check_text(text: str, where: str, limits: Limits) -> None:
    if not text.strip():
        raise ApiError(422, f"{where} is empty; give text to translate")
    if len(text) > limits.max_chars:
        raise ApiError(413, f"{where} has {len(text)} characters, more than max_chars {limits.max_chars}",
                       limit="max_chars", max=limits.max_chars)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # JSON may escape lone surrogates (\ud800), which are not characters
        raise ApiError(422, f"{where} is not valid Unicode (it holds a lone surrogate)") from None


@dataclass
class Server:
    """What the routes share (app.state.server): the translator, its batcher, the limits, the static answers."""

    translator: Translator
    batcher: Batcher
    limits: Limits
    info: dict
    page: str

    @property
    def max_alternatives(self) -> int:
        return self.translator.search.beam - 1


def _server(request: Request) -> Server:
    return request.app.state.server


router = APIRouter()


@router.post("/translate", response_model=TranslateResponse, response_model_exclude_none=True,
             openapi_extra=_body_schema(TranslateRequest),
             summary="Translate a text or a list of texts (LibreTranslate's request and response)")
async def translate(request: Request) -> TranslateResponse:
    server = _server(request)
    limits, most = server.limits, server.max_alternatives
    req = _validate(TranslateRequest, await _read_json(request, limits.max_body_bytes))
    texts = [req.q] if isinstance(req.q, str) else req.q
    if not texts:
        raise ApiError(422, "q is an empty list; give at least one text")
    if len(texts) > limits.max_texts:
        raise ApiError(413, f"q has {len(texts)} texts, more than max_texts {limits.max_texts}",
                       limit="max_texts", max=limits.max_texts)
    for i, text in enumerate(texts):
        _check_text(text, "q" if isinstance(req.q, str) else f"q[{i}]", limits)
    if req.alternatives > most:
        raise ApiError(422, f"alternatives {req.alternatives} is more than this server's beam "
                            f"{server.translator.search.beam} allows (at most {most})", limit="max_alternatives",
                       max=most)
    nbests = await server.batcher.submit(texts, nbest=req.alternatives + 1)
    best = [hs[0].text for hs in nbests]
    alts = [[h.text for h in hs[1:]] for hs in nbests] if req.alternatives else None
    scores = [[h.score for h in hs] for hs in nbests]
    if isinstance(req.q, str):
        return TranslateResponse(translatedText=best[0], alternatives=alts and alts[0], scores=scores[0])
    return TranslateResponse(translatedText=best, alternatives=alts, scores=scores)


@router.post("/attention", openapi_extra=_body_schema(AttentionRequest),
             summary="Every head's attention weights for one sentence (aiayn.viz.attention's JSON)")
async def attention(request: Request) -> JSONResponse:
    server = _server(request)
    req = _validate(AttentionRequest, await _read_json(request, server.limits.max_body_bytes))
    _check_text(req.q, "q", server.limits)
    if req.translation is not None:
        _check_text(req.translation, "translation", server.limits)
    try:
        from aiayn.viz.attention import attention_data
    except ImportError as e:
        raise ApiError(501, f"attention views need aiayn.viz ({e})") from None
    # On the model's thread: recording switches flags on the shared model, which no batch may see meanwhile.
    data = await server.batcher.run(attention_data, server.translator, None, req.q, req.translation)
    return JSONResponse(data)


@router.get("/health", summary="Liveness: ok, and how many sentences are queued")
async def health(request: Request) -> JSONResponse:
    batcher = _server(request).batcher
    if batcher.closing:
        return JSONResponse({"status": "shutting down", "queued": batcher.queued}, status_code=503)
    return JSONResponse({"status": "ok", "queued": batcher.queued})


@router.get("/info", summary="Model config, vocabulary size, search defaults, limits, batching, version")
async def info(request: Request) -> JSONResponse:
    server = _server(request)
    return JSONResponse({**server.info, "stats": dict(server.batcher.stats)})


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def index(request: Request) -> HTMLResponse:
    return HTMLResponse(_server(request).page, headers={"Content-Security-Policy": PAGE_CSP})


# ---------------------------------------------------------------------------------------------------------
# Errors as JSON.


async def _api_error(request: Request, e: ApiError) -> JSONResponse:
    return _error(e.status, str(e), e.headers, **e.extra)


async def _queue_full(request: Request, e: QueueFull) -> JSONResponse:
    most = _server(request).batcher.config.max_queue
    return _error(503, str(e), {"Retry-After": str(e.retry_after_s)}, limit="max_queue", max=most)


async def _timed_out(request: Request, e: RequestTimeout) -> JSONResponse:
    return _error(504, str(e), limit="timeout_s", max=_server(request).batcher.config.timeout_s)


async def _http_error(request: Request, e: HTTPException) -> JSONResponse:  # 404, 405 as JSON too
    return _error(e.status_code, str(e.detail), getattr(e, "headers", None))


async def _invalid(request: Request, e: RequestValidationError) -> JSONResponse:
    return _error(422, "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors()))


def model_info(translator: Translator, checkpoint: str | None) -> dict:
    """What /info says about the model served (a reload replaces it)."""
    return {"checkpoint": checkpoint, "model": translator.cfg.to_dict(),
            "parameters": expected_parameters(translator.cfg), "vocab_size": len(translator.vocab),
            "device": str(translator.device)}


def create_app(translator: Translator, batching: BatchConfig | None = None, limits: Limits | None = None,
               checkpoint: str | None = None, access: AccessConfig | None = None,
               observe: ObserveConfig | None = None, reloader: Reloader | None = None) -> FastAPI:
    """The API and page around one Translator (its search settings are the server's; requests choose only the
    n-best size). `app.state.server.batcher` starts with the first request and drains at shutdown. `reloader`
    (aiayn.serve.reload): POST /admin/reload, GET /workers, and the swap of the model when a reload is asked for."""
    batching, limits = batching or BatchConfig(), limits or Limits()
    batcher = Batcher(translator, batching)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if reloader is not None:
            reloader.start(app)
        yield
        if reloader is not None:
            await reloader.stop()
        await batcher.close()  # uvicorn has let the requests in flight finish first: they needed the batcher

    app = FastAPI(title="aiayn translation server", version=aiayn.__version__, lifespan=lifespan,
                  description="The Transformer of 'Attention Is All You Need': translation with dynamic batching. "
                              "POST /translate takes LibreTranslate's request.")
    static_info = {
        "name": "aiayn",
        "version": aiayn.__version__,
        **model_info(translator, checkpoint),
        "search": dataclasses.asdict(translator.search),
        "max_alternatives": translator.search.beam - 1,
        "limits": {**dataclasses.asdict(limits), "max_body_bytes": limits.max_body_bytes},
        "batching": dataclasses.asdict(batching),
    }
    app.state.server = Server(translator, batcher, limits, static_info, _page())
    app.include_router(router)
    if reloader is not None:
        app.include_router(reloader.router)
    for error, handler in [(ApiError, _api_error), (QueueFull, _queue_full), (RequestTimeout, _timed_out),
                           (HTTPException, _http_error), (RequestValidationError, _invalid)]:
        app.add_exception_handler(error, handler)
    install_access(app, access or AccessConfig(), limits.max_body_bytes)  # keys, budgets, CORS
    install_observability(app, observe or ObserveConfig())  # /metrics, access log: last, so it sees every refusal
    return app


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
