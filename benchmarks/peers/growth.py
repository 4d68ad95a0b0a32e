"""How cost grows: aiayn against the fastest peers as the problem gets bigger, measured with the shared harness's own
code (../shared/bench/peers: bench_infer.py, bench_ct2.py, bench_train.py, their timing loop, batches and result
records), every point in its own process run by the right virtualenv's python (as run_all.sh does), so each point
also carries the peak RSS of its process (`max_rss_mb`).

(a) decode: seconds per batch vs source length. Base config, random init, a batch of --sents sentences (16) whose
    sources all have exactly L tokens (EOS included, as the harness counts), L in 8,16,32,64,128,200, every
    hypothesis forced to L output tokens (the harness's --n-tokens), beam 4, --dtype fp32: aiayn, HF Marian
    `generate`, CTranslate2 int8 and float32.
(b) train: target tokens/s vs batch size (the harness's --tokens: target tokens per batch, the source has about as
    many; sentences of 25-30 tokens), 1k..25k, --config small, fp32: aiayn and --peer (fairseq_wmt, the fastest
    training peer of the shared results).

The harness has a flag for the output length (--n-tokens) but none for the source length (bench_infer.py and
bench_ct2.py always draw sources of 23-27 tokens with common.make_src_batch). So each decoding point runs
bench_infer.main() / bench_ct2.main() unchanged in a small wrapper (`-m benchmarks.peers.growth --point ...`, in the
peer's python, run in the harness's folder with the repository root on PYTHONPATH)
that first replaces common.make_src_batch by the same function with min_len = max_len = L; nothing under ../shared
is modified. The records get "growth" fields (part, src_len / tokens) added.

    python -m benchmarks.peers.growth                         # both parts, full ranges (~30-40 min on 2 cores)
    python -m benchmarks.peers.growth --parts decode --max-seconds 40 --threads 2
    python -m benchmarks.peers.growth --quick --threads 1 --max-seconds 5      # smoke check, 2 points each
    python -m benchmarks.peers.growth --report benchmarks/results/growth-2026-11-22   # tables + plots from JSON lines

Output: markdown tables on stdout (and in OUT/tables.md), JSON lines OUT/decode.jsonl and OUT/train.jsonl, one log per
point in OUT/logs, plots docs/img/growth_decode.png and docs/img/growth_train.png (log-scale x).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.evidence import read_jsonl

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
HARNESS = Path(os.environ.get("HARNESS", REPO.parent / "shared" / "bench" / "peers")).resolve()
PEERS = Path(os.environ.get("PEERS", Path.home() / ".cache" / "aiayn-peers"))
ADAPTER = HERE / "aiayn_adapter.py"
ADAPTER_INT8 = HERE / "aiayn_int8.py"  # its Adapter with precision = "int8" (`aiayn translate --precision int8`)

# Every point runs in the harness's folder with the repository root on PYTHONPATH: the int8 adapter and this module's
# --point wrapper import from benchmarks.peers.
POINT_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}

DECODE_LENS = [8, 16, 32, 64, 128, 200]
TRAIN_TOKENS = [1000, 2000, 4000, 8000, 16000, 25000]
OURS = "aiayn"
OURS_INT8 = "aiayn-int8"


# ---------------------------------------------------------------------------------------------------------------------
# The per-point wrapper (runs in the peer's interpreter: standard library + the harness only)


def point_main(argv: list[str]) -> None:
    """-m benchmarks.peers.growth --point {infer,ct2} SRC_LEN QUICK(0/1) -- <bench_infer.py / bench_ct2.py arguments>,
    run in the harness's folder (sys.path[0]: `common`, `bench_infer` and `bench_ct2` import from there)."""
    kind, src_len, quick = argv[0], int(argv[1]), argv[2] == "1"
    rest = argv[argv.index("--") + 1:]
    import common  # the harness's module, the one bench_*.py and the adapters import

    make_src_batch = common.make_src_batch
    write_result = common.write_result

    def fixed_len_src_batch(vocab, n=64, min_len=23, max_len=27, seed=4321):
        return make_src_batch(vocab, n, src_len, src_len, seed)

    def write_with_growth(path, record):
        record["growth"] = {"part": "decode", "src_len": src_len, "quick": quick}
        write_result(path, record)

    common.make_src_batch = fixed_len_src_batch
    common.write_result = write_with_growth
    mod = __import__({"infer": "bench_infer", "ct2": "bench_ct2"}[kind])
    sys.argv = [mod.__file__] + rest
    mod.main()


# ---------------------------------------------------------------------------------------------------------------------
# Running points


def peer_python(impl: str) -> str:  # as run_all.sh's py_for
    return str(PEERS / {"fairseq_wmt": "venv-fairseq", "onmt_tf": "venv-onmt"}.get(impl, "venv") / "bin" / "python")


def run_point(cmd: list[str], log: Path, timeout: float) -> bool:
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"[{time.strftime('%H:%M:%S')}] {' '.join(cmd)}", flush=True)
    with open(log, "w") as f:
        try:
            rc = subprocess.run(cmd, cwd=HARNESS, env=POINT_ENV, stdout=f, stderr=subprocess.STDOUT,
                                timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    for line in log.read_text().splitlines():
        if line.startswith("==>"):
            print("   " + line, flush=True)
    if rc != 0:
        print(f"   FAILED ({rc}), see {log}: " + " | ".join(log.read_text().splitlines()[-3:]), flush=True)
    return rc == 0


def run_decode(args, out: Path) -> None:
    ct2_dir = PEERS / "ct2-marian-base"
    if args.ct2_types and not (ct2_dir / "model.bin").exists():
        # Convert once (the harness's own bench_ct2.convert) so no point's peak RSS includes the conversion.
        code = ("import common, bench_ct2; "  # run in the harness's folder: both import from there
                f"bench_ct2.convert(common.get_config('base'), {str(ct2_dir)!r}, 'float32', 0)")
        run_point([peer_python("hf_marian"), "-c", code], out / "logs" / "ct2-convert.log", args.timeout)
    common = ["--config", "base", "--beam", str(args.beam), "--sents", str(args.sents), "--warmup", str(args.warmup),
              "--min-reps", str(args.min_reps), "--max-seconds", str(args.max_seconds), "--threads", str(args.threads),
              "--out", str(out / "decode.jsonl")]
    me = ["-m", "benchmarks.peers.growth", "--point"]
    for L in args.decode_lens:
        n = ["--n-tokens", str(L)]
        pt = [str(L), str(int(args.quick)), "--"]
        runs = [(f"aiayn-{L}", [args.python, *me, "infer", *pt, "--impl", str(ADAPTER), "--label", OURS,
                                "--dtype", args.dtype, *n, *common]),
                (f"aiayn-int8-{L}", [args.python, *me, "infer", *pt, "--impl",
                                     str(ADAPTER_INT8), "--label", OURS_INT8, "--dtype", "fp32", *n, *common]),
                (f"hf_marian-{L}", [peer_python("hf_marian"), *me, "infer", *pt, "--impl", "hf_marian",
                                    "--dtype", args.dtype, *n, *common])]
        for ct in args.ct2_types:
            runs.append((f"ct2-{ct}-{L}", [peer_python("hf_marian"), *me, "ct2", *pt, "--compute-type", ct,
                                           "--model-dir", str(ct2_dir), *n, *common]))
        for name, cmd in runs:
            run_point(cmd, out / "logs" / f"decode-{name}.log", args.timeout)


def run_train(args, out: Path) -> None:
    common = ["--config", args.config, "--dtype", args.train_dtype, "--warmup", str(args.warmup),
              "--min-steps", str(args.min_reps), "--max-seconds", str(args.max_seconds), "--threads", str(args.threads)]
    for tokens in args.train_tokens:
        for label, impl, py in ((OURS, str(ADAPTER), args.python), (args.peer, args.peer, peer_python(args.peer))):
            tmp = out / f".train-{label}-{tokens}.jsonl"
            tmp.unlink(missing_ok=True)
            ok = run_point([py, "bench_train.py", "--impl", impl, "--label", label, "--tokens", str(tokens), *common,
                            "--out", str(tmp)], out / "logs" / f"train-{label}-{tokens}.log", args.timeout)
            if ok and tmp.exists():  # add the point's coordinates, as the decode wrapper does
                with open(out / "train.jsonl", "a") as f:
                    for line in tmp.read_text().splitlines():
                        rec = json.loads(line)
                        rec["growth"] = {"part": "train", "tokens": tokens, "quick": args.quick}
                        f.write(json.dumps(rec, sort_keys=True) + "\n")
            tmp.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------------------------------
# Tables and plots


def load(path: Path) -> list[dict]:
    return read_jsonl(path)  # the file or its .xz (benchmarks/evidence.py)


def decode_name(r: dict) -> str:
    if r.get("impl") == OURS_INT8:
        return f"{OURS} int8"
    if r.get("impl") == OURS or str(r.get("adapter", "")).endswith("aiayn_adapter.py"):
        return f"{OURS} {r['dtype']}"
    if "CTranslate2" in str(r.get("impl")):
        return f"CTranslate2 {r['dtype']}"
    return f"{r['impl']} {r['dtype']}"


def grid(rows: list[dict], xkey, namef):
    """{x: {name: record}} and the names (aiayn first); a later record of the same point replaces an earlier one."""
    g: dict = {}
    for r in rows:
        g.setdefault(xkey(r), {})[namef(r)] = r
    names = sorted({n for v in g.values() for n in v}, key=lambda n: (not n.startswith(OURS), n))
    return g, names


def fmt(v, spec):
    return "" if v is None else format(v, spec)


def contention(got: dict) -> str:
    """The largest share of the cores other processes used during a row's timed reps (the harness's CpuMonitor);
    '!' above 5 %, as the harness's summarize.py marks it."""
    v = max((r.get("cpu_contention", {}).get("other_frac", 0.0) for r in got.values()), default=0.0)
    return f"{v:.0%}" + (" !" if v > 0.05 else "")


def decode_table(rows: list[dict]) -> tuple[list[str], dict, list[str]]:
    g, names = grid(rows, lambda r: r["growth"]["src_len"], decode_name)
    ours = next((n for n in names if n.startswith(OURS)), None)
    peers = [n for n in names if n != ours]
    first = next(iter(rows), {})
    out = [f"Decoding: seconds per batch of {first.get('sents', '?')} sentences (median of the timed batches; "
           f"{first.get('mode', '?')}, source length = forced output length, base config, random init); "
           f"aiayn / peer = peer time / aiayn time (> 1: aiayn faster); peak RSS of each point's process; "
           f"others' CPU: the most any point of the row saw other processes take (share of all cores, '!' > 5 %).\n",
           "| src = out tokens | " + " | ".join(f"{n} s" for n in names) + " | "
           + " | ".join(f"aiayn / {p}" for p in peers) + " | " + " | ".join(f"{n} MB" for n in names)
           + " | others' CPU |",
           "|---|" + "---|" * (2 * len(names) + len(peers) + 1)]
    for x in sorted(g):
        got = g[x]
        t = {n: got[n]["batch_s"]["median"] for n in got}
        cells = [fmt(t.get(n), ".2f") for n in names]
        cells += [f"{t[p] / t[ours]:.2f}x" if ours in t and p in t else "" for p in peers]
        cells += [fmt(got[n]["max_rss_mb"], ",.0f") if n in got else "" for n in names]
        cells.append(contention(got))
        out.append(f"| {x} | " + " | ".join(cells) + " |")
    return out, g, names


def train_table(rows: list[dict]) -> tuple[list[str], dict, list[str]]:
    g, names = grid(rows, lambda r: r["growth"]["tokens"], lambda r: r["impl"])
    ours = OURS if OURS in names else None
    peers = [n for n in names if n != ours]
    first = next(iter(rows), {})
    out = [f"Training: target tokens/s (median of the timed steps; {first.get('config', '?')} config, "
           f"{first.get('dtype', '?')}, one step = fwd + label-smoothed CE + bwd + Adam) vs batch size; "
           f"peak RSS of each point's process; others' CPU as above.\n",
           "| batch tgt tokens (asked / real) | sents | " + " | ".join(f"{n} tok/s" for n in names) + " | "
           + " | ".join(f"aiayn / {p}" for p in peers) + " | " + " | ".join(f"{n} MB" for n in names)
           + " | others' CPU |",
           "|---|---|" + "---|" * (2 * len(names) + len(peers) + 1)]
    for x in sorted(g):
        got = g[x]
        any_r = next(iter(got.values()))
        v = {n: got[n]["tgt_tok_per_s"]["median"] for n in got}
        cells = [fmt(v.get(n), ",.0f") for n in names]
        cells += [f"{v[ours] / v[p]:.2f}x" if ours in v and p in v else "" for p in peers]
        cells += [fmt(got[n]["max_rss_mb"], ",.0f") if n in got else "" for n in names]
        cells.append(contention(got))
        out.append(f"| {x} / {any_r['tgt_tokens']} | {any_r['batch_sents']} | " + " | ".join(cells) + " |")
    return out, g, names


def plot(g: dict, names: list[str], metric: str, ylabel: str, xlabel: str, title: str, path: Path,
         logy: bool) -> None:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, axm) = plt.subplots(1, 2, figsize=(11, 4.2))
    xs_all = sorted(g)
    for n in names:
        xs = [x for x in xs_all if n in g[x]]
        style = dict(lw=2.2, marker="o") if n.startswith(OURS) else dict(lw=1.4, marker=".", ls="--")
        med = [g[x][n][metric]["median"] for x in xs]
        lo = [g[x][n][metric]["median"] - g[x][n][metric]["min"] for x in xs]
        hi = [g[x][n][metric]["max"] - g[x][n][metric]["median"] for x in xs]
        ax.errorbar(xs, med, yerr=[lo, hi], label=n, capsize=2, **style)
        axm.plot(xs, [g[x][n]["max_rss_mb"] for x in xs], label=n, **style)
    for a in (ax, axm):
        a.set_xscale("log")
        a.set_xticks(xs_all)
        a.set_xticklabels([str(x) for x in xs_all])
        a.minorticks_off()
        a.set_xlabel(xlabel)
        a.grid(alpha=0.3)
    if logy:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_ylabel(ylabel)
    axm.set_ylabel("peak RSS of the process (MB)")
    ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")


def kernels(r: dict) -> str:
    """", AVX2 kernels": the CPU kernels torch ran (an instruction-set reproduction shows here), for plot titles."""
    cap = r["env"].get("cpu_capability")
    return f", {cap} kernels" if cap else ""


def report(out: Path, img_dir: Path) -> None:
    lines = []
    dec = [r for r in load(out / "decode.jsonl") if "growth" in r]
    tr = [r for r in load(out / "train.jsonl") if "growth" in r]
    quick = any(r["growth"].get("quick") for r in dec + tr)
    tag = " [--quick smoke run: not a measurement]" if quick else ""
    if dec:
        t, g, names = decode_table(dec)
        lines += ["### Decoding time vs source length" + tag, "", *t, ""]
        r0 = dec[0]
        plot(g, names, "batch_s", f"seconds per batch of {r0['sents']} ({r0['mode']})",
             "source length = output length (tokens)",
             f"Decoding cost vs length: base, random init, {r0['sents']} sentences, {r0['mode']}, "
             f"threads {r0['env'].get('torch_threads')}{kernels(r0)}{tag}", img_dir / "growth_decode.png", logy=True)
    if tr:
        t, g, names = train_table(tr)
        lines += ["### Training throughput vs batch size" + tag, "", *t, ""]
        r0 = tr[0]
        plot(g, names, "tgt_tok_per_s", "target tokens/s", "batch size (target tokens, --tokens)",
             f"Training throughput vs batch size: {r0['config']}, {r0['dtype']}, "
             f"threads {r0['env'].get('torch_threads')}{kernels(r0)}{tag}", img_dir / "growth_train.png", logy=False)
    text = "\n".join(lines)
    print("\n" + text)
    (out / "tables.md").write_text(text + "\n")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--point":
        return point_main(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default="decode,train", help="comma separated: decode, train")
    ap.add_argument("--out", type=Path, default=None,
                    help="results folder (default benchmarks/results/growth-DATE); JSON lines are appended")
    ap.add_argument("--img-dir", type=Path, default=REPO / "docs" / "img")
    ap.add_argument("--threads", type=int, default=2, help="torch threads / CTranslate2 intra_threads")
    ap.add_argument("--max-seconds", type=float, default=20.0,
                    help="wall budget of one point incl. warm-up (the harness always does --min-reps reps)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed batches / steps per point")
    ap.add_argument("--min-reps", type=int, default=2, help="timed batches / steps always done per point")
    ap.add_argument("--timeout", type=float, default=600.0, help="kill a point's process after this many seconds")
    ap.add_argument("--quick", action="store_true", help="2 points per part (smoke check)")
    ap.add_argument("--python", default=sys.executable, help="python with aiayn installed")
    # decode
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"], help="decoding dtype of aiayn and HF Marian")
    ap.add_argument("--ct2-types", default="int8,float32", help="CTranslate2 compute types ('' = none)")
    ap.add_argument("--sents", type=int, default=16)
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--decode-lens", default=",".join(map(str, DECODE_LENS)))
    # train
    ap.add_argument("--config", default="small", choices=["small", "base"])
    ap.add_argument("--train-dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--peer", default="fairseq_wmt", choices=["fairseq_wmt", "torch_nn", "hf_marian", "onmt_tf"])
    ap.add_argument("--train-tokens", default=",".join(map(str, TRAIN_TOKENS)))
    ap.add_argument("--report", type=Path, default=None, metavar="FOLDER",
                    help="measure nothing: tables and plots from FOLDER's decode.jsonl / train.jsonl")
    args = ap.parse_args()

    if args.report:
        return report(args.report, args.img_dir)
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    args.decode_lens = [int(x) for x in args.decode_lens.split(",")]
    args.train_tokens = [int(x) for x in args.train_tokens.split(",")]
    args.ct2_types = [c for c in args.ct2_types.split(",") if c]
    if args.quick:
        args.decode_lens, args.train_tokens = args.decode_lens[:2], args.train_tokens[:2]
    # absolute: every point runs in the harness's folder
    out = (args.out or REPO / "benchmarks" / "results" / f"growth-{datetime.date.today().isoformat()}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    missing = [p for p in {peer_python("hf_marian"), peer_python(args.peer)} if not Path(p).exists()]
    if not HARNESS.exists() or missing:
        raise SystemExit(f"harness {HARNESS} or peer venvs {missing} missing: see {HARNESS}/README.md (setup_peers.sh)")
    t0 = time.time()
    if "decode" in parts:
        run_decode(args, out)
    if "train" in parts:
        run_train(args, out)
    print(f"measured in {time.time() - t0:.0f}s; results in {out}")
    report(out, args.img_dir)


if __name__ == "__main__":
    main()
