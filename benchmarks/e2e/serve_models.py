"""Many pairs in one `aiayn serve`: the server's peak memory with 20 models, under a budget of models and without
one, and what a request pays when its model is not loaded.

    python -m benchmarks.e2e.serve_models --run /work/runs/quickstart/run \
        --src /work/runs/quickstart/data/test.src.txt --budgets 0,2,4,8 --rounds 3 --out /tmp/serve-models

The 20 "pairs" (en -> 10 languages, 10 others -> en, as --checkpoint SRC:TGT=RUN: 11 source languages, so the
detector holds 11 languages' models) are the one run served 20 times: each pair loads its own copy of the model, as
20 different models would, and the answers can be checked against each other. Per
budget (--max-models N; 0: none): a fresh `aiayn serve --workers 1 --threads 1`, then --rounds rounds over the 20
pairs in a fixed shuffled order, one request of 4 sentences at a time (so with a budget below 20 almost every request
loads its model: the worst case, a client that never asks for the same pair twice in a row); the server's peak RSS
(VmHWM of /proc/PID/status) and RSS at the end, the requests' median and p90 seconds split into those that loaded
their model and those that did not, and /info's loaded count. The budget's memory is the models' weights; the rest
of the process (torch, the detector's language models, allocator caches) comes on top.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

OTHERS = ["bg", "ca", "cs", "da", "de", "el", "es", "et", "fi", "fr", "hu", "it", "lt", "lv", "nl", "pl", "pt",
          "ro", "sk", "sv"]
PAIRS = [("en", x) for x in OTHERS[:10]] + [(x, "en") for x in OTHERS[10:]]  # 20 pairs, 11 source languages


def proc_status(pid: int, field: str) -> float:
    """A /proc/PID/status field in MB (VmHWM: peak RSS, VmRSS: now)."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(run: str, budget: int, port: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "aiayn", "serve", "--port", str(port), "--workers", "1", "--threads", "1",
           "--log-level", "warning", "--device", "cpu"]
    cmd += [flag for s, t in PAIRS for flag in ("--checkpoint", f"{s}:{t}={run}")]
    if budget:
        cmd += ["--max-models", str(budget)]
    proc = subprocess.Popen(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.monotonic() + 120
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
            return proc
        except httpx.TransportError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the server did not start") from None
            time.sleep(0.2)


def one_budget(run: str, lines: list[str], budget: int, rounds: int) -> dict:
    port = free_port()
    proc = start(run, budget, port)
    base = f"http://127.0.0.1:{port}"
    rng = random.Random(0)
    cold, warm, answers = [], [], {}
    try:
        with httpx.Client(timeout=120) as client:
            for r in range(rounds):
                order = PAIRS[:]
                rng.shuffle(order)
                for k, (source, target) in enumerate(order):
                    q = lines[(4 * (r * len(PAIRS) + k)) % len(lines):][:4]
                    loads = client.get(base + "/info").json()
                    was = next(m["loaded"] for m in loads["models"] if (m["source"], m["target"]) == (source, target))
                    t = time.perf_counter()
                    got = client.post(base + "/translate", json={"q": q, "source": source, "target": target})
                    took = time.perf_counter() - t
                    assert got.status_code == 200, got.text
                    (warm if was else cold).append(took)
                    answers.setdefault(tuple(q), set()).add(tuple(got.json()["translatedText"]))
            info = client.get(base + "/info").json()
        peak, now = proc_status(proc.pid, "VmHWM"), proc_status(proc.pid, "VmRSS")
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    weights = [m["weights_mb"] for m in info["models"] if m["weights_mb"]]
    return {"max_models": budget, "requests": len(cold) + len(warm), "loaded_at_end": info["loaded_models"],
            "model_weights_mb": weights[0] if weights else None, "peak_rss_mb": round(peak, 1),
            "end_rss_mb": round(now, 1), "cold_requests": len(cold), "warm_requests": len(warm),
            "cold_p50_s": _q(cold, 0.5), "cold_p90_s": _q(cold, 0.9), "warm_p50_s": _q(warm, 0.5),
            "warm_p90_s": _q(warm, 0.9), "same_answer_on_every_pair": all(len(a) == 1 for a in answers.values())}


def _q(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    return round(statistics.quantiles(xs, n=10)[int(q * 10) - 1] if len(xs) > 1 else xs[0], 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True, help="the run served as each of the 20 pairs")
    ap.add_argument("--src", required=True, help="source sentences, one a line")
    ap.add_argument("--budgets", default="0,2,4,8", help="--max-models values to measure (0: no budget)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds over the 20 pairs per budget")
    ap.add_argument("--out", type=Path, help="folder for results.jsonl")
    args = ap.parse_args()
    lines = [line for line in Path(args.src).read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = []
    print("| --max-models | requests | loaded at end | peak RSS MB | RSS at end MB | cold p50 / p90 s | "
          "warm p50 / p90 s | same answers |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    for budget in (int(b) for b in args.budgets.split(",")):
        row = one_budget(args.run, lines, budget, args.rounds)
        rows.append(row)
        print(f"| {budget or 'none'} | {row['requests']} | {row['loaded_at_end']} | {row['peak_rss_mb']} | "
              f"{row['end_rss_mb']} | {row['cold_p50_s']} / {row['cold_p90_s']} ({row['cold_requests']}) | "
              f"{row['warm_p50_s']} / {row['warm_p90_s']} ({row['warm_requests']}) | "
              f"{row['same_answer_on_every_pair']} |", flush=True)
    print(f"one model's weights: {rows[0]['model_weights_mb']} MB")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


if __name__ == "__main__":
    main()
