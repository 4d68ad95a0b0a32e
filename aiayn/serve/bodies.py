"""Request bodies, read here rather than by FastAPI so that each way a body can be wrong has its own clear error.

Every POST takes what LibreTranslate's server takes: JSON, or a form (application/x-www-form-urlencoded, which its
Python client sends, or multipart/form-data), a field given once being a string and a repeated field a list (so
`q=a&q=b` is the list ["a", "b"]). `read_body` turns any of them into one dict within a byte limit, `validate` checks
it against a pydantic model with one message a field, and `body_schema` documents all three media types in OpenAPI.
"""

from __future__ import annotations

import json
from urllib.parse import parse_qsl

from fastapi import Request
from pydantic import BaseModel, ValidationError
from starlette.formparsers import MultiPartException, MultiPartParser

JSON, FORM, MULTIPART = "application/json", "application/x-www-form-urlencoded", "multipart/form-data"
MAX_DEPTH = 32  # JSON arrays and objects within each other at most (a glossary is 3 deep)
EXAMPLE = 'send JSON, e.g. {"q": "Hello"} with Content-Type: application/json, or a form with a q field'


class ApiError(Exception):
    """An error answered as {"error": message, ...extra} with `status`."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None, **extra):
        super().__init__(message)
        self.status, self.headers, self.extra = status, headers, extra


async def read_body(request: Request, max_bytes: int) -> dict:
    """The body's fields as a dict (from JSON or a form), within max_bytes, or an ApiError saying what is wrong."""
    body = await _read_bytes(request, max_bytes)
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media == FORM and not body.lstrip().startswith(b"{"):  # curl -d '{...}' labels JSON as a form: read it as JSON
        return _fields(_urlencoded(_utf8(body, "form")))
    if media == MULTIPART:
        return await _multipart(request, body)
    if media not in ("", JSON, FORM) and not media.endswith("+json"):
        raise ApiError(415, f"Content-Type {media} is not read here; {EXAMPLE}")
    text = _utf8(body, "JSON")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise ApiError(400, f"the body is not JSON ({e.msg} at line {e.lineno} column {e.colno}); {EXAMPLE}") from None
    except RecursionError:  # deeper than Python's parser goes
        obj = None
    if (obj is None and text.strip() != "null") or _depth(obj) > MAX_DEPTH:
        raise ApiError(400, f"the body's JSON is nested more than {MAX_DEPTH} levels deep; LibreTranslate's fields "
                            "are strings, numbers and lists of strings") from None
    if not isinstance(obj, dict):
        raise ApiError(422, 'the body must be a JSON object, e.g. {"q": "Hello"}')
    return obj


def _depth(obj) -> int:
    """How deeply `obj`'s arrays and objects nest (a string or number: 0), counted without recursion."""
    deepest, level = 0, [(obj, 0)]
    while level:
        value, d = level.pop()
        if isinstance(value, dict | list) and d < MAX_DEPTH + 1:
            deepest = max(deepest, d + 1)
            level.extend((v, d + 1) for v in (value.values() if isinstance(value, dict) else value))
    return deepest


async def _read_bytes(request: Request, max_bytes: int) -> bytes:
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > max_bytes:
        raise ApiError(413, f"the body has {length} bytes, more than max_body_bytes {max_bytes}",
                       limit="max_body_bytes", max=max_bytes)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_bytes:
            raise ApiError(413, f"the body is larger than max_body_bytes {max_bytes}", limit="max_body_bytes",
                           max=max_bytes)
    if not body.strip():
        raise ApiError(400, f"the body is empty; {EXAMPLE}")
    return bytes(body)


def _utf8(body: bytes, kind: str) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ApiError(400, f"the body is not valid UTF-8 (bad byte at offset {e.start}); send UTF-8 {kind}") from None


def _urlencoded(text: str) -> list[tuple[str, str]]:
    try:
        return parse_qsl(text, keep_blank_values=True, errors="strict")
    except UnicodeDecodeError as e:
        raise ApiError(400, f"a form field is not valid UTF-8 once percent-decoded ({e.reason} at byte {e.start}); "
                            "percent-encode UTF-8") from None


def _fields(pairs) -> dict:
    """Form fields as a dict: a field given once is its value, a repeated one the list of its values."""
    fields: dict = {}
    for name, value in pairs:
        if name in fields:
            fields[name] = [*fields[name], value] if isinstance(fields[name], list) else [fields[name], value]
        else:
            fields[name] = value
    return fields


async def _multipart(request: Request, body: bytes) -> dict:
    async def stream():
        yield body

    try:  # max_files=0: a file part is refused ("Too many files"); only text fields are read
        form = await MultiPartParser(request.headers, stream(), max_files=0).parse()
    except MultiPartException as e:
        raise ApiError(400, f"the multipart/form-data body cannot be read ({e.message}); send text fields only, "
                            "e.g. a q field") from None
    return _fields(form.multi_items())


def validate(model: type[BaseModel], fields: dict, expected: dict[str, str] | None = None) -> BaseModel:
    """`fields` as `model`, or a 422 with one message a field. expected: what a field must be, said once (pydantic
    reports each member of a union on its own)."""
    try:
        return model.model_validate(fields)
    except ValidationError as e:
        problems: dict[str, str] = {}
        for err in e.errors(include_url=False, include_input=False):
            field = str(err["loc"][0]) if err["loc"] else "body"
            if field in (expected or {}):
                problems[field] = f"{field} must be {expected[field]}"
            else:
                problems.setdefault(field, f"{field}: {err['msg']}")
        raise ApiError(422, "; ".join(problems.values())) from None


def check_text(text: str, where: str, max_chars: int) -> None:
    """A 422 for an empty or blank text or one that is not Unicode, a 413 for one over max_chars."""
    if not text.strip():
        raise ApiError(422, f"{where} is empty; give text to translate")
    if len(text) > max_chars:
        raise ApiError(413, f"{where} has {len(text)} characters, more than max_chars {max_chars}",
                       limit="max_chars", max=max_chars)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # JSON may escape lone surrogates (\ud800), which are not characters
        raise ApiError(422, f"{where} is not valid Unicode (it holds a lone surrogate)") from None


def body_schema(model: type[BaseModel]) -> dict:
    """OpenAPI's requestBody for a route that reads `model` as JSON or as a form (where null is a field left out)."""
    schema = model.model_json_schema()
    form = {**schema, "properties": {name: _without_null(prop) for name, prop in schema["properties"].items()}}
    return {"requestBody": {"required": True, "content": {
        JSON: {"schema": schema}, FORM: {"schema": form}, MULTIPART: {"schema": form}}}}


def _without_null(prop: dict) -> dict:
    options = [option for option in prop.get("anyOf", []) if option.get("type") != "null"]
    if not options:
        return prop
    rest = {k: v for k, v in prop.items() if k not in ("anyOf", "default")}
    return {**rest, **options[0]} if len(options) == 1 else {**rest, "anyOf": options}
