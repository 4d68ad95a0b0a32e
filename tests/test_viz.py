"""viz: recorded attention equals eq. 1 with its masks, recording changes nothing, alignments on scripted attention
give hand-worked pairs, the files and commands, and the page in a real headless browser (no request leaves it)."""

import json
import math
import re
import shutil

import pytest
import torch
from helpers import save_run, tiny_model

from aiayn.cli import main
from aiayn.config import BOS_ID, EOS_ID, PAD_ID
from aiayn.data import Vocab
from aiayn.decoding import attention as alignment
from aiayn.decoding.alignment import format_alignment, word_alignment, word_ids
from aiayn.decoding.translator import Translator
from aiayn.errors import UsageError
from aiayn.model import MultiHeadAttention, attention
from aiayn.viz.attention import (
    KINDS,
    AttentionRecorder,
    attention_data,
    default_layer,
    record,
    recording,
    render_html,
    view_template,
)


@pytest.fixture(scope="module")
def vocab(copy_data):
    return Vocab.load(copy_data / "vocab.model")


@pytest.fixture(scope="module")
def model(vocab):
    return tiny_model(len(vocab), eos_bias=4.0)


def batch(vocab):
    """Two sentences of different lengths, right-padded: src (2, S) with EOS, tgt_in (2, T) with BOS."""
    srcs = [vocab.encode("alpha bravo charlie delta") + [EOS_ID], vocab.encode("echo") + [EOS_ID]]
    tgts = [[BOS_ID] + vocab.encode("DELTA CHARLIE BRAVO ALPHA"), [BOS_ID] + vocab.encode("ECHO")]
    src = torch.full((2, max(map(len, srcs))), PAD_ID)
    tgt = torch.full((2, max(map(len, tgts))), PAD_ID)
    for b in range(2):
        src[b, : len(srcs[b])] = torch.tensor(srcs[b])
        tgt[b, : len(tgts[b])] = torch.tensor(tgts[b])
    assert src[1].eq(PAD_ID).any() and tgt[1].eq(PAD_ID).any()
    return src, tgt


# ---------------------------------------------------------------------------------------------------------
# Recording.


def expected_weights(module: MultiHeadAttention, x, memory, allowed):
    """softmax(Q K^T / sqrt(d_k)) per head, written out here in float64; allowed (B, n, m) bool."""
    def heads(y, linear, width):  # (B, n, D) -> (B, h, n, width)
        b, n, _ = y.shape
        y = y.double() @ linear.weight.double().T + linear.bias.double()
        return y.view(b, n, module.h, width).transpose(1, 2)

    q = heads(x, module.w_q, module.d_k)
    k = heads(x if memory is None else memory, module.w_k, module.d_k)
    scores = q @ k.transpose(-1, -2) / math.sqrt(module.d_k)
    scores = scores.masked_fill(~allowed[:, None], float("-inf"))
    return scores.softmax(-1)


def test_recorded_weights_equal_the_formula_with_masks(model, vocab):
    src, tgt = batch(vocab)
    inputs = {}  # module -> (x, memory) of its forward call

    def keep(module, args, kwargs):
        inputs[module] = (args[0], args[1] if len(args) > 1 else kwargs.get("memory"))

    hooks = [m.register_forward_pre_hook(keep, with_kwargs=True) for m in model.modules()
             if isinstance(m, MultiHeadAttention)]
    try:
        _, weights = record(model, src, tgt)
    finally:
        for h in hooks:
            h.remove()
    cfg = model.cfg
    b, s, t = src.size(0), src.size(1), tgt.size(1)
    src_ok = src.ne(PAD_ID)  # keys that may be attended to
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    allowed = {"encoder": src_ok[:, None, :].expand(b, s, s), "decoder": causal.expand(b, t, t),
               "cross": src_ok[:, None, :].expand(b, t, s)}
    shapes = {"encoder": (b, cfg.n_heads, s, s), "decoder": (b, cfg.n_heads, t, t), "cross": (b, cfg.n_heads, t, s)}
    layers = {"encoder": model.encoder.layers, "decoder": model.decoder.layers, "cross": model.decoder.layers}
    for kind in KINDS:
        assert len(weights[kind]) == len(layers[kind]) == 2
        for n, w in enumerate(weights[kind]):
            module = layers[kind][n].cross_attn if kind == "cross" else layers[kind][n].self_attn
            assert w.shape == shapes[kind]
            torch.testing.assert_close(w.double(), expected_weights(module, *inputs[module], allowed[kind]),
                                       atol=1e-6, rtol=1e-5)
            torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]))
            assert w.masked_select(~allowed[kind][:, None].expand_as(w)).eq(0).all()  # padding and future: exactly 0
    assert weights["decoder"][0][1, :, 0, 1:].eq(0).all()  # BOS sees only itself


def test_recording_changes_no_output_and_switches_back_off(model, vocab):
    src, tgt = batch(vocab)
    modules = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    someone_elses = modules[0].attention = AttentionRecorder()  # someone else's recording is left as it was
    with torch.no_grad():
        plain = model(src, tgt)
    translator = Translator(model, vocab)
    lines = ["alpha bravo charlie", "delta echo"]
    before = translator.translate(lines)
    with recording(model) as by_kind:
        assert all(isinstance(m.attention, AttentionRecorder) for ms in by_kind.values() for m in ms)
        with torch.no_grad():
            recorded = model(src, tgt)
        during = translator.translate(lines)
    after, _ = record(model, src, tgt)
    # Recording runs eq. 1 as two matmuls instead of torch's fused kernel: the same numbers up to rounding.
    torch.testing.assert_close(recorded, plain, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(after, plain, atol=1e-5, rtol=1e-5)
    assert during == before and translator.translate(lines) == before
    assert modules[0].attention is someone_elses
    assert all(m.attention is attention for m in modules[1:])
    modules[0].attention = attention


def test_attention_data_tokens_and_shapes(model, vocab):
    data = attention_data(model, vocab, "alpha bravo charlie", "CHARLIE BRAVO ALPHA")
    tok = data["tokens"]
    assert tok["src"][-1] == "</s>" and tok["tgt_in"][0] == "<s>" and tok["tgt_out"][-1] == "</s>"
    assert tok["tgt_in"][1:] == tok["tgt_out"][:-1] and data["tgt_source"] == "given"
    assert "".join(tok["src"][:-1]).replace("\u2581", " ").strip() == "alpha bravo charlie"
    for kind in KINDS:
        rows, cols = (tok[a] for a in data["axes"][kind])
        assert len(data["weights"][kind]) == 2
        for layer in data["weights"][kind]:
            assert len(layer) == model.cfg.n_heads
            for head in layer:
                assert len(head) == len(rows) and all(len(r) == len(cols) for r in head)
                assert all(abs(sum(r) - 1) < 1e-3 for r in head)
    dec = data["weights"]["decoder"][0][0]
    assert all(dec[i][j] == 0 for i in range(len(dec)) for j in range(i + 1, len(dec)))
    # Without a target: the model's own beam-search output, as translate gives it.
    own = attention_data(model, vocab, "alpha bravo charlie")
    assert own["tgt_source"] == "beam search"
    assert own["tgt"] == Translator(model, vocab).translate(["alpha bravo charlie"])[0]
    assert default_layer(6) == 4 and default_layer(3) == 1 and default_layer(1) == 0


# ---------------------------------------------------------------------------------------------------------
# Alignments.

# Source "the houses is small" as pieces ▁the ▁house s ▁is ▁small; target ▁die ▁Häus er ▁sind ▁klein.
SRC_PIECES = ["\u2581the", "\u2581house", "s", "\u2581is", "\u2581small"]
TGT_PIECES = ["\u2581die", "\u2581H\u00e4us", "er", "\u2581sind", "\u2581klein"]
ATTN = [[0.50, 0.30, 0.00, 0.10, 0.10],  # die:   the 0.50 > houses 0.30                           -> 0-0
        [0.10, 0.30, 0.25, 0.35, 0.00],  # Häus:  piece argmax 'is'; houses 0.55 \  mean: houses 0.475
        [0.10, 0.20, 0.20, 0.40, 0.10],  # er:    piece argmax 'is'; houses 0.40 /  > is 0.375      -> 1-1
        [0.10, 0.20, 0.20, 0.35, 0.15],  # sind:  piece argmax 'is' 0.35, but word houses 0.40    -> 1-2
        [0.00, 0.00, 0.00, 0.20, 0.80]]  # klein: small                                           -> 3-3
PAIRS = [(0, 0), (1, 1), (1, 2), (3, 3)]


def test_word_alignment_merges_subwords_by_hand():
    assert word_ids(SRC_PIECES) == [0, 1, 1, 2, 3] and word_ids(TGT_PIECES) == [0, 1, 1, 2, 3]
    assert word_ids(["\u2581", "2009", "\u2581x"]) == [0, 0, 1]  # a bare "▁" starts a word its digits continue
    assert word_alignment(torch.tensor(ATTN), word_ids(SRC_PIECES), word_ids(TGT_PIECES)) == PAIRS
    piecewise = torch.tensor(ATTN).argmax(1).tolist()  # what the subword argmax alone would say
    assert piecewise == [0, 3, 3, 3, 4]
    assert format_alignment(PAIRS) == "0-0 1-1 1-2 3-3"


class FakeVocab:
    def __init__(self, pieces):
        self.pieces = pieces

    def piece(self, i):
        return self.pieces[i]


def test_align_drops_eos_uses_the_layer_and_averages_heads(monkeypatch, model):
    """`align` on a scripted record(): 2 layers x 2 heads; layer 0 is a decoy; layer 1's heads are ATTN +- a
    perturbation (their mean is ATTN) with most mass on the source EOS, and a row that predicts EOS."""
    vocab = FakeVocab({10 + n: p for n, p in enumerate(SRC_PIECES + TGT_PIECES)} | {EOS_ID: "</s>"})
    src = [10, 11, 12, 13, 14, EOS_ID]
    tgt = [15, 16, 17, 18, 19]
    a = torch.tensor(ATTN) * 0.2
    cross = torch.zeros(1, 2, 6, 6)  # (B, h, T = 5 words + EOS row, S = 5 pieces + EOS)
    cross[0, :, :5, :5] = a
    cross[0, :, :5, 5] = 0.8  # EOS would win every row if it were a candidate
    cross[0, :, 5] = torch.tensor([0.9, 0, 0, 0, 0, 0.1])  # the EOS row would add a pair for word 0
    bump = torch.zeros(5, 5)
    bump[1, 3], bump[1, 1] = 0.05, -0.05  # head 0 alone would align Häus to 'is'
    cross[0, 0, :5, :5] += bump
    cross[0, 1, :5, :5] -= bump
    decoy = torch.zeros_like(cross)
    decoy[..., 4] = 1.0

    def scripted(module, m, s, t):  # the forward, stopped at `module`: what it would have recorded
        assert s.tolist() == [src] and t.tolist() == [[BOS_ID, *tgt]]
        module.attention.weights = [decoy, cross][alignment.attention_modules(m)["cross"].index(module)]

    monkeypatch.setattr(alignment, "_forward_until", scripted)
    assert alignment.align(model, vocab, [src, None], [tgt, []], layer=1) == [PAIRS, []]
    assert alignment.align(model, vocab, [src], [tgt]) == [PAIRS]  # by default the top layer
    assert alignment.align(model, vocab, [src], [tgt], layer=0) == [[(3, 0), (3, 1), (3, 2), (3, 3)]]  # the decoy
    with pytest.raises(UsageError, match="numbered 0..1"):
        alignment.align(model, vocab, [src], [tgt], layer=2)


def test_align_links_what_record_computes_and_stops_at_its_layer(model, vocab):
    """align's forward stops after the chosen layer's cross-attention (the layers above it and the output projection
    do not run) and links the same weights as a whole recorded forward; the model's mode is left as it was."""
    src, tgt_in = batch(vocab)
    sources = [[i for i in row if i != PAD_ID] for row in src.tolist()]
    targets = [[i for i in row[1:] if i != PAD_ID] for row in tgt_in.tolist()]
    _, weights = record(model, src, tgt_in)
    calls = []
    hooks = [model.decoder.layers[-1].ffn.register_forward_hook(lambda *_: calls.append("ffn")),
             model.decoder.layers[0].ffn.register_forward_hook(lambda *_: calls.append("ffn 0"))]
    model.train()
    try:
        for layer in (0, 1):
            cross = weights["cross"][layer].mean(dim=1)
            expected = [alignment.word_links(cross[b, : len(t), : len(s) - 1], [vocab.piece(i) for i in s[:-1]],
                                             [vocab.piece(i) for i in t]) for b, (s, t) in enumerate(zip(sources,
                                                                                                         targets))]
            assert alignment.align(model, vocab, sources, targets, layer=layer) == expected
        assert model.training and calls == ["ffn 0"]  # layer 1's align ran layer 0's feed-forward, no other
    finally:
        model.eval()
        for hook in hooks:
            hook.remove()


# ---------------------------------------------------------------------------------------------------------
# Files and commands.


def test_attention_command_writes_the_files_and_a_page_that_needs_no_network(model, copy_data, tmp_path, capsys):
    run = save_run(model, copy_data / "vocab.model", tmp_path / "run")
    out = tmp_path / "maps"
    assert main(["attention", "--checkpoint", str(run), "--src", "alpha bravo", "--out", str(out),
                 "--layer", "1", "--heads", "0,2"]) == 0
    assert "target (beam search)" in capsys.readouterr().out
    names = {f.name for f in out.iterdir()}
    assert names == {"attention.json", "attention.html", "lines_encoder_layer1.png", "lines_decoder_layer1.png",
                     "lines_cross_layer1.png"} | {f"{k}_layer{n}.png" for k in KINDS for n in range(2)}
    for f in out.glob("*.png"):
        assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads((out / "attention.json").read_text())
    assert data == attention_data(Translator.load(run), None, "alpha bravo")
    page = (out / "attention.html").read_text()
    assert not re.search(r"https?:", page, re.I) and "Content-Security-Policy" in page and "default-src 'none'" in page
    assert view_template() in page and "function renderAttention(container, data)" in view_template()
    payload = re.search(r'<script type="application/json" id="attention-data">(.*?)</script>', page, re.S).group(1)
    assert "</" not in payload and json.loads(payload) == data  # "</s>" tokens cannot close the script early
    for flags, says in [(["--layer", "5"], "--layer 5"), (["--heads", "4"], "numbered 0..3"), (["--heads", "a"], "a")]:
        assert main(["attention", "--checkpoint", str(run), "--src", "alpha", "--out", str(out), *flags]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and says in err


def test_translate_print_alignment(model, copy_data, tmp_path, capsys):
    run = save_run(model, copy_data / "vocab.model", tmp_path / "run")
    lines = tmp_path / "in.txt"
    lines.write_text("alpha bravo charlie\n\ndelta echo\n")
    assert main(["translate", "--checkpoint", str(run), "--input", str(lines), "--print-alignment",
                 "--no-progress"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert main(["translate", "--checkpoint", str(run), "--input", str(lines), "--no-progress"]) == 0
    plain = capsys.readouterr().out.splitlines()
    assert len(printed) == 3 and printed[1] == " ||| "
    for text, line, source in zip(plain, printed, ["alpha bravo charlie", "", "delta echo"]):
        head, pairs = line.split(" ||| ")
        assert head == text
        links = [tuple(map(int, p.split("-"))) for p in pairs.split()]
        assert [j for _, j in links] == list(range(len(text.split())))  # one link per output word, in order
        assert all(0 <= i < len(source.split()) for i, _ in links)
    assert main(["translate", "--checkpoint", str(run), "--input", str(lines), "--print-alignment", "--nbest", "2",
                 "--no-progress"]) == 0
    nbest = capsys.readouterr().out.splitlines()
    assert len(nbest) == 5 and all(line.count(" ||| ") == 3 for line in nbest)  # a blank line: one empty
    assert main(["translate", "--checkpoint", str(run), "--input", str(lines), "--alignment-layer", "0"]) == 2
    assert "needs --print-alignment" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------
# The page in a real browser.

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver")
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1200,900"]:
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def test_page_in_headless_chromium(model, vocab, tmp_path, browser):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    data = attention_data(model, vocab, "alpha bravo charlie", "CHARLIE BRAVO ALPHA")
    page = tmp_path / "attention.html"
    page.write_text(render_html(data), encoding="utf-8")
    browser.get(page.as_uri())
    root = browser.find_element(By.ID, "attention")
    css = browser.find_elements

    def left_tokens():
        return [e.text for e in css(By.CSS_SELECTOR, ".att-left .att-tok")]

    def canvas_pixels():
        return browser.execute_script("return document.querySelector('canvas.att-canvas').toDataURL()")

    # The line view of the default layer, every head, the encoder's source tokens.
    assert root.get_attribute("data-kind") == "encoder" and root.get_attribute("data-layer") == "0"
    assert root.get_attribute("data-heads") == "0,1,2,3" and root.get_attribute("data-view") == "lines"
    assert left_tokens() == data["tokens"]["src"]
    layer0 = canvas_pixels()
    Select(root.find_element(By.CSS_SELECTOR, "select.att-layer")).select_by_value("1")
    assert root.get_attribute("data-layer") == "1" and canvas_pixels() != layer0

    # Hover a token: only its lines, and the tokens it attends to shaded.
    all_lines = canvas_pixels()
    ActionChains(browser).move_to_element(css(By.CSS_SELECTOR, ".att-left .att-tok")[1]).perform()
    assert root.get_attribute("data-focus") == "row:1" and canvas_pixels() != all_lines
    shaded = [e.value_of_css_property("background-color") for e in css(By.CSS_SELECTOR, ".att-right .att-tok")]
    assert any(c != "rgba(0, 0, 0, 0)" for c in shaded)
    assert root.find_element(By.CSS_SELECTOR, ".att-status").text.startswith(f"'{data['tokens']['src'][1]}'")

    # Kind: cross-attention rows are the predicted target tokens.
    Select(root.find_element(By.CSS_SELECTOR, "select.att-kind")).select_by_value("cross")
    assert root.get_attribute("data-kind") == "cross" and left_tokens() == data["tokens"]["tgt_out"]

    # Heads and the matrix view: one table per chosen head, rows x columns cells.
    Select(root.find_element(By.CSS_SELECTOR, "select.att-view")).select_by_value("matrix")
    tables = css(By.CSS_SELECTOR, "table.att-matrix")
    assert [t.get_attribute("data-head") for t in tables] == ["0", "1", "2", "3"]
    n_rows, n_cols = len(data["tokens"]["tgt_out"]), len(data["tokens"]["src"])
    assert len(tables[0].find_elements(By.CSS_SELECTOR, "td")) == n_rows * n_cols
    css(By.CSS_SELECTOR, "input.att-head")[2].click()
    assert root.get_attribute("data-heads") == "0,1,3"
    assert [t.get_attribute("data-head") for t in css(By.CSS_SELECTOR, "table.att-matrix")] == ["0", "1", "3"]
    cell = css(By.CSS_SELECTOR, "table.att-matrix td")[0]
    ActionChains(browser).move_to_element(cell).perform()
    assert root.get_attribute("data-focus") == "cell:0"
    weight = data["weights"]["cross"][1][0][0][0]
    assert root.find_element(By.CSS_SELECTOR, ".att-status").text.endswith(f"{weight:.3f}")

    # Nothing left the page: no script errors, no resource entries, the only request the page itself.
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0
    requested = set()
    for entry in browser.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            requested.add(message["params"]["request"]["url"])
    assert requested <= {page.as_uri()}
