"""`aiayn serve` against LibreTranslate serving the same run through its Argos export, under load, on real sentences.

    python -m benchmarks.e2e.serve_vs_libretranslate --run RUN --src SRC --lt-python /tmp/ltvenv/bin/python \
        --out DIR [--clients 1,8,32] [--requests 300] [--threads 2] [--lt-compute-types auto] [--aiayn-ct2]
        [--report-only]

The run is exported with `aiayn export --to argos` into DIR, installed into a fresh argostranslate home (DIR/home),
and served by LibreTranslate offline (ARGOS_CHUNK_TYPE=SPACY: the package's own spaCy splitter, `--load-only` the
run's pair), once per --lt-compute-types value (argostranslate's ARGOS_COMPUTE_TYPE; "auto", LibreTranslate's
default: argos-translate-lt 1.12 then passes no compute type, so CTranslate2 runs the exported float32 weights, as
with "default"; "int8" quantizes at load); `aiayn serve` serves the run itself (fp32) with argostranslate's search
(aiayn.export.argos.ARGOS_DECODING: beam 4, |Y|^0.2, CTranslate2's patience 1, at most 256 pieces). Both get
--threads threads: `aiayn serve --workers W --threads T/W` and ARGOS_INTER_THREADS=W, ARGOS_INTRA_THREADS=T/W
(W = --workers, default 1: one model, T threads). With --aiayn-ct2, `aiayn serve` also serves the package's own
CTranslate2 model (its model/ folder, the very weights LibreTranslate decodes with) through CTranslate2: the same
runtime as LibreTranslate's, aiayn's server around it. Each server is started alone, and its start-up is timed: until
it answers, and its first translation (argostranslate loads the model at the first request).

Then, for each --clients count, the same first --requests lines of --src go to each server in turn (LibreTranslate,
aiayn, another LibreTranslate, ...): one line per request (POST /translate {q, source, target}), each client on its
own keep-alive connection waiting for its answer before sending the next (load_server.Connection), for --time-limit
seconds at most. Reported per load: requests/s, p50/p99 latency, lost requests (sent, not answered 200), and how many
answers equal aiayn's at the same client count and the server's own at the first client count. At the first client
count the answers are compared further: both servers cut a line into sentences and translate each alone, with
different splitters (the package's spaCy pipeline, run in --lt-python, against aiayn.serve.segments), and
LibreTranslate reformats each answer (libretranslate.language.improve_translation_formatting: final punctuation and
case follow the source's), so aiayn's answers are also compared once given that formatting.

Writes DIR/requests.jsonl (every request: server, clients, line, status, ms, answer), DIR/loads.jsonl (a row per
load), DIR/servers.jsonl (start-up seconds), DIR/differences.jsonl (the lines whose answers differ at the first
client count, with both splits and aiayn's answer formatted as LibreTranslate would), the LibreTranslate logs, and
prints a markdown table; --report-only prints it again from those files. Both servers are stopped at the end, also
on an error or a signal. Not run in CI (it needs LibreTranslate: `pip install torch==2.13.0` then
`pip install libretranslate==1.9.6 spacy`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.e2e.load_server import (
    REPO,
    Connection,
    cpu_model,
    free_port,
    int_list,
    percentile,
    run_clients,
    start_server,
)
from benchmarks.timing import table

# What argostranslate does at each translation, as aiayn serve flags (aiayn.export.argos.ARGOS_DECODING)
ARGOS_SEARCH = ["--beam", "4", "--lp", "power", "--alpha", "0.2", "--beam-patience", "1", "--max-len-a", "0",
                "--max-len-b", "256", "--min-len", "1"]


class Server:
    """One server under test: its name, process (the leader of its own process group where group), port, and
    start-up seconds."""

    def __init__(self, name: str, proc: subprocess.Popen, port: int, ready_s: float, group: bool):
        self.name, self.proc, self.port, self.ready_s, self.group = name, proc, port, ready_s, group
        self.first_s = float("nan")

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        try:
            if self.group:
                os.killpg(self.proc.pid, signal.SIGTERM)
            else:
                self.proc.terminate()
            self.proc.wait(60)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            self.proc.kill()
            self.proc.wait(30)


async def load(port: int, lines: list[str], clients: int, time_limit: float, pair: dict) -> dict:
    """`clients` loops, each on its own connection sending the next unsent line and waiting for its answer, until
    all are sent or time_limit passes. Returns every request's record and the wall time."""
    records: list[dict] = []
    next_i, deadline = 0, time.perf_counter() + time_limit

    async def client(conn: Connection) -> None:
        nonlocal next_i
        while next_i < len(lines) and time.perf_counter() < deadline:
            i, next_i = next_i, next_i + 1
            t = time.perf_counter()
            try:
                status, answer = await asyncio.wait_for(conn.post("/translate", {"q": lines[i], **pair}),
                                                        max(1.0, deadline - t))
                text, error = (answer.get("translatedText"), None) if status == 200 else (None, str(answer)[:300])
            except Exception as e:  # noqa: BLE001 (a refused, timed-out, cut or unreadable answer: lost)
                conn.close()
                status, text, error = None, None, type(e).__name__
            records.append({"i": i, "status": status, "ms": round(1000 * (time.perf_counter() - t), 2),
                            "answer": text, "error": error})

    wall = await run_clients(port, clients, client)
    return {"records": sorted(records, key=lambda r: r["i"]), "wall": wall}


def wait_until_answers(proc: subprocess.Popen, port: int, path: str, what: str, log: Path, limit: float) -> float:
    """Seconds until GET path answers 200 (the process started just before); SystemExit if it dies or takes longer
    than limit."""
    import httpx

    start = time.monotonic()
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}{path}", timeout=2).status_code == 200:
                return time.monotonic() - start
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() - start > limit:
            raise SystemExit(f"{what} did not start (exit {proc.poll()}); its log: {log}")
        time.sleep(0.5)


def first_translation(port: int, line: str, pair: dict) -> float:
    """Seconds of one request (the first: a lazily loaded model pays its loading here)."""
    import httpx

    t = time.monotonic()
    r = httpx.post(f"http://127.0.0.1:{port}/translate", json={"q": line, **pair}, timeout=300)
    r.raise_for_status()
    return time.monotonic() - t


def lt_env(home: Path, compute_type: str, workers: int, threads: int) -> dict:
    """The environment of LibreTranslate: the inherited one without argostranslate's and LibreTranslate's settings
    (ARGOS_*, LT_*, XDG_*), HOME the fresh argostranslate home."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ARGOS_", "LT_", "XDG_"))}
    env.update(HOME=str(home), ARGOS_CHUNK_TYPE="SPACY", ARGOS_COMPUTE_TYPE=compute_type,
               ARGOS_INTER_THREADS=str(workers), ARGOS_INTRA_THREADS=str(threads // workers))
    return env


def start_libretranslate(lt_python: Path, out: Path, compute_type: str, pair: tuple[str, str], workers: int,
                         threads: int) -> Server:
    port = free_port()
    log = out / f"libretranslate-{compute_type}.log"
    cmd = [str(lt_python.parent / "libretranslate"), "--host", "127.0.0.1", "--port", str(port),
           "--load-only", ",".join(pair)]
    with log.open("w") as f:
        proc = subprocess.Popen(cmd, env=lt_env(out / "home", compute_type, workers, threads), stdout=f,
                                stderr=subprocess.STDOUT, start_new_session=True)
    server = Server(f"LibreTranslate ({compute_type})", proc, port, float("nan"), group=True)
    try:
        server.ready_s = wait_until_answers(proc, port, "/languages", server.name, log, 600)
    except BaseException:
        server.stop()
        raise
    return server


def lt_side(lt_python: Path, out: Path, lines: list[str], aiayn: list[str | None]) -> tuple[list, list]:
    """In LibreTranslate's Python: each line's sentences as the installed package's spaCy splitter cuts them
    (argostranslate's SpacySentencizerSmall, what LibreTranslate runs with ARGOS_CHUNK_TYPE=SPACY), and aiayn's
    answers as LibreTranslate would return them had its model said the same (improve_translation_formatting: the
    source's final . ! ? , ; replaces the translation's, a final one goes where the source has none, a lower-case
    source lower-cases the translation, and the first letter follows the source's)."""
    code = ("import json, sys\nfrom argostranslate import package, sbd\n"
            "from libretranslate.language import improve_translation_formatting as fmt\n"
            "lines, aiayn = json.load(sys.stdin)\n"
            "s = sbd.SpacySentencizerSmall(package.get_installed_packages()[0])\n"
            "print(json.dumps([[s.split_sentences(x) for x in lines],\n"
            "                  [None if a is None else fmt(x, a) for x, a in zip(lines, aiayn)]]))\n")
    r = subprocess.run([str(lt_python), "-c", code], input=json.dumps([lines, aiayn]), capture_output=True,
                       text=True, env=lt_env(out / "home", "default", 1, 1), check=True, timeout=300)
    return json.loads(r.stdout.strip().splitlines()[-1])


def split_aiayn(lines: list[str]) -> list[list[str]]:
    from aiayn.serve.segments import text_pieces

    return [[p.text for p in text_pieces(x) if p.translate] for x in lines]


def versions(lt_python: Path) -> str:
    r = subprocess.run([str(lt_python), "-m", "pip", "list"], capture_output=True, text=True)
    keep = {"libretranslate", "argos-translate-lt", "argostranslate", "ctranslate2", "spacy", "torch",
            "sentencepiece", "waitress"}
    lt = ", ".join(" ".join(line.split()[:2]) for line in r.stdout.splitlines()
                   if line.split() and line.split()[0].lower() in keep)
    import torch

    import aiayn
    return f"LibreTranslate's Python: {lt}; aiayn {aiayn.__version__}, torch {torch.__version__}, " \
           f"Python {platform.python_version()}"


def run_export(run: Path, out: Path, pair: tuple[str, str]) -> Path:
    package = out / f"translate-{pair[0]}_{pair[1]}-1_0.argosmodel"
    package.unlink(missing_ok=True)
    subprocess.run([sys.executable, "-m", "aiayn", "export", "--checkpoint", str(run), "--to", "argos", str(package),
                    "--source-lang", pair[0], "--target-lang", pair[1]], check=True,
                   env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.DEVNULL)
    return package


def install(lt_python: Path, out: Path, package: Path) -> None:
    shutil.rmtree(out / "home", ignore_errors=True)
    (out / "home").mkdir(parents=True)
    subprocess.run([str(lt_python), "-c", "import argostranslate.package as p, sys; p.install_from_path(sys.argv[1])",
                    str(package)], env=lt_env(out / "home", "default", 1, 1), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def summarize(server: str, clients: int, r: dict, reference: dict | None, own_first: dict | None) -> dict:
    """A row of loads.jsonl: counts, rate, latencies; identical: answers equal to `reference`'s (aiayn's, same
    clients) over the lines both answered; stable: equal to the server's own at the first client count."""
    ok = {x["i"]: x["answer"] for x in r["records"] if x["status"] == 200}
    lat = [x["ms"] for x in r["records"] if x["status"] == 200]
    row = {"server": server, "clients": clients, "sent": len(r["records"]), "answered": len(ok),
           "lost": len(r["records"]) - len(ok), "wall_s": round(r["wall"], 2),
           "requests_per_s": round(len(ok) / r["wall"], 2), "p50_ms": round(percentile(lat, 0.5), 1),
           "p99_ms": round(percentile(lat, 0.99), 1), "mean_ms": round(statistics.mean(lat), 1) if lat else None,
           "errors": sorted({x["error"] for x in r["records"] if x["error"]})[:5]}
    for key, other in (("identical", reference), ("stable", own_first)):
        if other is not None:
            both = [i for i in ok if i in other]
            row[key] = [sum(ok[i] == other[i] for i in both), len(both)]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, required=True, help="run directory (or checkpoint) of a trained model")
    ap.add_argument("--src", type=Path, required=True, help="source sentences, one a line (the first --requests)")
    ap.add_argument("--lt-python", type=Path, required=True, help="a Python with libretranslate and spacy")
    ap.add_argument("--out", type=Path, required=True, help="folder for the package, home, logs and JSONL")
    ap.add_argument("--clients", type=int_list, default=[1, 8, 32], help="client counts (default 1,8,32)")
    ap.add_argument("--requests", type=int, default=300, help="requests (lines) per load (default 300)")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                    help="threads of each server, all its workers together (default: usable cores)")
    ap.add_argument("--workers", type=int, default=1,
                    help="aiayn serve --workers, argostranslate's ARGOS_INTER_THREADS (default 1)")
    ap.add_argument("--lt-compute-types", default="auto",
                    help="ARGOS_COMPUTE_TYPE of each LibreTranslate server, comma-separated (default auto: "
                         "LibreTranslate's own; argos-translate-lt 1.12 then runs the exported float32 weights)")
    ap.add_argument("--aiayn-ct2", action="store_true",
                    help="also `aiayn serve` the package's CTranslate2 model (its model/ folder) through CTranslate2")
    ap.add_argument("--time-limit", type=float, default=90.0, help="seconds per load at most (default 90)")
    ap.add_argument("--source-lang", default=None, help="default: the run's recorded pair")
    ap.add_argument("--target-lang", default=None)
    ap.add_argument("--report-only", action="store_true", help="no measurement: the report of --out's JSONL again")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that `finally` stops the servers

    from aiayn.data.folder import run_languages

    pair = (args.source_lang, args.target_lang)
    if None in pair:
        pair = run_languages(args.run) or sys.exit("the run records no language pair: give --source-lang/--target-lang")
    body = {"source": pair[0], "target": pair[1]}
    lines = [x for x in args.src.read_text(encoding="utf-8").splitlines() if x.strip()][: args.requests]
    if args.report_only:
        return report(args, lines)
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: {' '.join(sys.argv)}")
    print(f"# {cpu_model()}, CPUs {sorted(os.sched_getaffinity(0))} of {os.cpu_count()}; load average "
          f"{os.getloadavg()[0]:.2f} before; {versions(args.lt_python)}", flush=True)

    t = time.monotonic()
    package = run_export(args.run, args.out, pair)
    install(args.lt_python, args.out, package)
    print(f"# export + install: {time.monotonic() - t:.1f} s ({package.name}, {package.stat().st_size / 1e6:.1f} MB)")
    servers: list[Server] = []
    loads, requests_out = [], (args.out / "requests.jsonl").open("w", encoding="utf-8")
    try:
        flags = ARGOS_SEARCH + ["--workers", str(args.workers), "--threads", str(args.threads // args.workers),
                                "--source-lang", pair[0], "--target-lang", pair[1]]
        t = time.monotonic()
        proc, port = start_server(args.run, flags)
        servers.append(Server("aiayn", proc, port, time.monotonic() - t, group=False))
        servers[-1].first_s = first_translation(port, lines[0], body)
        for ct in args.lt_compute_types.split(","):
            servers.append(start_libretranslate(args.lt_python, args.out, ct, pair, args.workers, args.threads))
            servers[-1].first_s = first_translation(servers[-1].port, lines[0], body)
        if args.aiayn_ct2:  # the package's model/ folder: aiayn.json there names its pair
            shutil.rmtree(args.out / "unzipped", ignore_errors=True)
            shutil.unpack_archive(package, args.out / "unzipped", "zip")
            t = time.monotonic()
            proc, port = start_server(args.out / "unzipped" / package.stem / "model", flags)
            servers.append(Server("aiayn (CTranslate2)", proc, port, time.monotonic() - t, group=False))
            servers[-1].first_s = first_translation(port, lines[0], body)
        order = servers[1:2] + servers[:1] + servers[2:]  # LibreTranslate, aiayn, another LibreTranslate, ...
        for s in order:  # warm-up: a few concurrent requests each
            asyncio.run(load(s.port, lines[:8], 4, args.time_limit, body))
        answers: dict[tuple[str, int], dict] = {}
        for clients in args.clients:
            results = {}
            for s in order:
                results[s.name] = r = asyncio.run(load(s.port, lines, clients, args.time_limit, body))
                answers[s.name, clients] = {x["i"]: x["answer"] for x in r["records"] if x["status"] == 200}
                for x in r["records"]:
                    requests_out.write(json.dumps({"server": s.name, "clients": clients, **x},
                                                  ensure_ascii=False) + "\n")
            for s in order:
                first = None if clients == args.clients[0] else answers[s.name, args.clients[0]]
                ref = None if s.name == "aiayn" else answers["aiayn", clients]
                loads.append(summarize(s.name, clients, results[s.name], ref, first))
                print(json.dumps(loads[-1], ensure_ascii=False), flush=True)
        with (args.out / "loads.jsonl").open("w", encoding="utf-8") as f:
            f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in loads)
    finally:
        for s in servers:
            s.stop()
        requests_out.close()
        with (args.out / "servers.jsonl").open("w") as f:
            f.writelines(json.dumps({"server": s.name, "answers_after_s": round(s.ready_s, 2),
                                     "first_translation_s": round(s.first_s, 3)}) + "\n" for s in servers)
    print(f"# load average {os.getloadavg()[0]:.2f} after")
    report(args, lines)


def report(args: argparse.Namespace, lines: list[str]) -> None:
    """The table, start-up seconds, and the answers compared at the first client count, from --out's JSONL."""
    def rows(name):
        return [json.loads(x) for x in (args.out / name).read_text(encoding="utf-8").splitlines()]

    def frac(x):
        return f"{x[0]}/{x[1]}" if x else "-"

    loads, servers = rows("loads.jsonl"), rows("servers.jsonl")
    print(f"\n{len(lines)} lines of {args.src}, one a request; {args.threads} thread(s) a server ({args.workers} "
          f"worker(s) / ARGOS_INTER_THREADS)")
    print(table(["clients", "server", "requests", "lost", "requests/s", "p50 ms", "p99 ms", "answers = aiayn's",
                 f"= its own at {args.clients[0]} client(s)"],
                [[r["clients"], r["server"], r["sent"], r["lost"], f"{r['requests_per_s']:.1f}", f"{r['p50_ms']:.0f}",
                  f"{r['p99_ms']:.0f}", frac(r.get("identical")), frac(r.get("stable"))] for r in loads]))
    print("\n" + table(["server", "answers GET after (s)", "first translation (s)"],
                       [[s["server"], f"{s['answers_after_s']:.1f}", f"{s['first_translation_s']:.2f}"]
                        for s in servers]))
    first = args.clients[0]
    answers: dict[str, list[str | None]] = {s["server"]: [None] * len(lines) for s in servers}
    for r in rows("requests.jsonl"):
        if r["clients"] == first and r["status"] == 200:
            answers[r["server"]][r["i"]] = r["answer"]
    ai = answers["aiayn"]
    lt_split, ai_formatted = lt_side(args.lt_python, args.out, lines, ai)
    ai_split = split_aiayn(lines)
    alike = [[x.strip() for x in a] == [x.strip() for x in b] for a, b in zip(lt_split, ai_split)]
    print(f"\nlines cut into several sentences: LibreTranslate's spaCy {sum(len(a) > 1 for a in lt_split)}, aiayn "
          f"{sum(len(b) > 1 for b in ai_split)}; cut alike by both: {sum(alike)}/{len(lines)}")
    with (args.out / "differences.jsonl").open("w", encoding="utf-8") as f:
        for name, lt in answers.items():
            if name.startswith("aiayn ("):  # aiayn serving the package's model: the same answers, or not
                both = [i for i in range(len(lines)) if lt[i] is not None and ai[i] is not None]
                print(f"{name} vs aiayn at {first} client(s): answers identical {sum(lt[i] == ai[i] for i in both)}/"
                      f"{len(both)}")
            if not name.startswith("LibreTranslate"):
                continue
            both = [i for i in range(len(lines)) if lt[i] is not None and ai[i] is not None]
            cut = [i for i in both if alike[i]]
            print(f"{name} vs aiayn at {first} client(s): answers identical {sum(lt[i] == ai[i] for i in both)}/"
                  f"{len(both)}; identical once LibreTranslate's formatting is applied to aiayn's: "
                  f"{sum(lt[i] == ai_formatted[i] for i in both)}/{len(both)} (on the lines both cut alike "
                  f"{sum(lt[i] == ai_formatted[i] for i in cut)}/{len(cut)}, on the others "
                  f"{sum(lt[i] == ai_formatted[i] for i in both if not alike[i])}/{len(both) - len(cut)}); of the "
                  f"lines both cut alike still different, with a generated <unk> (aiayn writes ⁇, argostranslate a "
                  f"source word): {sum(lt[i] != ai_formatted[i] and '⁇' in ai[i] for i in cut)}")
            f.writelines(json.dumps({"server": name, "i": i, "src": lines[i], "lt": lt[i], "aiayn": ai[i],
                                     "aiayn_lt_formatted": ai_formatted[i], "lt_sentences": lt_split[i],
                                     "aiayn_sentences": ai_split[i]}, ensure_ascii=False) + "\n"
                         for i in both if lt[i] != ai[i])


if __name__ == "__main__":
    main()
