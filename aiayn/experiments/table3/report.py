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
from aiayn.experiments.table3.rows import (
    GROUPS,
    REPLICA,
    ROWS,
    SHAPE_HEAD,
    paper_row,
    replica_seed,
    row_of,
    scaled_table,
    shape,
)
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


def load_replicas(out: Path) -> dict[str, dict[str, Any]]:
    """The finished replicas (OUT/<row>@seed<N>/result.json), by name, in the paper's order of their rows."""
    names = [d.name for d in Path(out).glob(f"*{REPLICA}*") if d.is_dir() and row_of(d.name) in ROWS
             and d.name.split(REPLICA, 1)[1].isdigit() and finished(out, d.name)]
    names.sort(key=lambda n: (ROWS.index(row_of(n)), replica_seed(n)))
    return {name: read_result(out, name) for name in names}


def seed_noise(results: dict[str, dict[str, Any]], replicas: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """How much dev PPL moves with the seed alone: per row trained at several seeds (the row and its replicas), the
    PPLs by seed and their relative spread max/min - 1; `relative` is the largest spread (None without replicas)."""
    groups: dict[str, dict[int, float]] = {}
    for name, r in {**results, **replicas}.items():
        groups.setdefault(row_of(name), {})[r.get("seed", r["train"]["seed"])] = r["dev_ppl"]  # older: the plan's
    rows = {row: {"ppl_by_seed": dict(sorted(by_seed.items())),
                  "relative_spread": max(by_seed.values()) / min(by_seed.values()) - 1}
            for row, by_seed in groups.items() if len(by_seed) > 1}
    if not rows:
        return None
    return {"rows": rows, "relative": max(g["relative_spread"] for g in rows.values())}


def resolvable(names: Sequence[str], relative: float) -> list[str]:
    """The rows whose paper PPLs differ from each other by more than `relative` (the measured noise, as a share of
    the PPL): rows taken in order of the paper's PPL, lowest first, each kept if its PPL exceeds the last kept one's
    by more than that share; rows closer than the noise to a kept one cannot be ranked by this run."""
    kept: list[str] = []
    for n in sorted(names, key=lambda n: (TABLE3[n].ppl, ROWS.index(n))):
        if not kept or TABLE3[n].ppl > TABLE3[kept[-1]].ppl * (1 + relative):
            kept.append(n)
    return [n for n in ROWS if n in kept]


def resolvable_sets(names: Sequence[str], relative: float, limit: int = 100_000) -> list[list[str]]:
    """Every largest set of rows whose paper PPLs all differ from each other by more than `relative` (each in the
    paper's order). `resolvable` picks one of them (from the lowest PPL up); where rows sit closer than the noise
    there are several equally valid ones, and a rho over one of them is only one draw. Stops after `limit` sets."""
    order = sorted(names, key=lambda n: (TABLE3[n].ppl, ROWS.index(n)))
    sets: list[list[str]] = []

    def extend(start: int, chain: list[str]) -> None:
        grown = False
        for j in range(start, len(order)):
            if len(sets) >= limit:
                return
            if not chain or TABLE3[order[j]].ppl > TABLE3[chain[-1]].ppl * (1 + relative):
                grown = True
                extend(j + 1, [*chain, order[j]])
        if not grown:
            sets.append(chain)

    extend(0, [])
    largest = max(map(len, sets))
    return [[n for n in ROWS if n in c] for c in sets if len(c) == largest]


def resolvable_pairs(results: dict[str, dict[str, Any]], relative: float) -> dict[str, Any]:
    """Every pair of finished rows whose paper PPLs differ by more than `relative` (the noise): how many of them our
    dev PPLs order as the paper does, and the pairs that go the other way (paper's better row first). Unlike
    `resolvable`, which keeps one chain of rows, this counts every pair the noise can tell apart."""
    names = sorted(results, key=lambda n: (TABLE3[n].ppl, ROWS.index(n)))
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]
             if TABLE3[b].ppl > TABLE3[a].ppl * (1 + relative)]
    reversed_ = [(a, b) for a, b in pairs if results[a]["dev_ppl"] > results[b]["dev_ppl"]]
    return {"pairs": len(pairs), "agree": len(pairs) - len(reversed_), "reversed": reversed_}


def settling(results: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """Whether the run went on long enough for its ranking to hold: the curves' step nearest 3/4 of the run; per row,
    the dev PPL's relative change from there to the end (negative = still falling); and Spearman's rho between the
    rows' dev PPLs at that step and at the end (1: the order had settled). None if some row has no dev PPL at that
    step, or it is not in the run's second half (a run that saved only at its end)."""
    steps = next(iter(results.values()))["steps"]
    curves = {n: {p["step"]: p["dev_ppl"] for p in r.get("dev_curve", [])} for n, r in results.items()}
    candidates = [s for s in next(iter(curves.values())) if steps / 2 <= s < steps]
    if not candidates:
        return None
    step = min(candidates, key=lambda s: abs(s - 0.75 * steps))
    if any(step not in c for c in curves.values()):
        return None
    names = list(results)
    return {"from_step": step, "change": {n: results[n]["dev_ppl"] / curves[n][step] - 1 for n in names},
            "rank_rho": spearman([curves[n][step] for n in names], [results[n]["dev_ppl"] for n in names])}


def without_each_group(results: dict[str, dict[str, Any]], relative: float | None = None) -> dict[str, dict[str, Any]]:
    """How much each of the paper's groups of variations, (A) to (E), moves the ranking: per group with a finished
    row, Spearman's rho of dev PPL (and of BLEU) over the finished rows outside it, and how many those are; with the
    noise (`relative`), also the spread of rho over the largest sets of those rows the noise can tell apart. A group
    whose removal lifts rho far above the full table's is where this run's scale departs from the paper's."""
    out = {}
    for group in dict.fromkeys(GROUPS[n] for n in results if n not in ("base", "big")):
        rest = [n for n in results if GROUPS[n] != group]
        if len(rest) >= 2:
            rho_p, rho_b = rank_correlations(results, rest)
            out[group] = {"rows": len(rest), "spearman_ppl": rho_p, "spearman_bleu": rho_b}
            if relative is not None:
                out[group]["resolvable_sets"] = set_spread(results, resolvable_sets(rest, relative))
    return out


def set_spread(results: dict[str, dict[str, Any]], sets: list[list[str]]) -> dict[str, Any]:
    """Dev PPL rho over each of `sets`: how many sets, their size, min, median, max, and how many reach 0.8."""
    rhos = sorted(rank_correlations(results, c)[0] for c in sets)
    mid = len(rhos) // 2
    return {"sets": len(sets), "rows": len(sets[0]), "min": rhos[0], "max": rhos[-1],
            "median": rhos[mid] if len(rhos) % 2 else (rhos[mid - 1] + rhos[mid]) / 2,
            "at_least_0.8": sum(r >= 0.8 for r in rhos)}


def without_text(groups: dict[str, dict[str, Any]]) -> str:
    if not groups:
        return ""
    parts = []
    for g, v in groups.items():
        part = f"without {g}: {v['spearman_ppl']:.3f} ({v['rows']} rows"
        if "resolvable_sets" in v:
            r = v["resolvable_sets"]
            part += f"; over the {r['sets']} sets of {r['rows']} the noise tells apart {r['min']:.3f}-{r['max']:.3f}"
        parts.append(part + ")")
    return "\nLeaving one group of variations out, dev PPL rho " + "; ".join(parts) + ".\n"


def report(out: str | Path, plot: bool = True) -> dict[str, Any]:
    """Write OUT/table3.md (and OUT/table3.png, OUT/summary.json) from the finished rows; returns the summary."""
    out = Path(out)
    results, replicas = load_results(out), load_replicas(out)
    if not results:
        raise DataError(f"{out} holds no finished row (no <row>/{RESULT}); train some first")
    every = {**results, **replicas}
    settings = {(r["scale"], r["steps"], r.get("dev_sentences"), json.dumps(r["train"], sort_keys=True),
                 json.dumps(r.get("backbone", {}), sort_keys=True))
                for r in every.values()}
    if len(settings) > 1:
        raise DataError(f"the rows in {out} were trained with different scales, steps or options; a table needs "
                        "rows trained alike: " + ", ".join(f"{n}: scale {r['scale']}, {r['steps']} steps"
                                                           for n, r in every.items()))
    digests = {r["data_sha256"] for r in every.values() if r.get("data_sha256")}
    if len(digests) > 1:
        raise DataError(f"the rows in {out} were trained on different data (prepared-data digests "
                        f"{', '.join(sorted(d[:12] for d in digests))}); a table needs rows trained on the same data")
    names = list(results)
    ppl_rho, bleu_rho = rank_correlations(results, names)
    noise = seed_noise(results, replicas)
    resolved = resolvable(names, noise["relative"]) if noise else None
    settled = settling(results)
    groups = without_each_group(results, noise["relative"] if noise else None)
    text = markdown(results, ppl_rho, bleu_rho) + without_text(groups) + settling_text(settled)
    any_r = next(iter(results.values()))
    summary = {"rows": names, "spearman_ppl": ppl_rho, "spearman_bleu": bleu_rho, "scale": any_r["scale"],
               "steps": any_r["steps"], "missing": [n for n in ROWS if n not in results], "plot": None,
               "replicas": list(replicas), "noise": noise, "resolvable_rows": resolved,
               "spearman_ppl_resolvable": None, "spearman_bleu_resolvable": None, "settling": settled,
               "without_group": groups,
               "curves_plot": None}
    if noise:
        rho_p, rho_b = rank_correlations(results, resolved)
        pairs = resolvable_pairs(results, noise["relative"])
        spread = set_spread(results, resolvable_sets(names, noise["relative"]))
        summary.update(spearman_ppl_resolvable=rho_p, spearman_bleu_resolvable=rho_b, resolvable_pairs=pairs,
                       resolvable_sets=spread)
        text += noise_text(noise, resolved, rho_p, rho_b, replicas) + sets_text(spread) + pairs_text(pairs)
    if plot:
        try:
            summary["plot"] = str(plot_ppl(results, out / "table3.png", ppl_rho))
            if settled:
                summary["curves_plot"] = str(plot_curves({**results, **replicas}, out / "table3_curves.png"))
        except ImportError:
            text += f"\n(no plot: matplotlib is not installed; {pip_line('viz')})\n"
    files.write_text(out / "table3.md", text)
    files.write_json(out / "summary.json", summary)
    return {**summary, "text": text}


def rank_correlations(results: dict[str, dict[str, Any]], names: Sequence[str]) -> tuple[float, float]:
    """Spearman's rho of our dev PPLs and of our dev BLEUs against the paper's, over `names`."""
    return (spearman([TABLE3[n].ppl for n in names], [results[n]["dev_ppl"] for n in names]),
            spearman([TABLE3[n].bleu for n in names], [results[n]["dev_bleu"] for n in names]))


def noise_text(noise: dict[str, Any], resolved: list[str], rho_p: float, rho_b: float,
               replicas: dict[str, dict[str, Any]]) -> str:
    lines = ["", "Noise (the same row trained at other seeds, everything else equal):", ""]
    for row, g in noise["rows"].items():
        ppls = ", ".join(f"seed {seed}: {ppl:.2f}" for seed, ppl in g["ppl_by_seed"].items())
        lines.append(f"- {row}: dev PPL {ppls} (spread {100 * g['relative_spread']:.1f} %)")
    lines += ["", f"Over the {len(resolved)} rows whose paper PPLs differ from each other by more than that noise "
              f"({100 * noise['relative']:.1f} %; {', '.join(resolved)}): dev PPL rho = {rho_p:.3f}, "
              f"dev BLEU rho = {rho_b:.3f}.", ""]
    return "\n".join(lines)


def sets_text(spread: dict[str, Any]) -> str:
    if spread["sets"] < 2:
        return ""
    return (f"That set is one of {spread['sets']} sets of {spread['rows']} rows the noise can tell apart; dev PPL rho "
            f"over each: min {spread['min']:.3f}, median {spread['median']:.3f}, max {spread['max']:.3f} "
            f"({spread['at_least_0.8']} of {spread['sets']} at 0.8 or more).\n")


def pairs_text(pairs: dict[str, Any]) -> str:
    if not pairs["pairs"]:
        return ""
    against = ", ".join(f"{a} < {b}" for a, b in pairs["reversed"]) or "none"
    return (f"Of the {pairs['pairs']} pairs of rows whose paper PPLs differ by more than the noise, {pairs['agree']} "
            f"({100 * pairs['agree'] / pairs['pairs']:.0f} %) are in the paper's order; the paper's order reversed "
            f"(paper's better row first): {against}.\n")


def settling_text(settled: dict[str, Any] | None) -> str:
    if not settled:
        return ""
    changes = ", ".join(f"{n} {100 * c:+.1f} %" for n, c in settled["change"].items())
    step = f"{settled['from_step']:,}"
    return (f"\nOver the last quarter (dev PPL at step {step} -> the end): {changes}. The rows' order at step {step} "
            f"against the end: rho = {settled['rank_rho']:.3f}.\n")


def backbone_text(backbone: dict[str, Any]) -> str:
    """The plan's departures from the paper's backbone in words ("pre-norm, fairseq initialization")."""
    words = {"norm_first": lambda v: "pre-norm (LayerNorm before each sub-layer)" if v else "post-norm (the paper's)",
             "init": lambda v: f"{v} initialization"}
    return ", ".join(words[k](v) for k, v in sorted(backbone.items()))


def markdown(results: dict[str, dict[str, Any]], ppl_rho: float, bleu_rho: float) -> str:
    """Table 3 in the paper's layout, every row of the paper listed; ours beside the paper's where trained."""
    any_r = next(iter(results.values()))
    n_dev = any_r.get("dev_sentences")  # BLEU on the first N dev sentences, or on all (None: the paper's)
    dev = f"the first {n_dev:,} dev sentences" if n_dev else "the dev set"
    lines = [f"Table 3 at scale 1/{any_r['scale']} (d_model, d_ff, d_k, d_v divided by {any_r['scale']}), "
             f"{any_r['steps']:,} steps for every row, data {Path(any_r['data']).name}; dev PPL per subword token, "
             f"sacreBLEU (beam 4, alpha 0.6) of {dev}, no checkpoint averaging"
             + (f"; every row with {backbone_text(any_r['backbone'])}" if any_r.get("backbone") else "")
             + ". Shape columns are the paper's (blank = base).", "",
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


def plot_curves(results: dict[str, dict[str, Any]], path: Path) -> Path:
    """Every row's dev PPL against the training step (log scale; needs matplotlib): did the curves separate?"""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.6))
    for n, r in results.items():
        points = [p for p in r.get("dev_curve", []) if p["step"] > 0]
        style = "--" if REPLICA in n else "-"
        ax.plot([p["step"] for p in points], [p["dev_ppl"] for p in points], style, label=n, linewidth=1)
    ax.set_yscale("log")
    ax.set_xlabel("training step")
    ax.set_ylabel("dev PPL")
    r = next(iter(results.values()))
    ax.set_title(f"Table 3 rows at scale 1/{r['scale']}: dev PPL while training")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, ncol=4)
    fig.tight_layout()
    files.atomic_write(path, lambda p: fig.savefig(p, format="png", dpi=120))
    plt.close(fig)
    return path
