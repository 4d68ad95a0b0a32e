"""Decoding speed of aiayn beside HF transformers `generate` (Marian) and fairseq, in one run.

Everything is measured by the shared peer harness (../shared/bench/peers, see its README.md): the same 64
random source sentences (length ~25), the base shape (d_model 512, 6+6 layers, 32000 shared vocabulary),
random weights, every hypothesis forced to exactly --n-tokens decoder steps (EOS banned until then), beam 4
with length penalty 0.6 or greedy, fp32 or bf16 autocast, batch 64, 2 torch threads. Each measurement is one
`bench_infer.py` process; measurements run one at a time, interleaved across implementations.

aiayn is measured through the harness adapter `benchmarks/aiayn_adapter.py`.

    python benchmarks/bench_decode.py                        # all cases, aiayn + HF Marian + fairseq
    python benchmarks/bench_decode.py --cases 4:fp32 --peers hf_marian

Peers run in the virtualenvs of `setup_peers.sh` (ROOT=$PEERS, default ~/.cache/aiayn-peers):
HF Marian in $PEERS/venv (or this python if it has `transformers`), fairseq in $PEERS/venv-fairseq. A peer
that cannot be run is reported as such; aiayn's rows are printed regardless. fairseq bf16 is skipped: its CPU
autocast decoding takes minutes per batch (harness README).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HARNESS = Path(os.environ.get("AIAYN_PEERS_HARNESS", REPO.parent / "shared" / "bench" / "peers"))


# ---------------------------------------------------------------------------------------------------------
# The side-by-side run.


def _python_for(impl: str, root: Path) -> tuple[str | None, str]:
    """(python executable, why not) for one implementation."""
    if impl.startswith("aiayn"):
        return sys.executable, ""
    if impl == "fairseq_wmt":
        py = root / "venv-fairseq" / "bin" / "python"
        return (str(py), "") if py.exists() else (None, f"no {py} (run setup_peers.sh with ROOT={root})")
    py = root / "venv" / "bin" / "python"
    if py.exists():
        return str(py), ""
    if impl == "hf_marian" and importlib.util.find_spec("transformers"):
        return sys.executable, ""
    return None, f"no {py} and no `transformers` in this python (run setup_peers.sh with ROOT={root})"


def _measure(impl: str, python: str, beam: int, dtype: str, args) -> tuple[dict | None, str]:
    adapter = str(Path(__file__).resolve().parent / "aiayn_adapter.py") if impl.startswith("aiayn") else impl
    cmd = [python, "bench_infer.py", "--impl", adapter, "--config", args.config, "--beam", str(beam),
           "--dtype", dtype, "--n-tokens", str(args.n_tokens), "--sents", str(args.sents),
           "--max-seconds", str(args.max_seconds), "--reps", str(args.reps)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path)
    if impl.startswith("aiayn"):
        cmd += ["--label", impl]
    try:
        proc = subprocess.run(cmd, cwd=HARNESS, env=env, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {args.timeout} s"
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):]), ""
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
    return None, f"failed (rc {proc.returncode}): {tail[0][:200]}"


def _cell(s: dict, fmt: str) -> str:
    return f"{fmt.format(s['median'])} ({fmt.format(s['min'])}-{fmt.format(s['max'])})"


def print_table(rows: list[dict], notes: list[str]) -> None:
    """The harness's records, side by side (markdown), fastest first within beam 4 / greedy and dtype."""
    if rows:
        r0 = rows[0]
        env = r0["env"]
        print(f"\n{r0['config']} decoding, {r0['sents']} sentences ({r0['src_tokens']} source tokens), "
              f"forced {r0['n_tokens']} output tokens, batch {r0['sents']}; {env.get('cpu', '?')}, torch "
              f"{env.get('torch', '?')}, {env.get('torch_threads', '?')} threads\n")
    print("| implementation | compute | search | batch s | sentences/s | target tok/s | vs HF | hyp len "
          "| others' CPU |")
    print("|---|---|---|---|---|---|---|---|---|")
    hf = {(r["dtype"], r["mode"]): r["tgt_tok_per_s"]["median"] for r in rows if r["adapter"] == "hf_marian"}
    for r in sorted(rows, key=lambda r: (r["mode"] != "beam4", r["dtype"], -r["tgt_tok_per_s"]["median"])):
        mode = "greedy" if r["mode"] == "greedy" else f"{r['mode']}, lp {r['lenpen']}"
        base = hf.get((r["dtype"], r["mode"]))
        vs = f"{r['tgt_tok_per_s']['median'] / base:.2f}x" if base else "-"
        other = r["cpu_contention"]["other_frac"]
        spare = 1 - r["env"]["torch_threads"] / r["env"]["nproc"]  # cores our threads leave to others
        flag = " !" if other > spare + 0.05 else ""  # others took cores our threads needed
        print(f"| {r['impl']} | {r['dtype']} | {mode} | {_cell(r['batch_s'], '{:.2f}')} | "
              f"**{_cell(r['sents_per_s'], '{:.1f}')}** | {_cell(r['tgt_tok_per_s'], '{:.0f}')} | {vs} | "
              f"{r['hyp_len_min']}-{r['hyp_len_max']} | {100 * other:.0f} %{flag} |")
    for note in notes:
        print(f"* {note}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", nargs="+", default=["4:fp32", "1:fp32", "4:bf16", "1:bf16"], help="beam:dtype")
    ap.add_argument("--peers", nargs="*", default=["hf_marian", "fairseq_wmt"],
                    help="harness adapters to run beside aiayn")
    ap.add_argument("--peers-root", type=Path, default=Path(os.environ.get("PEERS", "~/.cache/aiayn-peers")),
                    help="where setup_peers.sh put the peers' virtualenvs (default $PEERS or "
                         "~/.cache/aiayn-peers)")
    ap.add_argument("--config", default="base")
    ap.add_argument("--sents", type=int, default=64)
    ap.add_argument("--n-tokens", type=int, default=30, help="forced output length (decoder steps)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--max-seconds", type=float, default=60.0, help="wall budget of one measurement")
    ap.add_argument("--timeout", type=float, default=300.0, help="kill a measurement after this many seconds")
    ap.add_argument("--threads", type=int, help="torch threads (default: one per core); 1 is robust to a "
                                                "neighbour taking a core, where 2 threads stall each other")
    ap.add_argument("--skip", nargs="*", default=["fairseq_wmt:bf16"], help="impl:dtype pairs not to run")
    ap.add_argument("--out", help="append the harness's JSON records to this file")
    ap.add_argument("--table", help="only print the table of a file written by --out")
    args = ap.parse_args()
    if args.table:
        print_table([json.loads(line) for line in open(args.table) if line.strip()], [])
        return 0
    if not (HARNESS / "common.py").is_file():
        print(f"error: no peer harness at {HARNESS} (set AIAYN_PEERS_HARNESS)", file=sys.stderr)
        return 1
    root = args.peers_root.expanduser()

    impls = ["aiayn", *args.peers]
    pythons = {i: _python_for(i, root) for i in impls}
    rows, notes = [], []
    for case in args.cases:
        beam, dtype = int(case.split(":")[0]), case.split(":")[1]
        for impl in impls:
            python, why = pythons[impl]
            if f"{impl}:{dtype}" in args.skip:
                notes.append(f"{impl} {case}: skipped (--skip)")
                continue
            if python is None:
                notes.append(f"{impl} {case}: not run: {why}")
                continue
            print(f"[{impl} beam {beam} {dtype}] ...", file=sys.stderr, flush=True)
            rec, why = _measure(impl, python, beam, dtype, args)
            if rec is None:
                notes.append(f"{impl} {case}: {why}")
                continue
            rows.append(rec)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps(rec, sort_keys=True) + "\n")

    print_table(rows, notes)
    return 0

if __name__ == "__main__":
    sys.exit(main())
