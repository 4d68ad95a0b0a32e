"""Attention maps: what every head of every layer attends to, for one sentence, as PNGs, JSON and one HTML page.

Paper -> code:
    Appendix, "Attention visualizations" (Figures 3-5): encoder self-attention of layer 5 of 6, lines from each
    word to the words it attends to, one colour per head        -> `plot_lines` (any kind, layer and heads)
    the same weights as matrices, every head of a layer          -> `plot_heatmaps`
    3.2.3, the three uses of attention, named here by `kind`:
        "encoder"  encoder self-attention         rows and columns: source tokens (x1 .. xm </s>)
        "decoder"  masked decoder self-attention  rows and columns: decoder inputs (<s> y1 .. yn)
        "cross"    encoder-decoder attention      rows: the token each decoder position predicts (y1 .. yn </s>),
                                                  columns: source tokens
    (row i of "decoder" and of "cross" is the same decoder position: it reads token i of <s> y1 .. yn and
    predicts token i of y1 .. yn </s>.)

How the weights are obtained (aiayn.decoding.attention, which aiayn's engine aligns words with too): `recording(model)`
gives every MultiHeadAttention an AttentionRecorder as its `attention` (and restores them after), and `record` runs ONE
teacher-forced forward, model.encode + model.decode on the whole target, so each recorder keeps its softmax weights (B,
h, n, m). The target is the one given or else the model's own beam-search output (aiayn.decoding.translator.Translator).
Not beam search itself: it groups the beams of a sentence and feeds one position a step, while one forward over the
finished output gives the same weights for that output at once.

Layers and heads are numbered from 0, everywhere (flags, files, JSON, the page): the paper's "layer 5 of 6" is
layer 4 here. Files written by `write_all` (what `aiayn attention` writes):
    attention.json           `attention_data`'s dict: tokens, and weights[kind][layer][head][row][column]
    attention.html           `render_html`: one self-contained page (the viewer of attention_view.html, inline)
    {kind}_layer{L}.png      one figure per kind and layer, every head as a matrix
    lines_{kind}_layer{L}.png   the appendix's line view of the chosen layer and heads, for each kind
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from aiayn.config import BOS_ID, EOS_ID
from aiayn.decoding.attention import AttentionRecorder, attention_modules, record, recording  # noqa: F401
from aiayn.errors import UsageError, UserError
from aiayn.files import atomic_write

KINDS = ("encoder", "decoder", "cross")
TITLES = {"encoder": "encoder self-attention", "decoder": "decoder self-attention (masked)",
          "cross": "encoder-decoder attention"}
# Which token list labels the rows and the columns of each kind (keys of data["tokens"]).
AXES = {"encoder": ("src", "src"), "decoder": ("tgt_in", "tgt_in"), "cross": ("tgt_out", "src")}
FORMAT = "aiayn-attention/1"
TEMPLATE = Path(__file__).with_name("attention_view.html")


# ---------------------------------------------------------------------------------------------------------
# The data: tokens and weights of one sentence.


def attention_data(translator_or_model, vocab, src: str, tgt: str | None = None, digits: int = 4) -> dict:
    """Tokens and every head's weights for one sentence pair, as a JSON-ready dict (the attention.json format).

    translator_or_model: an aiayn.decoding.translator.Translator (its model, vocabulary and search), or a Transformer
    (then searched with the paper's settings). vocab: the model's Vocab (None: the translator's). tgt: the translation
    to force; None = the model's own beam-search output. Weights are rounded to `digits` decimals."""
    from aiayn.decoding.translator import Translator

    if isinstance(translator_or_model, Translator):
        translator = translator_or_model
        vocab = vocab or translator.vocab
    else:
        model, was_training = translator_or_model, translator_or_model.training
        device = next(model.parameters()).device
        translator = Translator(model, vocab, device=device)  # its fp32 inference model is the model itself, in eval
        model.train(was_training)
    src_ids = translator.encode([src])[0]
    if src_ids is None:
        raise UserError("the source sentence is empty; give the sentence whose attention to show")
    if tgt is None:
        with _eval(translator.model):
            tgt_ids, tgt_source = translator.search_ids([src_ids])[0][0].tokens, "beam search"
    else:
        tgt_ids, tgt_source = vocab.target.encode(tgt), "given"
    model = translator.model
    device = next(model.parameters()).device
    tgt_in = [BOS_ID, *tgt_ids]
    _, weights = record(model, torch.tensor([src_ids], device=device), torch.tensor([tgt_in], device=device))
    cfg = model.cfg
    return {
        "format": FORMAT,
        "src": src,
        "tgt": vocab.decode(tgt_ids),
        "tgt_source": tgt_source,
        "model": {"n_enc_layers": cfg.n_enc_layers, "n_dec_layers": cfg.n_dec_layers, "n_heads": cfg.n_heads,
                  "d_model": cfg.d_model},
        "default_layer": default_layer(min(cfg.n_enc_layers, cfg.n_dec_layers)),  # a layer of every kind
        "tokens": {"src": [vocab.piece(i) for i in src_ids],
                   "tgt_in": [vocab.piece(i) for i in tgt_in],
                   "tgt_out": [vocab.piece(i) for i in [*tgt_ids, EOS_ID]]},
        "axes": {kind: list(AXES[kind]) for kind in KINDS},
        "titles": dict(TITLES),
        # weights[kind][layer][head] = rows x columns, rows summing to 1
        "weights": {kind: [[[[round(w, digits) for w in row] for row in head] for head in layer[0].tolist()]
                           for layer in weights[kind]] for kind in KINDS},
    }


@contextmanager
def _eval(model: nn.Module) -> Iterator[None]:
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def default_layer(n_layers: int) -> int:
    """The layer of the line figures unless one is chosen: the second from the top, as the paper's layer 5 of 6."""
    return max(0, n_layers - 2)


def matrix(data: dict, kind: str, layer: int, head: int) -> tuple[list[str], list[str], list[list[float]]]:
    """(row tokens, column tokens, weights) of one head."""
    rows, cols = data["axes"][kind]
    return data["tokens"][rows], data["tokens"][cols], data["weights"][kind][layer][head]


def check_choice(data: dict, layer: int, heads: Sequence[int] | None) -> list[int]:
    """Validate a layer and heads against the data; returns the heads (all when None)."""
    n_layers = min(len(data["weights"][kind]) for kind in KINDS)
    n_heads = data["model"]["n_heads"]
    if not 0 <= layer < n_layers:
        raise UsageError(f"--layer {layer} is not a layer of this model: layers are numbered 0..{n_layers - 1}")
    heads = list(range(n_heads)) if heads is None else list(heads)
    bad = [h for h in heads if not 0 <= h < n_heads]
    if bad or not heads:
        raise UsageError(f"--heads {','.join(map(str, heads))}: this model's heads are numbered 0..{n_heads - 1}")
    return heads


# ---------------------------------------------------------------------------------------------------------
# Pictures (matplotlib, imported only here).


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> Path:
    atomic_write(path, lambda p: fig.savefig(p, format="png", dpi=fig.dpi, bbox_inches="tight"))
    _pyplot().close(fig)
    return path


def plot_heatmaps(data: dict, kind: str, layer: int, path: Path) -> Path:
    """Every head of one layer as a matrix (rows attend to columns), tokens on both axes, one colour scale."""
    plt = _pyplot()
    n_heads = data["model"]["n_heads"]
    rows, cols, _ = matrix(data, kind, layer, 0)
    heads = [torch.tensor(data["weights"][kind][layer][h]) for h in range(n_heads)]
    per_row = 2 if n_heads <= 4 else 4  # 4 heads as 2 x 2: a long sentence's matrices stay large enough
    n_fig_rows = -(-n_heads // per_row)
    cell = 0.16  # inches per token: 7-point labels stay legible
    side_w, side_h = max(2.5, cell * len(cols) + 1.2), max(2.5, cell * len(rows) + 1.2)
    fig, axes = plt.subplots(n_fig_rows, per_row, figsize=(side_w * per_row, side_h * n_fig_rows + 0.6),
                             squeeze=False, dpi=90, layout="constrained")  # room for suptitle and colour bar
    vmax = max(float(w.max()) for w in heads)
    font = 7 if max(len(rows), len(cols)) > 12 else 9
    for h, ax in enumerate(axes.flat):
        if h >= n_heads:
            ax.axis("off")
            continue
        im = ax.imshow(heads[h].numpy(), cmap="Blues", vmin=0.0, vmax=vmax, aspect="auto")
        ax.set_title(f"head {h}", fontsize=font + 2)
        ax.set_xticks(range(len(cols)), cols, rotation=90, fontsize=font)
        ax.set_yticks(range(len(rows)), rows if h % per_row == 0 else [""] * len(rows), fontsize=font)
        ax.tick_params(length=0)
    fig.suptitle(f"{TITLES[kind]}, layer {layer}: row token attends to column token", fontsize=font + 4)
    fig.colorbar(im, ax=axes.ravel().tolist(), fraction=0.02, pad=0.01)
    return _save(fig, path)


HEAD_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd"]


def plot_lines(data: dict, kind: str, layer: int, heads: Sequence[int] | None, path: Path,
               query: int | None = None, min_weight: float | None = None) -> Path:
    """The appendix's view: row tokens on the left, column tokens on the right, a line from each row token to each
    token it attends to with weight >= min_weight (default 0.1; for one query twice the uniform weight, 2 / columns),
    its opacity the weight relative to the largest drawn, one colour per head (the page uses the same colours).
    query: the lines of that row only (the paper's Figure 3 shows those of 'making')."""
    from matplotlib.collections import LineCollection
    from matplotlib.colors import to_rgb

    plt = _pyplot()
    heads = check_choice(data, layer, heads)
    rows, cols, _ = matrix(data, kind, layer, 0)
    n = max(len(rows), len(cols))
    fig, ax = plt.subplots(figsize=(5.5, 0.22 * n + 1.3), dpi=90)
    y_row = [n - 1 - i for i in range(len(rows))]  # top to bottom
    y_col = [n - 1 - j for j in range(len(cols))]
    if min_weight is None:
        min_weight = 0.1 if query is None else 2 / len(cols)
    segments, colours, weights = [], [], []
    for h in heads:
        rgb = to_rgb(HEAD_COLOURS[h % len(HEAD_COLOURS)])
        w = data["weights"][kind][layer][h]
        for i in range(len(rows)) if query is None else [query]:
            for j in range(len(cols)):
                if w[i][j] >= min_weight:
                    segments.append([(0.0, y_row[i]), (1.0, y_col[j])])
                    colours.append(rgb)
                    weights.append(w[i][j])
    top = max(weights, default=1.0)
    colours = [(*rgb, w / top) for rgb, w in zip(colours, weights)]
    ax.add_collection(LineCollection(segments, colors=colours, linewidths=2.0))
    for i, tok in enumerate(rows):
        ax.text(-0.03, y_row[i], tok, ha="right", va="center", fontsize=9,
                fontweight="bold" if i == query else "normal")
    for j, tok in enumerate(cols):
        ax.text(1.03, y_col[j], tok, ha="left", va="center", fontsize=9)
    for h in heads:  # legend: one coloured patch per head
        ax.plot([], [], color=HEAD_COLOURS[h % len(HEAD_COLOURS)], linewidth=4, label=f"head {h}")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(len(heads), 4), fontsize=8, frameon=False)
    ax.set_xlim(-0.6, 1.6)
    ax.set_ylim(-0.8, n - 0.2)
    ax.axis("off")
    what = f", lines of '{rows[query]}' only" if query is not None else f", weights >= {min_weight:g}"
    ax.set_title(f"{TITLES[kind]}, layer {layer}{what}", fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


# ---------------------------------------------------------------------------------------------------------
# The page.


def view_template() -> str:
    """The viewer: a <style> and a <script> defining `renderAttention(container, data)`, for any page that has the
    attention.json dict (this module's page inlines the data; a server's page may fetch it)."""
    return TEMPLATE.read_text(encoding="utf-8")


# No request may leave the page: everything is inline, and the policy forbids fetching anything at all.
CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'"


def render_html(data: dict) -> str:
    """One self-contained page (inline CSS, JS and data; no network) showing `data`."""
    # Inside <script>, "</" would end the element early (tokens include "</s>"): JSON's \u003c escape avoids it.
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")
    body = f"""<div id="attention"></div>
<script type="application/json" id="attention-data">{payload}</script>
<script>
renderAttention(document.getElementById("attention"),
                JSON.parse(document.getElementById("attention-data").textContent));
</script>
"""
    return offline_page(f"Attention: {data['src']}", CSP, view_template(), body)


def offline_page(title: str, csp: str, head: str, body: str) -> str:
    """An HTML page whose Content-Security-Policy `csp` says what it may load (here: nothing from the network);
    `head` and `body` are inserted as they are, the title escaped."""
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
{head}
</head>
<body>
{body}</body>
</html>
"""


def write_all(data: dict, out_dir: Path, layer: int | None = None, heads: Sequence[int] | None = None) -> list[Path]:
    """attention.json, attention.html, every kind's heatmaps per layer, and the line view of `layer` (default: the
    second from the top) for `heads` (default all), per kind. Returns the files written."""
    out_dir = Path(out_dir)
    layer = data["default_layer"] if layer is None else layer
    heads = check_choice(data, layer, heads)
    written = [out_dir / "attention.json", out_dir / "attention.html"]
    atomic_write(written[0], lambda p: p.write_text(json.dumps(data, ensure_ascii=False) + "\n", encoding="utf-8"))
    atomic_write(written[1], lambda p: p.write_text(render_html(data), encoding="utf-8"))
    for kind in KINDS:
        for n in range(len(data["weights"][kind])):
            written.append(plot_heatmaps(data, kind, n, out_dir / f"{kind}_layer{n}.png"))
    for kind in KINDS:
        written.append(plot_lines(data, kind, layer, heads, out_dir / f"lines_{kind}_layer{layer}.png"))
    return written
