"""LibreTranslate's file API (`install_files(app, config)`): documents translated whole, in their own format.

    POST /translate_file        multipart `file`, `source` (or "auto"), `target`, `api_key` -> {"translatedFileUrl":
                                absolute URL}; the document goes through aiayn.documents.translate_document, its
                                sentences sent in chunks through the pair's batcher, as /translate's are
    GET  /download_file/<name>  the translation, as an attachment named without the internal id (LibreTranslate's
                                `<id>.report_es.docx` downloads as `report_es.docx`); a name that is not one of ours
                                is a 400, one expired or never made a 404
    GET  /frontend/settings     LibreTranslate's page settings: filesTranslation, supportedFilesFormat, limits, keys

Uploads and translations live in one folder (FileConfig.folder) that every worker process of a server shares, and
are deleted FileConfig.keep_s (30 minutes) after they were written (swept at every upload and download, and never
served after that time). A file has its own limits: its size, its
characters, its time; its chunks wait for room in the queue instead of being refused, so the line API's max_queue and
timeout_s bound each chunk, not the file. Keys and budgets: the access gate lets this route check them itself (the
key may follow the file in the form), and a file is charged as a /translate request carrying its text is: one
request and the characters it sends to translation (aiayn.documents.document_chars).
"""

from __future__ import annotations

import asyncio
import re
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse
from starlette.datastructures import Headers, UploadFile

from aiayn.documents import SUPPORTED, DocumentLimits, document_chars, format_of, translate_document
from aiayn.errors import DataError, UsageError
from aiayn.serve.access import AccessGate, BodyFields, Refusal, client_address, presented_key
from aiayn.serve.batcher import QueueFull, RequestTimeout, TooLarge
from aiayn.serve.bodies import ApiError
from aiayn.serve.libre import ErrorResponse
from aiayn.serve.pivot import translate_along

MiB = 2**20


@dataclass(frozen=True)
class FileConfig:
    """Where files live and how much one may ask for."""

    folder: Path = Path(tempfile.gettempdir()) / "aiayn-serve-files"  # shared by every worker of a server
    max_file_bytes: int = 20 * MiB  # an upload larger -> 413
    max_chars: int = 1_000_000  # characters of text a file sends to translation; more -> 413
    timeout_s: float = 600.0  # a file not translated in this time -> 504
    keep_s: float = 1800.0  # uploads and translations are deleted this long after they were written
    chunk_sentences: int = 32  # sentences per submission to the batcher
    enabled: bool = True  # False: /translate_file answers 403, as LibreTranslate's --disable-files-translation

    def __post_init__(self) -> None:
        if min(self.max_file_bytes, self.max_chars, self.chunk_sentences) < 1 or self.timeout_s <= 0 \
                or self.keep_s <= 0:
            raise ValueError(f"bad file settings: {self}")


NAME = re.compile(r"[0-9a-f]{32}\.[A-Za-z0-9][A-Za-z0-9._-]{0,200}")


def safe_name(filename: str) -> str:
    """A client's file name reduced to letters, digits, '.', '_' and '-' (werkzeug's secure_filename's idea)."""
    path = Path(filename.replace("\\", "/"))
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", path.stem).strip("._")[-120:] or "file"
    return stem + re.sub(r"[^A-Za-z0-9.]+", "", path.suffix)


def translated_name(upload: str, target: str) -> str:
    """`<id>.report.docx` -> `<id>.report_es.docx` (argos-translate-files' name, which LibreTranslate serves)."""
    path = Path(upload)
    return f"{path.stem}_{target}{path.suffix}"


def sweep(folder: Path, keep_s: float, now: float | None = None) -> int:
    """Delete the files in `folder` written more than keep_s ago; return how many."""
    now, gone = time.time() if now is None else now, 0
    for path in folder.glob("*"):
        try:
            if path.is_file() and now - path.stat().st_mtime > keep_s:
                path.unlink()
                gone += 1
        except FileNotFoundError:  # another worker swept it first
            pass
    return gone


def _error(status: int, message: str, **extra) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


def _gate(app) -> AccessGate | None:
    """The app's access gate (aiayn.serve.access), found in its middleware stack; None where there is none."""
    layer = app.middleware_stack
    while layer is not None and not isinstance(layer, AccessGate):
        layer = getattr(layer, "app", None)
    return layer


class Charge:
    """A file's key check and budget charge, as the access gate does them for the other POSTs."""

    def __init__(self, request: Request, api_key: str | None):
        self.gate, self.client = _gate(request.app), None
        if self.gate is None:
            return
        config = self.gate.config
        self.req_limit, self.char_limit = config.req_limit, config.char_limit
        if self.gate.keys is None:
            self.client = "address " + client_address(request.scope)
            return
        key = presented_key(Headers(scope=request.scope), BodyFields(api_key or None))
        found = None if key is None else self.gate.keys.lookup(key)
        if found is None:
            from aiayn.serve.access import MISSING_KEY

            raise ApiError(403, MISSING_KEY if key is None else "the API key is not valid")
        self.client = found.id
        self.req_limit = self.req_limit if found.req_limit is None else found.req_limit
        self.char_limit = self.char_limit if found.char_limit is None else found.char_limit

    def __call__(self, chars: int) -> Refusal | None:
        if self.client is None:
            return None
        return self.gate.budgets.charge(self.client, self.req_limit, self.char_limit, chars)


class Refused(Exception):
    def __init__(self, refusal: Refusal):
        super().__init__(refusal.message)
        self.refusal = refusal


async def _chunk(models, route, sentences: list[str], deadline: float, room: asyncio.Semaphore) -> list:
    """One chunk through the route's batcher, each translation with its word alignment (composed through a pivot),
    so the markup layer places formatting where the words went; a full queue or a chunk's timeout waits and tries
    again until the file's deadline."""
    async with room:
        while True:
            try:
                found = await translate_along(models, [route], [sentences], None, 1, {}, None, markup=True)
                return [(hs[0].text, hs[0].alignment) for hs in found[0]]
            except (QueueFull, RequestTimeout) as e:
                wait = getattr(e, "retry_after_s", 0.2)
                if time.monotonic() + wait >= deadline:
                    raise
                await asyncio.sleep(wait)


def _translator(server, loop, target: str, config: FileConfig, deadline: float, chosen: dict):
    """translate(sentences) for translate_document, run on a worker thread: the sentences in chunks (sorted by length),
    several in the queue at once (at most half the queue), through the route of chosen["source"] (set by the detector
    for auto)."""
    models = server.models

    def translate(sentences: list[str]) -> list:
        source = chosen["source"]
        if source == target or not sentences:  # a document already in the target language comes back as it is
            return [(s, None) for s in sentences]
        route = models.route(source, target)
        size = max(1, min(config.chunk_sentences, models.batching.max_queue // 2))
        room = max(1, models.batching.max_queue // (2 * size))

        # chunks of sentences of like length (less padding in a batch), answers put back in the document's order
        order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))

        async def everything():
            gate = asyncio.Semaphore(room)
            parts = [_chunk(models, route, [sentences[i] for i in order[k:k + size]], deadline, gate)
                     for k in range(0, len(order), size)]
            out = [None] * len(sentences)
            for i, t in zip(order, [t for part in await asyncio.gather(*parts) for t in part]):
                out[i] = t
            return out

        future = asyncio.run_coroutine_threadsafe(everything(), loop)
        try:
            return future.result(timeout=max(0.0, deadline - time.monotonic()) + 5)
        except TimeoutError:
            future.cancel()  # its chunks leave the queue
            raise

    return translate


def _detector(server, target: str, chosen: dict):
    """detect(text) for an "auto" source: the first candidate that is the target or reaches it, else the best."""

    def detect(text: str) -> str:
        found = server.detector.detect(text)
        pick = next((c for c in found if c["language"] == target or server.models.reaches(c["language"], target)),
                    found[0])
        chosen["source"] = pick["language"]
        return pick["language"]

    return detect


async def _read_form(request: Request, config: FileConfig) -> tuple[UploadFile, str | None, str | None, str | None]:
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > config.max_file_bytes + 65536:
        raise ApiError(413, f"the file is larger than max_file_bytes {config.max_file_bytes}",
                       limit="max_file_bytes", max=config.max_file_bytes)
    if not request.headers.get("content-type", "").lower().startswith("multipart/form-data"):
        raise ApiError(400, "Invalid request: send the file as multipart/form-data (fields file, source, target)")
    try:
        form = await request.form(max_files=1, max_fields=16)
    except Exception as e:  # starlette's MultiPartException, a broken body
        raise ApiError(400, f"Invalid request: the form cannot be read ({e})") from None
    file = form.get("file")
    if not isinstance(file, UploadFile):
        raise ApiError(400, "Invalid request: missing file parameter")
    fields = {name: form.get(name) for name in ("source", "target", "api_key")}
    for name in ("source", "target"):
        if not isinstance(fields[name], str) or not fields[name]:
            raise ApiError(400, f"Invalid request: missing {name} parameter")
    key = fields["api_key"] if isinstance(fields["api_key"], str) else None
    return file, fields["source"], fields["target"], key


def _save(file: UploadFile, config: FileConfig) -> Path:
    """The upload written into the folder as `<id>.<safe name>`; over max_file_bytes -> 413, nothing kept."""
    config.folder.mkdir(parents=True, exist_ok=True)
    path = config.folder / f"{uuid.uuid4().hex}.{safe_name(file.filename or '')}"
    size = 0
    with open(path, "wb") as out:
        while block := file.file.read(MiB):
            size += len(block)
            if size > config.max_file_bytes:
                out.close()
                path.unlink()
                raise ApiError(413, f"the file is larger than max_file_bytes {config.max_file_bytes}",
                               limit="max_file_bytes", max=config.max_file_bytes)
            out.write(block)
    return path


def _translate(server, loop, upload: Path, out: Path, source: str, target: str, config: FileConfig, charge) -> int:
    """On a worker thread: the budget charged with the file's characters, then the document translated."""
    limits = DocumentLimits(max_file_bytes=config.max_file_bytes, max_chars=config.max_chars)
    chars = document_chars(upload, limits)
    if chars > config.max_chars:
        raise ApiError(413, f"the file's text is {chars} characters, more than max_chars {config.max_chars}",
                       limit="file_max_chars", max=config.max_chars)
    refusal = charge(chars)
    if refusal is not None:
        raise Refused(refusal)
    chosen = {"source": source}
    deadline = time.monotonic() + config.timeout_s
    return translate_document(upload, out, _translator(server, loop, target, config, deadline, chosen), source,
                              target, limits, detect=_detector(server, target, chosen))


def _errors(**said: str) -> dict:
    """OpenAPI's entries for a file route's errors, each in the one error shape."""
    return {int(status[1:]): {"model": ErrorResponse, "description": text} for status, text in said.items()}


UPLOAD = {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
    "type": "object", "required": ["file", "source", "target"],
    "properties": {"file": {"type": "string", "format": "binary"}, "source": {"type": "string"},
                   "target": {"type": "string"}, "api_key": {"type": "string"}}}}}}}
TRANSLATED = {200: {"description": "where to download the translation", "content": {"application/json": {"schema": {
    "type": "object", "properties": {"translatedFileUrl": {"type": "string"}}}}}}}


def files_router(config: FileConfig) -> APIRouter:
    router = APIRouter()

    @router.post("/translate_file", openapi_extra=UPLOAD, responses={**TRANSLATED, **_errors(
        s400="no file, source or target; a format not supported; a language not served; a file that is corrupt",
        s403="no API key or a wrong one, where the server has keys; files translation disabled",
        s413="a file or its text over its limit", s429="a key's or address's budget a minute spent (Retry-After)",
        s504="not translated within the file's timeout")},
        summary="Translate a document (LibreTranslate's): multipart file, source (or auto), target, api_key -> "
                "{translatedFileUrl}")
    async def translate_file(request: Request):
        server = request.app.state.server
        if not config.enabled:
            raise ApiError(403, "Files translation are disabled on this server (aiayn serve "
                                "--disable-files-translation)")
        file, source, target, key = await _read_form(request, config)
        charge = Charge(request, key)
        if not file.filename:
            raise ApiError(400, "Invalid request: empty file")
        try:
            format_of(file.filename)
        except UsageError as e:
            raise ApiError(400, f"Invalid request: file format not supported ({e})") from None
        if target not in server.models.codes():
            raise ApiError(400, f"{target} is not supported")
        if source not in ("auto", target):
            server.models.route(source, target)  # the 400 that names what is served
        await asyncio.to_thread(sweep, config.folder, config.keep_s)
        upload = await asyncio.to_thread(_save, file, config)
        out = upload.with_name(translated_name(upload.name, target))
        try:
            await asyncio.to_thread(_translate, server, asyncio.get_running_loop(), upload, out, source, target,
                                    config, charge)
        except Refused as e:
            return e.refusal.response()
        except (UsageError, DataError) as e:
            raise ApiError(400, str(e).replace(str(upload), file.filename)) from None
        except (QueueFull, RequestTimeout, TooLarge, TimeoutError):
            raise ApiError(504, f"the file was not translated within its timeout_s {config.timeout_s:g}",
                           limit="file_timeout_s", max=config.timeout_s) from None
        finally:
            upload.unlink(missing_ok=True)
        return JSONResponse({"translatedFileUrl": str(request.url_for("download_file", name=out.name))})

    @router.get("/download_file/{name:path}", name="download_file", responses={
        200: {"description": "the translation, an attachment", "content": {"application/octet-stream": {}}},
        **_errors(s400="not a name this server made", s404="expired, or never made")},
        summary="A translated file (an attachment)")
    async def download_file(name: str):
        await asyncio.to_thread(sweep, config.folder, config.keep_s)
        folder = config.folder.resolve()
        path = (folder / name).resolve()
        if not NAME.fullmatch(name) or path.parent != folder:
            return _error(400, "Invalid filename")
        try:
            expired = time.time() - path.stat().st_mtime > config.keep_s
        except FileNotFoundError:
            expired = True
        if expired:
            path.unlink(missing_ok=True)
            return _error(404, f"{name} is not here: translations are kept {config.keep_s / 60:g} minutes")
        return FileResponse(path, filename=name.split(".", 1)[1], media_type="application/octet-stream")

    @router.get("/frontend/settings", summary="LibreTranslate's page settings (files translation, limits, keys)")
    async def frontend_settings(request: Request):
        server = request.app.state.server
        gate = _gate(request.app)
        keys = gate is not None and gate.keys is not None
        languages = {lang["code"]: lang["name"] for lang in server.models.languages()}
        source = server.models.sources()[0]
        target = server.models.targets(source)[0]
        return JSONResponse({
            "charLimit": server.limits.max_chars, "frontendTimeout": 500, "apiKeys": keys, "keyRequired": keys,
            "suggestions": False, "filesTranslation": config.enabled, "supportedFilesFormat": list(SUPPORTED),
            "language": {"source": {"code": source, "name": languages.get(source, source)},
                         "target": {"code": target, "name": languages.get(target, target)}}})

    return router


def install_files(app: FastAPI, config: FileConfig | None = None) -> FileConfig:
    """Mount the file routes on `app` (create_app does; its workers share config.folder)."""
    config = config or FileConfig()
    app.include_router(files_router(config))
    app.state.files = config
    return config
