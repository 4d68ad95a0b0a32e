"""LibreTranslate's file API (aiayn.serve.files) on a real HTTP server: documents uploaded as LibreTranslate's page
posts them, downloaded, opened, and their text compared with what /translate answers for the same sentences."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

import httpx
import pytest
from helpers import save_run
from serving import ServerThread, app_of, copy_translator, tiny_model

from aiayn.serve.access import AccessConfig
from aiayn.serve.files import FileConfig, safe_name, sweep
from aiayn.serve.state import Limits

pytest.importorskip("docx")


def _server(copy_data: Path, folder: Path, **config):
    translator, lines = copy_translator(copy_data)
    files = FileConfig(folder=folder / "files", **config.pop("files", {}))
    return app_of(translator, files=files, **config), lines[:6]


def _docx(lines: list[str]) -> bytes:
    import docx

    d = docx.Document()
    for line in lines:
        d.add_paragraph(line)
    out = io.BytesIO()
    d.save(out)
    return out.getvalue()


def _page_post(base: str, name: str, data: bytes, source="en", target="de", api_key="", **kw) -> httpx.Response:
    """What LibreTranslate's page (app.js translateFile) sends: a FormData of file, source, target, api_key, in that
    order (the key after the file; "" where none was typed)."""
    return httpx.post(base + "/translate_file", timeout=120, **kw,
                      files=[("file", (name, data, "application/octet-stream")), ("source", (None, source)),
                             ("target", (None, target)), ("api_key", (None, api_key))])


def _translations(base: str, lines: list[str]) -> list[str]:
    r = httpx.post(base + "/translate", json={"q": lines, "source": "en", "target": "de"}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["translatedText"]


def test_docx_html_srt_uploaded_downloaded_and_translated(copy_data, tmp_path):
    import docx

    app, lines = _server(copy_data, tmp_path)
    with ServerThread(app) as base:
        expected = _translations(base, lines)
        settings = httpx.get(base + "/frontend/settings").json()
        assert settings["filesTranslation"] is True and ".docx" in settings["supportedFilesFormat"]
        assert settings["language"]["source"]["code"] == "en" and settings["keyRequired"] is False

        r = _page_post(base, "report.docx", _docx(lines))
        assert r.status_code == 200, r.text
        url = r.json()["translatedFileUrl"]
        assert url.startswith(base + "/download_file/") and url.endswith(".report_de.docx")
        got = httpx.get(url)
        assert got.status_code == 200
        assert 'filename="report_de.docx"' in got.headers["content-disposition"]
        paragraphs = [p.text for p in docx.Document(io.BytesIO(got.content)).paragraphs if p.text]
        assert paragraphs == expected
        assert not [p for p in (tmp_path / "files").iterdir() if not p.name.endswith("_de.docx")]  # upload gone

        html = "<html><body>" + "".join(f"<p>{line}</p>" for line in lines) + "</body></html>"
        r = _page_post(base, "page.html", html.encode())
        body = httpx.get(r.json()["translatedFileUrl"]).text
        assert all(f"<p>{t}</p>" in body for t in expected), body

        srt = "".join(f"{i + 1}\n00:00:0{i},000 --> 00:00:0{i},900\n{line}.\n\n" for i, line in enumerate(lines))
        r = _page_post(base, "talk.srt", srt.encode())
        cues = httpx.get(r.json()["translatedFileUrl"]).text
        assert cues.count("-->") == len(lines) and lines[0] not in cues


def test_auto_source_unknown_extension_and_bad_names(copy_data, tmp_path):
    app, lines = _server(copy_data, tmp_path)
    with ServerThread(app) as base:
        r = _page_post(base, "report.docx", _docx(lines), source="auto")
        assert r.status_code == 200, r.text
        assert httpx.get(r.json()["translatedFileUrl"]).status_code == 200
        r = _page_post(base, "../отчёт.docx", _docx(lines))  # a name of other letters, with a path
        assert r.status_code == 200 and r.json()["translatedFileUrl"].endswith(".file_de.docx"), r.text

        for name in ("report.pdf", "macros.docm", "noextension"):
            r = _page_post(base, name, b"%PDF-1.4")
            assert r.status_code == 400 and "not supported" in r.json()["error"], (name, r.text)
        r = _page_post(base, "broken.docx", b"not a zip")
        assert r.status_code == 400 and "broken.docx" in r.json()["error"]
        r = _page_post(base, "report.docx", _docx(lines), target="xx")
        assert r.status_code == 400

        (tmp_path / "secret.txt").write_text("secret")
        for name in ("../secret.txt", "..%2Fsecret.txt", "%2e%2e/secret.txt", "0" * 32 + ".x/../../secret.txt"):
            r = httpx.get(base + "/download_file/" + name)
            assert r.status_code in (400, 404) and "secret" not in r.text, (name, r.text)
        r = httpx.get(base + "/download_file/" + "0" * 32 + ".gone.docx")
        assert r.status_code == 404 and "error" in r.json()


def test_translations_expire(copy_data, tmp_path):
    app, lines = _server(copy_data, tmp_path, files={"keep_s": 1.0})
    with ServerThread(app) as base:
        url = _page_post(base, "a.docx", _docx(lines)).json()["translatedFileUrl"]
        assert httpx.get(url).status_code == 200
        name = url.rsplit("/", 1)[1]
        old = time.time() - 5
        os.utime(tmp_path / "files" / name, (old, old))
        assert httpx.get(url).status_code == 404
        assert not (tmp_path / "files" / name).exists()
    stale = tmp_path / "files" / "stale"
    stale.write_text("x")
    os.utime(stale, (1, 1))
    assert sweep(tmp_path / "files", 60) == 1 and not stale.exists()


def test_keys_and_budgets(copy_data, tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("good-key chars=40\n")
    # a body limit below the file's size: the key comes after the file, where the access gate does not read
    app, lines = _server(copy_data, tmp_path, access=AccessConfig(api_keys=keys), limits=Limits(100, 1))
    data = _docx(lines[:1])
    assert len(data) > Limits(100, 1).max_body_bytes
    with ServerThread(app) as base:
        assert httpx.get(base + "/frontend/settings").json()["keyRequired"] is True
        r = _page_post(base, "a.docx", data)
        assert r.status_code == 403, r.text
        assert _page_post(base, "a.docx", data, api_key="wrong").status_code == 403
        r = _page_post(base, "a.docx", data, api_key="good-key")  # the key after the file, as the page sends it
        assert r.status_code == 200, r.text
        big = _docx(lines * 4)  # more characters than the key's 40 a minute
        r = _page_post(base, "b.docx", big, api_key="good-key")
        assert r.status_code in (413, 429) and r.json()["limit"] == "char_limit", r.text


def test_file_limits(copy_data, tmp_path):
    app, lines = _server(copy_data, tmp_path, files={"max_file_bytes": 4096, "max_chars": 10})
    with ServerThread(app) as base:
        r = _page_post(base, "big.txt", b"word " * 2000)
        assert r.status_code == 413 and r.json()["limit"] == "max_file_bytes"
        r = _page_post(base, "long.txt", ("\n".join(lines)).encode())
        assert r.status_code == 413 and r.json()["limit"] == "file_max_chars"


def test_a_file_larger_than_the_queue_is_chunked(copy_data, tmp_path):
    from aiayn.serve import BatchConfig

    translator, lines = copy_translator(copy_data)
    app = app_of(translator, batching=BatchConfig(max_queue=8),
                 files=FileConfig(folder=tmp_path / "files", chunk_sentences=4))
    text = "\n\n".join(lines[:20]) + "\n"  # 20 paragraphs: more sentences than the whole queue holds
    with ServerThread(app) as base:
        r = _page_post(base, "many.txt", text.encode())
        assert r.status_code == 200, r.text
        out = [line for line in httpx.get(r.json()["translatedFileUrl"]).text.splitlines() if line]
        assert len(out) == 20 and out[:5] == _translations(base, lines[:5])


def test_safe_names():
    assert safe_name("../../etc/report.docx") == "report.docx"
    assert safe_name("C:\\Users\\a b.DOCX") == "a_b.DOCX"  # a Windows path: its last part
    assert safe_name("отчёт.srt") == "file.srt" and safe_name(".hidden.md") == "hidden.md"


def test_disabled_files_translation(copy_data, tmp_path):
    app, lines = _server(copy_data, tmp_path, files={"enabled": False})
    with ServerThread(app) as base:
        assert httpx.get(base + "/frontend/settings").json()["filesTranslation"] is False
        r = _page_post(base, "a.docx", _docx(lines))
        assert r.status_code == 403 and "disabled" in r.json()["error"]
        assert not (tmp_path / "files").exists()  # nothing was saved


def test_serve_flags_make_the_file_config(copy_data, tmp_path):
    from aiayn.cli import build_parser
    from aiayn.cli.serve import serve_config
    from aiayn.data import Vocab
    from aiayn.errors import UsageError

    vocab = Vocab.load(copy_data / "vocab.model")
    run = save_run(tiny_model(len(vocab), eos_bias=1.0), copy_data / "vocab.model", tmp_path / "run")
    base = ["serve", "--checkpoint", str(run)]
    files = serve_config(build_parser().parse_args(base)).files
    assert files.enabled and files.max_file_bytes == 20 * 2**20 and files.timeout_s == 600
    args = build_parser().parse_args(base + ["--files-dir", str(tmp_path / "f"), "--max-file-size", "0.5",
                                             "--file-timeout", "30", "--disable-files-translation"])
    files = serve_config(args).files
    assert (files.folder, files.max_file_bytes, files.timeout_s, files.enabled) == (tmp_path / "f", 2**19, 30, False)
    (tmp_path / "plain").write_text("x")
    with pytest.raises(UsageError, match="--files-dir .* cannot write"):
        serve_config(build_parser().parse_args(base + ["--files-dir", str(tmp_path / "plain" / "sub")]))


def test_formatting_follows_the_alignment(copy_data, tmp_path):
    """A bold phrase inside a sentence is placed through the batcher's word alignments: the file the server gives
    back is the one `aiayn translate --input` writes (the engine's alignments; aiayn.markup.engines.translate_fn),
    and not the diagonal placement of a translation without alignment."""
    from aiayn.documents import translate_document
    from aiayn.markup.engines import translate_fn

    translator, lines = copy_translator(copy_data)
    page = "".join(f"<p>{w[0]} <b>{w[1]} {w[2]}</b> {' '.join(w[3:])}.</p>\n"
                   for w in (line.split() for line in lines[:12]) if len(w) >= 4)
    source = tmp_path / "page.html"
    source.write_text(page, encoding="utf-8")
    aligned = translate_fn(translator)
    translate_document(source, tmp_path / "aligned.html", aligned, "en", "de")
    translate_document(source, tmp_path / "diagonal.html", lambda s: [(t, None) for t, _ in aligned(s)], "en", "de")
    app, _ = _server(copy_data, tmp_path)
    with ServerThread(app) as base:
        r = _page_post(base, "page.html", page.encode())
        assert r.status_code == 200, r.text
        got = httpx.get(r.json()["translatedFileUrl"]).text
    assert got == (tmp_path / "aligned.html").read_text(encoding="utf-8")
    assert got != (tmp_path / "diagonal.html").read_text(encoding="utf-8")


def test_the_pages_files_tab_in_browser(copy_data, tmp_path):
    """The page's Files tab in headless Chromium: choose a document, a target, Translate: the link it shows downloads
    the translation (the file `aiayn translate --input` writes), named as LibreTranslate names it."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait
    from serving import browser

    from aiayn.documents import translate_document
    from aiayn.markup.engines import translate_fn

    translator, lines = copy_translator(copy_data)
    source = tmp_path / "notes.html"
    source.write_text("".join(f"<p>{line} <b>{line.split()[0]}</b>.</p>\n" for line in lines[:4]), encoding="utf-8")
    translate_document(source, tmp_path / "expected.html", translate_fn(translator), "en", "de")
    app, _ = _server(copy_data, tmp_path)
    driver = browser()
    try:
        with ServerThread(app) as base:
            driver.get(base + "/")
            wait = WebDriverWait(driver, 30)
            tab = driver.find_element(By.ID, "tab-files")
            wait.until(lambda d: tab.is_displayed())  # /frontend/settings says files are translated
            tab.click()
            assert not driver.find_element(By.ID, "src").is_displayed()
            assert ".docx" in driver.find_element(By.ID, "file-formats").text
            wait.until(lambda d: Select(d.find_element(By.ID, "file-target")).options)
            Select(driver.find_element(By.ID, "file-target")).select_by_value("de")
            driver.find_element(By.ID, "file").send_keys(str(source))
            driver.find_element(By.ID, "file-go").click()
            link = driver.find_element(By.ID, "file-link")
            wait.until(lambda d: link.is_displayed())
            assert link.text == "notes_de.html"
            got = httpx.get(link.get_attribute("href"))
            assert got.text == (tmp_path / "expected.html").read_text(encoding="utf-8")
    finally:
        driver.quit()
