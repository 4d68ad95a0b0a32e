"""The report: the finished rows in the paper's layout beside the paper's numbers, the plot of our PPL against the
paper's, and Spearman's rank correlation between the two."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aiayn import files
from aiayn.config import ModelConfig
from aiayn.errors import DataError
from aiayn.experiments.paper import TABLE3
from aiayn.experiments.table3.plan import RESULT, finished, read_result
from aiayn.experiments.table3.rows import ROWS, SHAPE_HEAD, paper_row, scaled_table, shape
from aiayn.extras import pip_line


def average_ranks(values: Sequence[float]) -> list[float]:
    """Ranks 1..n in increasing order of value; tied values share the average of the ranks they span."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for k in range(start, end + 1):  # positions start..end hold ranks start+1..end+1: their mean
            ranks[order[k]] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation: Pearson's correlation of the average ranks (nan if a side is constant or n < 2)."""
    if len(x) != len(y):
        raise ValueError(f"{len(x)} values against {len(y)}")
    if len(x) < 2:
        return math.nan
    rx, ry = average_ranks(x), average_ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx, syy = sum((a - mx) ** 2 for a in rx), sum((b - my) ** 2 for b in ry)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else math.nan


def load_results(out: Path) -> dict[str, dict[str, Any]]:
    """OUT/<row>/result.json of every finished row, by row name (in the paper's order)."""
    return {name: read_result(out, name) for name in ROWS if finished(out, name)}


def report(out: str | Path, plot: bool = True) -> dict[str, Any]:
    """Write OUT/table3.md (and OUT/table3.png, OUT/summary.json) from the finished rows; returns the summary."""
    out = Path(out)
    results = load_results(out)
    if not results:
        raise DataError(f"{out} holds no finished row (no <row>/{RESULT}); train some first")
    settings = {(r["scale"], r["steps"], r.get("dev_sentences"), json.dumps(r["train"], sort_keys=True))
                for r in results.values()}
    if len(settings) > 1:
        raise DataError(f"the rows in {out} were trained with different scales, steps or options; a table needs "
                        "rows trained alike: " + ", ".join(f"{n}: scale {r['scale']}, {r['steps']} steps"
                                                           for n, r in results.items()))
    names = list(results)
    ppl_rho = spearman([TABLE3[n].ppl for n in names], [results[n]["dev_ppl"] for n in names])
    bleu_rho = spearman([TABLE3[n].bleu for n in names], [results[n]["dev_bleu"] for n in names])
    text = markdown(results, ppl_rho, bleu_rho)
    any_r = next(iter(results.values()))
    summary = {"rows": names, "spearman_ppl": ppl_rho, "spearman_bleu": bleu_rho, "scale": any_r["scale"],
               "steps": any_r["steps"], "missing": [n for n in ROWS if n not in results], "plot": None}
    if plot:
        try:
            summary["plot"] = str(plot_ppl(results, out / "table3.png", ppl_rho))
        except ImportError:
            text += f"\n(no plot: matplotlib is not installed; {pip_line('viz')})\n"
    files.write_text(out / "table3.md", text)
    files.write_json(out / "summary.json", summary)
    return {**summary, "text": text}


def markdown(results: dict[str, dict[str, Any]], ppl_rho: float, bleu_rho: float) -> str:
    """Table 3 in the paper's layout, every row of the paper listed; ours beside the paper's where trained."""
    any_r = next(iter(results.values()))
    n_dev = any_r.get("dev_sentences")  # BLEU on the first N dev sentences, or on all (None: the paper's)
    dev = f"the first {n_dev:,} dev sentences" if n_dev else "the dev set"
    lines = [f"Table 3 at scale 1/{any_r['scale']} (d_model, d_ff, d_k, d_v divided by {any_r['scale']}), "
             f"{any_r['steps']:,} steps for every row, data {Path(any_r['data']).name}; dev PPL per subword token, "
             f"sacreBLEU (beam 4, alpha 0.6) of {dev}, no checkpoint averaging. Shape columns are the paper's "
             "(blank = base).", "",
             "| | row | " + " | ".join(SHAPE_HEAD) + " | steps | paper PPL | paper BLEU | paper params | PPL | BLEU | "
             "params | train min |",
             "|" + "---|" * (2 + len(SHAPE_HEAD) + 8)]
    base = shape(ModelConfig.preset("base"))
    for n in ROWS:
        r, p = results.get(n), paper_row(n)
        cells = [("" if n != "base" and v == b else str(v)) for v, b in zip(shape(ModelConfig.preset(n)), base)]
        if n == "E":
            cells = ["learned positional embedding", *[""] * (len(cells) - 1)]
        ours = (f"{r['dev_ppl']:.2f} | {r['dev_bleu']:.1f} | {r['params'] / 1e6:.2f}M | {r['train_minutes']:.1f}"
                if r else "- | - | - | -")
        params = f"{p['params_M']}M" if p["params_M"] else ""
        steps = p["steps"] if n in ("base", "big") else ""
        group = p["group"] if n in ("base", "big") or n[-1] in "1E" else ""
        lines.append(f"| {group} | {n} | " + " | ".join(cells) + f" | {steps} | {p['ppl']:.2f} | {p['bleu']} | "
                     f"{params} | {ours} |")
    dtypes = sorted({r["dtype"] for r in results.values()})
    devices = sorted({r["device_name"] for r in results.values()})
    lines += ["", f"Spearman's rank correlation with the paper over {len(results)} rows: dev PPL rho = {ppl_rho:.3f}, "
              f"dev BLEU rho = {bleu_rho:.3f}.",
              f"Trained on {', '.join(devices)} ({', '.join(dtypes)}); train minutes are wall time with up to "
              f"{max(r['concurrent_jobs'] for r in results.values())} rows training at once.", "",
              "Presets as trained:", "", scaled_table(list(results), any_r["scale"])]
    return "\n".join(lines) + "\n"


def plot_ppl(results: dict[str, dict[str, Any]], path: Path, rho: float) -> Path:
    """Our dev PPL against the paper's, one labelled point per row (needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    x = [TABLE3[n].ppl for n in names]
    y = [results[n]["dev_ppl"] for n in names]
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    ax.scatter(x, y, s=18)
    for n, a, b in zip(names, x, y):
        ax.annotate(n, (a, b), textcoords="offset points", xytext=(4, 3), fontsize=8)
    r = next(iter(results.values()))
    ax.set_xlabel("paper: dev PPL (newstest2013, 100K steps, full size)")
    ax.set_ylabel(f"ours: dev PPL (scale 1/{r['scale']}, {r['steps']:,} steps)")
    ax.set_title(f"Table 3 rows: Spearman rho = {rho:.2f} ({len(names)} rows)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    files.atomic_write(path, lambda p: fig.savefig(p, format="png", dpi=120))
    plt.close(fig)
    return path
