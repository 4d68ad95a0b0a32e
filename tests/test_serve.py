"""serve: the HTTP API (shapes, errors, limits, n-best), dynamic batching under concurrency (every request gets its
own answer, equal to offline translation), overload (503, 504), SIGTERM draining, and the page in a real browser."""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import threading

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")
uvicorn = pytest.importorskip("uvicorn")

from serving import ServerThread, app_of, batcher_of, browser, call, copy_translator, serve_process, until  # noqa: E402

from aiayn.decoding.search import SearchConfig  # noqa: E402
from aiayn.decoding.translator import Translator  # noqa: E402
from aiayn.serve import BatchConfig, Limits  # noqa: E402


@pytest.fixture(scope="module")
def setup(copy_data):
    return copy_translator(copy_data)


def test_translate_shapes_and_nbest(setup):
    translator, lines = setup
    offline = translator.translate(lines[:3])
    nbest = Translator(translator.model, translator.vocab, SearchConfig(beam=4, nbest=3, max_len_b=10))
    offline3 = nbest.translate_nbest(lines[:2])
    one, many, alts, alts_many = call(app_of(translator), [
        ("POST", "/translate", {"q": lines[0], "source": "en", "target": "de", "format": "text", "api_key": "x"}),
        ("POST", "/translate", {"q": lines[:3]}),
        ("POST", "/translate", {"q": lines[0], "alternatives": 2}),
        ("POST", "/translate", {"q": lines[:2], "alternatives": 2}),
    ])
    assert one.status_code == 200 and one.json()["translatedText"] == offline[0]
    assert set(one.json()) == {"translatedText", "scores"} and len(one.json()["scores"]) == 1
    assert many.json()["translatedText"] == offline
    a = alts.json()
    assert [a["translatedText"], *a["alternatives"]] == [h.text for h in offline3[0]]
    assert a["scores"] == pytest.approx([h.score for h in offline3[0]], abs=1e-5)
    assert a["scores"] == sorted(a["scores"], reverse=True)
    b = alts_many.json()
    assert b["translatedText"] == [hs[0].text for hs in offline3]
    assert b["alternatives"] == [[h.text for h in hs[1:]] for hs in offline3]


@pytest.mark.parametrize("body, status, says", [
    (b'{"q": "caf\xe9"}', 400, "not valid UTF-8"),  # Latin-1, not UTF-8
    (b"q=hello", 400, "not JSON"),
    (b"", 400, "body is empty"),
    (b"[1, 2]", 422, "JSON object"),
    (b'{"text": "hello"}', 422, "q must be a string or a list of strings"),
    (b'{"q": 3}', 422, "q must be a string or a list of strings"),
    (b'{"q": ["a", null]}', 422, "q must be a string or a list of strings"),
    (b'{"q": "   "}', 422, "q is empty"),
    (b'{"q": ["alpha", ""]}', 422, "q[1] is empty"),
    (b'{"q": []}', 422, "empty list"),
    (b'{"q": "\\ud800x"}', 422, "lone surrogate"),
    (b'{"q": "alpha", "format": "xml"}', 422, "format"),
    (b'{"q": "alpha", "alternatives": -1}', 422, "alternatives"),
    (b'{"q": "alpha", "alternatives": 4}', 422, "at most 3"),  # beam 4: the best + 3 alternatives
    (b'{"q": "' + b"a" * 21 + b'"}', 413, "max_chars 20"),
    (b'{"q": ["a", "b", "c", "d"]}', 413, "max_texts 3"),
    (b'{"q": "' + b" " * 5000 + b'"}', 413, "max_body_bytes"),
])
def test_errors_are_clear_json(setup, body, status, says):
    translator, _ = setup
    (r,) = call(app_of(translator, limits=Limits(max_chars=20, max_texts=3)), [("POST", "/translate", body)])
    assert r.status_code == status and says in r.json()["error"], r.text
    if status == 413:
        assert r.json()["limit"] in ("max_chars", "max_texts", "max_body_bytes") and r.json()["limit"] in says


def test_other_routes(setup):
    translator, _ = setup
    import aiayn

    health, info, docs, schema, page, missing = call(app_of(translator, checkpoint="RUN"), [
        ("GET", "/health", None), ("GET", "/info", None), ("GET", "/docs", None), ("GET", "/openapi.json", None),
        ("GET", "/", None), ("GET", "/nope", None)])
    assert health.json() == {"status": "ok", "queued": 0}
    i = info.json()
    (m,) = i["models"]  # a server of one model: a catalogue of one
    assert i["version"] == aiayn.__version__ and m["vocab_size"] == len(translator.vocab) == 120
    assert m["model"]["d_model"] == translator.cfg.d_model and i["search"]["beam"] == 4 and m["checkpoint"] == "RUN"
    assert i["limits"]["max_chars"] == 1000 and i["max_alternatives"] == 3 and i["batching"]["enabled"] is True
    assert i["api_key_required"] is False and m["precision"] == "fp32" and m["loaded"] is True
    assert m["languages"]["source"] == {"code": "en", "name": "English"} and i["loaded_models"] == 1
    assert docs.status_code == 200 and "swagger" in docs.text.lower()
    body = schema.json()["paths"]["/translate"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["required"] == ["q"] and "alternatives" in body["properties"]
    assert page.status_code == 200 and 'id="src"' in page.text and "renderAttention" in page.text
    assert "connect-src 'self'" in page.headers["content-security-policy"]
    assert missing.status_code == 404 and missing.json() == {"error": "Not Found"}


def test_attention_route(setup):
    pytest.importorskip("aiayn.viz.attention")
    translator, lines = setup
    (r, t) = call(app_of(translator), [("POST", "/attention", {"q": lines[0]}),
                                           ("POST", "/translate", {"q": lines[0]})])
    data = r.json()
    vocab = translator.vocab
    assert data["tokens"]["src"] == [vocab.piece(i) for i in vocab.encode(lines[0])] + ["</s>"]
    assert data["tgt"] == t.json()["translatedText"] and data["tgt_source"] == "beam search"
    cross = data["weights"]["cross"][0][0]  # layer 0, head 0: a row per target token, a column per source token
    assert len(cross) == len(data["tokens"]["tgt_out"]) and all(abs(sum(row) - 1) < 1e-3 for row in cross)


def test_concurrent_requests_get_their_own_answers(setup):
    """64 requests at once: single texts, lists and n-best requests mixed; each answer is offline translation's."""
    translator, lines = setup
    offline = translator.translate(lines[:40])
    assert len(set(offline)) == 40  # a mix-up between requests cannot go unnoticed
    requests, expect = [], []
    for k in range(64):
        if k % 8 == 7:  # a list of three
            q = [lines[(k + j) % 40] for j in range(3)]
            requests.append(("POST", "/translate", {"q": q}))
            expect.append([offline[(k + j) % 40] for j in range(3)])
        else:  # one text; every fifth also asks for an alternative (decoded in batches of its own search)
            requests.append(("POST", "/translate", {"q": lines[k % 40], "alternatives": int(k % 5 == 0)}))
            expect.append(offline[k % 40])
    app = app_of(translator, batching=BatchConfig(max_wait_ms=20))
    got = call(app, requests)
    assert [r.json()["translatedText"] for r in got] == expect
    stats = batcher_of(app).stats
    assert stats["requests"] == 64 and stats["batches"] < 16  # they were decoded together

    plain = app_of(translator, batching=BatchConfig(enabled=False))
    got = call(plain, requests[:16])
    assert [r.json()["translatedText"] for r in got] == expect[:16]
    assert batcher_of(plain).stats["batches"] == 16  # batching off: one request per batch


def _occupy_model(app) -> tuple[threading.Event, threading.Event]:
    """Hold the model's thread (a call through the batcher's queue) until `release` is set: (release, started)."""
    release, started = threading.Event(), threading.Event()

    def block():
        started.set()
        release.wait(60)  # bounded: a failing test must not leave the thread (and pytest) waiting forever

    asyncio.get_running_loop().create_task(batcher_of(app).run(block))
    return release, started


def test_full_queue_503_and_timeout_504(setup):
    """No step races the clock: each waits for the state it needs, the model is held until the test lets it go, and
    only the 504 request meets a short timeout_s (the others get a minute)."""
    translator, lines = setup
    app = app_of(translator, batching=BatchConfig(max_queue=5, timeout_s=60))
    batcher = batcher_of(app)

    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as client:
            release, started = _occupy_model(app)
            await until(started.is_set)
            queued = [asyncio.create_task(client.post("/translate", json={"q": lines[k]})) for k in range(3)]
            await until(lambda: batcher.queued == 4)
            full = await client.post("/translate", json={"q": lines[:2]})  # 1 call + 3 + 2 > max_queue 5
            health = await client.get("/health")
            release.set()
            answers = await asyncio.gather(*queued)
            # the model is held past timeout_s: the request times out, and its job leaves the queue (timeout_s is
            # short for this request alone, once the model is held: the holding call must not time out before it runs)
            release2, started2 = _occupy_model(app)
            await until(started2.is_set)
            batcher.config = dataclasses.replace(batcher.config, timeout_s=0.5)
            slow = await client.post("/translate", json={"q": lines[5]})
            left = batcher.queued
            batcher.config = dataclasses.replace(batcher.config, timeout_s=60)
            release2.set()
            after = await client.post("/translate", json={"q": lines[6]})
        await batcher.close()
        return full, health, answers, slow, left, after

    full, health, answers, slow, left, after = asyncio.run(go())
    assert full.status_code == 503 and full.headers["retry-after"] == "1"
    assert full.json()["limit"] == "max_queue" and "queue is full" in full.json()["error"]
    assert health.json()["queued"] == 4
    assert [a.json()["translatedText"] for a in answers] == translator.translate(lines[:3])
    assert slow.status_code == 504 and slow.json()["limit"] == "timeout_s"
    assert left == 1 and after.status_code == 200  # only the call holding the model is left; the server goes on
    assert after.json()["translatedText"] == translator.translate(lines[6:7])[0]


def test_serve_command_drains_on_sigterm(setup, copy_data, tmp_path):
    """`aiayn serve` on loopback: SIGTERM while requests are decoding -> each still gets its answer, then exit."""
    translator, lines = setup
    search = ["--beam", "4", "--min-len", "25", "--max-len-b", "25"]  # 25 steps a sentence: slow enough to catch
    with serve_process(translator, copy_data / "vocab.model", tmp_path, *search) as (proc, base):
        async def load():
            async with httpx.AsyncClient(base_url=base, timeout=60) as client:
                tasks = [asyncio.create_task(client.post("/translate", json={"q": lines[4 * k: 4 * k + 4]}))
                         for k in range(8)]
                while (await client.get("/health")).json()["queued"] == 0:
                    await asyncio.sleep(0.01)
                proc.send_signal(signal.SIGTERM)  # with 32 sentences queued or decoding
                return await asyncio.gather(*tasks)

        answers = asyncio.run(load())
        code = proc.wait(timeout=60)
    offline = Translator(translator.model, translator.vocab, SearchConfig(min_len=25, max_len_b=25)).translate(
        lines[:32])
    assert [a.status_code for a in answers] == [200] * 8
    assert [t for a in answers for t in a.json()["translatedText"]] == offline
    assert code in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once it has drained
    with pytest.raises(httpx.TransportError):
        httpx.get(base + "/health", timeout=1)


# ---------------------------------------------------------------------------------------------------------
# The page, in a real browser.


def test_page_in_browser(setup):
    """Type a sentence: its translation (as offline), the n-best with scores and the attention view appear."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    translator, lines = setup
    sentence = next(line for line in lines if translator.translate([line])[0])  # one with a non-empty translation
    expect = translator.translate([sentence])[0]
    driver = browser()
    try:
        with ServerThread(app_of(translator)) as base:
            driver.get(base + "/")
            wait = WebDriverWait(driver, 30)
            wait.until(lambda d: d.find_element(By.ID, "model-info").text)  # /info has answered
            assert driver.find_element(By.ID, "model-info").text.startswith("English \u2192 German; model: ")
            driver.find_element(By.ID, "src").send_keys(sentence)
            wait.until(lambda d: d.find_element(By.ID, "translation").get_attribute("data-src") == sentence)
            assert driver.find_element(By.ID, "translation").text == expect
            items = driver.find_elements(By.CSS_SELECTOR, "#nbest li")
            assert len(items) == 4 and items[0].find_element(By.CLASS_NAME, "text").text == expect
            scores = [float(li.find_element(By.CLASS_NAME, "score").text) for li in items]
            assert scores == sorted(scores, reverse=True) and all(s <= 0 for s in scores)
            # the attention view (aiayn.viz), encoder-decoder attention first: target tokens left, source right
            wait.until(lambda d: d.find_element(By.ID, "attention").get_attribute("data-src") == sentence)
            assert driver.find_element(By.CSS_SELECTOR, "#attention select.att-kind").get_attribute("value") \
                == "cross"
            right = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#attention .att-right .att-tok")]
            left = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#attention .att-left .att-tok")]
            vocab = translator.vocab
            assert right == [vocab.piece(i) for i in vocab.encode(sentence)] + ["</s>"]
            best = translator.translate_nbest([sentence])[0][0]
            assert left == [vocab.piece(i) for i in best.tokens] + ["</s>"]
            assert driver.find_elements(By.CSS_SELECTOR, "#attention canvas")
            # typing more: the translation follows the new text
            driver.find_element(By.ID, "src").send_keys("\n" + lines[1])
            wait.until(lambda d: d.find_element(By.ID, "translation").get_attribute("data-src")
                       == sentence + "\n" + lines[1])
            assert driver.find_element(By.ID, "translation").text.split("\n") == translator.translate(
                [sentence, lines[1]])
    finally:
        driver.quit()


def test_serve_command_flags(tmp_path, capsys):
    from aiayn.cli import main

    assert main(["serve", "--checkpoint", str(tmp_path), "--max-queue", "0"]) == 2
    assert "--max-queue: must be an integer >= 1, got 0" in capsys.readouterr().err
    assert main(["serve", "--checkpoint", str(tmp_path), "--nbest", "2"]) == 2
    assert '"alternatives"' in capsys.readouterr().err
    assert main(["serve", "--checkpoint", str(tmp_path / "missing")]) == 1
    assert "--checkpoint " + str(tmp_path / "missing") + ": no such file or folder" in capsys.readouterr().err
    # a server whose only model cannot be loaded does not start: one line, before it listens
    assert main(["serve", "--checkpoint", str(tmp_path), "--workers", "1", "--port", "0"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: the en->de model") and "has no checkpoint yet" in err and err.count("\n") == 1
