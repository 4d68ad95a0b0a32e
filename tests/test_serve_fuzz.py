"""serve, fuzzed from its own OpenAPI schema (schemathesis): no request it can generate, valid or not, JSON or a form,
gets a 500; every answer is one the schema documents; every error is JSON {"error": "..."}."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")

import hypothesis  # noqa: E402
import schemathesis  # noqa: E402
from schemathesis import GenerationMode  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from serving import app_of, copy_translator  # noqa: E402

from aiayn.decoding.search import SearchConfig  # noqa: E402
from aiayn.decoding.shortlist import build_from_prepared  # noqa: E402
from aiayn.decoding.translator import Translator  # noqa: E402
from aiayn.serve import Limits  # noqa: E402

EXAMPLES = 30  # per operation and generation mode: the file takes ~6 s on 2 idle cores, ~25 s on busy ones


@pytest.fixture(scope="module")
def translator(copy_data):
    """Decoding stays cheap; with a shortlist (aiayn serve --shortlist), so that the request field "shortlist" and
    prefixes outside it are fuzzed too."""
    translator, _ = copy_translator(copy_data)
    return Translator(translator.model, translator.vocab, SearchConfig(beam=2, max_len_b=5),
                      shortlist=build_from_prepared(copy_data, per_source=3, frequent=2))


@pytest.fixture
def api_schema(translator):
    """A new app each test: schemathesis ends an ASGI app's lifespan (and so its batcher) when a test ends."""
    app = app_of(translator, limits=Limits(max_chars=60, max_texts=4))
    return schemathesis.openapi.from_asgi("/openapi.json", app)


def errors_are_json(ctx, response, case) -> None:
    """Every 4xx/5xx answer is JSON {"error": a non-empty string, ...}."""
    if response.status_code >= 400:
        body = response.json()
        assert isinstance(body, dict) and isinstance(body.get("error"), str) and body["error"], (
            f"{case.method} {case.path} -> {response.status_code} {response.text!r}")


CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=str)
def test_fuzzed_requests_get_documented_answers(api_schema, mode):
    """Every operation of the schema, EXAMPLES requests each: bodies that fit its schema (positive: JSON, form and
    multipart alike) or break it (negative: wrong types, missing q, ...). Derandomized: the same requests each run."""
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert {op.path for op in operations} >= {"/translate", "/detect", "/languages", "/attention"}
    for operation in operations:
        if mode is GenerationMode.NEGATIVE and not operation.body:
            continue  # no body, no parameters: nothing can be wrong with a request
        @hypothesis.given(case=operation.as_strategy(generation_mode=mode))
        @hypothesis.settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                             suppress_health_check=list(hypothesis.HealthCheck))
        def fuzz(case):
            case.validate_response(case.call(), checks=CHECKS, additional_checks=[errors_are_json])

        fuzz()
