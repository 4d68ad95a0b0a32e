"""serve, fuzzed from its own OpenAPI schema (schemathesis): every route, LibreTranslate's file API included; no
request it can generate, valid or not, JSON or a form, gets a 500 but the documented one of a pair whose model cannot
load; every answer is one the schema documents; every error is JSON {"error": "..."}. On a server of one model and
on one of several (one of them broken); the seed and the number of examples are pinned: the same requests each run."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")

import hypothesis  # noqa: E402
import schemathesis  # noqa: E402
from schemathesis import GenerationMode  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from serving import app_of, copy_translator, tiny_model  # noqa: E402

from aiayn.decoding.search import SearchConfig  # noqa: E402
from aiayn.decoding.shortlist import build_from_prepared  # noqa: E402
from aiayn.decoding.translator import Translator  # noqa: E402
from aiayn.serve import LanguagePair, Limits, Models, create_app  # noqa: E402
from aiayn.serve.config import ServeConfig  # noqa: E402
from aiayn.serve.engines import Loaded, ModelSource  # noqa: E402
from aiayn.serve.files import FileConfig  # noqa: E402

EXAMPLES = 30  # per operation and generation mode
SEED = 20261128


@pytest.fixture(scope="module")
def translator(copy_data):
    """Decoding stays cheap; with a shortlist (aiayn serve --shortlist), so that the request field "shortlist" and
    prefixes outside it are fuzzed too."""
    translator, _ = copy_translator(copy_data)
    return Translator(translator.model, translator.vocab, SearchConfig(beam=2, max_len_b=5),
                      shortlist=build_from_prepared(copy_data, per_source=3, frequent=2))


@pytest.fixture(params=["one", "many"])
def api_schema(request, translator, copy_data, tmp_path):
    """A new app each test: schemathesis ends an ASGI app's lifespan (and so its batchers) when a test ends. many:
    en -> de, es -> en (so es -> de goes through a pivot) and en -> it, whose checkpoint cannot be read."""
    config = dict(limits=Limits(max_chars=60, max_texts=4), files=FileConfig(folder=tmp_path / "files"))
    if request.param == "one":
        return schemathesis.openapi.from_asgi("/openapi.json", app_of(translator, **config)), False
    broken = tmp_path / "en-it"
    (broken / "checkpoints").mkdir(parents=True)
    (broken / "checkpoints" / "step_00000010.safetensors").write_bytes(b"not a checkpoint")
    (broken / "vocab.model").write_bytes((copy_data / "vocab.model").read_bytes())
    other = Translator(tiny_model(len(translator.vocab), seed=5, eos_bias=1.0), translator.vocab, translator.search)
    models = Models.from_sources([(LanguagePair("en", "de"), Loaded(translator)),
                                  (LanguagePair("es", "en"), Loaded(other)),
                                  (LanguagePair("en", "it"), ModelSource(str(broken), translator.search))])
    models.preload()
    return schemathesis.openapi.from_asgi("/openapi.json", create_app(models, ServeConfig(**config))), True


def no_server_error_but_a_broken_model(ctx, response, case) -> None:
    """No 5xx, but the 500 of a pair whose model cannot load (docs/serving.md: the other pairs are served)."""
    if response.status_code >= 500:
        said = response.json().get("error", "")  # errors_are_json checks that it is JSON
        assert response.status_code == 500 and "could not be loaded" in said, (
            f"{case.method} {case.path} -> {response.status_code} {response.text!r}")


def errors_are_json(ctx, response, case) -> None:
    """Every 4xx/5xx answer is JSON {"error": a non-empty string, ...}."""
    if response.status_code >= 400:
        body = response.json()
        assert isinstance(body, dict) and isinstance(body.get("error"), str) and body["error"], (
            f"{case.method} {case.path} -> {response.status_code} {response.text!r}")


CHECKS = [status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=str)
def test_fuzzed_requests_get_documented_answers(api_schema, mode):
    """Every operation of the schema, EXAMPLES requests each: bodies that fit its schema (positive: JSON, form and
    multipart alike) or break it (negative: wrong types, missing q, ...). Seeded: the same requests each run."""
    api_schema, broken_model = api_schema
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert {op.path for op in operations} >= {"/translate", "/detect", "/languages", "/attention", "/translate_file",
                                              "/download_file/{name}", "/frontend/settings"}
    for operation in operations:
        if mode is GenerationMode.NEGATIVE and not operation.body:
            continue  # no body, no parameters: nothing can be wrong with a request
        @hypothesis.seed(SEED)
        @hypothesis.given(case=operation.as_strategy(generation_mode=mode))
        @hypothesis.settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                             suppress_health_check=list(hypothesis.HealthCheck))
        def fuzz(case):
            check(case)

        fuzz()
        if broken_model and operation.path in ("/translate", "/attention") and mode is GenerationMode.POSITIVE:
            # the broken model's pair, which the fuzz may not draw: its 500 is one the checks accept
            broken = operation.Case(body={"q": "alpha", "source": "en", "target": "it"}, media_type="application/json")
            assert broken.call().status_code == 500
            check(broken)


def check(case) -> None:
    case.validate_response(case.call(), checks=CHECKS,
                           additional_checks=[errors_are_json, no_server_error_but_a_broken_model])
