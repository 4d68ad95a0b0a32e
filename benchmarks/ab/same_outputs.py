"""Does a change keep every output and every speed? For refactors that must compute exactly what they replace.

A small model is trained once on the built-in corpus (the fixture), then each tree of the code records from it the
translations of held-out sentences (fp32 greedy, fp32 beam 4, int8 beam 4, bf16 beam 4 on fewer sentences) and the
losses of a short training from a fixed seed (padded and packed batches, fp32); `compare` says line for line
whether two records agree, and `speed` times decoding in two trees, interleaved round by round (each round one
process per tree, so that both import their own aiayn).

    python -m benchmarks.ab.same_outputs fixture --out /tmp/same --steps 1500
    python -m benchmarks.ab.same_outputs record --fixture /tmp/same --out /tmp/same/before.json   # in tree A
    python -m benchmarks.ab.same_outputs record --fixture /tmp/same --out /tmp/same/after.json    # in tree B
    python -m benchmarks.ab.same_outputs compare /tmp/same/before.json /tmp/same/after.json
    python -m benchmarks.ab.same_outputs speed --fixture /tmp/same --trees /tmp/base . --rounds 5

A tree is a checkout of this repository; a record and a speed round use the aiayn of the tree they run in.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from benchmarks.evidence import read_text
from benchmarks.timing import measure, table

SETTINGS = {  # name -> (precision, beam): what `record` translates
    "fp32_greedy": ("fp32", 1),
    "fp32_beam4": ("fp32", 4),
    "int8_beam4": ("int8", 4),
    "bf16_beam4": ("bf16", 4),
}


def fixture(out: Path, steps: int, seed: int) -> None:
    """Prepare the built-in corpus (4,000 pieces) and train the quickstart's fp32 shape for `steps` steps."""
    from aiayn.data import builtin_corpus, prepare
    from aiayn.quickstart import recipe
    from aiayn.training.train import TrainConfig, train

    raw = builtin_corpus(out / "raw")
    prepare(*raw["train"], out / "data", vocab_size=4000, valid=raw["valid"], test=raw["test"])
    cfg, _, max_tokens = recipe("fp32")
    tc = TrainConfig(max_steps=steps, max_tokens=max_tokens, warmup=400, lr_factor=0.45, anneal=0.3, seed=seed,
                     save_every_minutes=0, save_every_steps=steps, keep_last=1, dtype="fp32", device="cpu",
                     threads=1)
    train(out / "data", out / "run", cfg, tc, progress=False)


def held_out(fixture_dir: Path, n: int) -> list[str]:
    lines = (fixture_dir / "data" / "test.src.txt").read_text(encoding="utf-8").splitlines()
    return lines[:n]


def translations(fixture_dir: Path, setting: str, lines: list[str]) -> list[str]:
    from aiayn.decoding.search import SearchConfig
    from aiayn.decoding.translator import Translator

    precision, beam = SETTINGS[setting]
    # positional: the trees compared may predate the name `precision` (Translator.load's `weights` then)
    translator = Translator.load(fixture_dir / "run", SearchConfig(beam=beam), precision)
    return translator.translate(lines)


def losses(fixture_dir: Path, steps: int, packed: bool, seed: int) -> list[float]:
    """Training losses of the first `steps` steps of a fresh run (the fixture's model shape, fixed seed), one a step."""
    from aiayn.rundir import RunDir, load_for_inference
    from aiayn.training.train import TrainConfig, train

    _, _, cfg = load_for_inference(fixture_dir / "run")
    with tempfile.TemporaryDirectory() as tmp:
        tc = TrainConfig(max_steps=steps, max_tokens=1024, warmup=400, lr_factor=0.45, seed=seed, log_every=1,
                         save_every_minutes=0, save_every_steps=steps, keep_last=1, dtype="fp32", device="cpu",
                         threads=1, packed=packed)
        train(fixture_dir / "data", Path(tmp) / "run", cfg, tc, progress=False)
        return [row["loss"] for row in RunDir(Path(tmp) / "run").log if row["kind"] == "train"]


def record(fixture_dir: Path, out: Path, n: int, n_bf16: int, steps: int, seed: int) -> None:
    torch.set_num_threads(1)
    result = {}
    for setting in SETTINGS:
        lines = held_out(fixture_dir, n_bf16 if setting.startswith("bf16") else n)
        result[setting] = translations(fixture_dir, setting, lines)
    for packed in (False, True):
        result[f"losses_{'packed' if packed else 'padded'}"] = losses(fixture_dir, steps, packed, seed)
    out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def compare(a: Path, b: Path) -> bool:
    """One line per record entry: identical or not (the first differing line, the largest loss difference)."""
    ra, rb = (json.loads(read_text(p)) for p in (a, b))  # FILE or FILE.xz (benchmarks.evidence)
    same = True
    for key in ra:
        x, y = ra[key], rb.get(key)
        if x == y:
            print(f"{key:16} identical ({len(x)} {'losses' if key.startswith('losses') else 'lines'})")
            continue
        same = False
        if key.startswith("losses") and y is not None and len(x) == len(y):
            print(f"{key:16} DIFFER: max |difference| {max(abs(u - v) for u, v in zip(x, y)):.3g}")
        else:
            first = next((i for i, (u, v) in enumerate(zip(x, y or [])) if u != v), None)
            print(f"{key:16} DIFFER at line {first}: {x[first] if first is not None else len(x)!r} vs "
                  f"{y[first] if first is not None and y else y!r}")
    return same


def time_decoding(fixture_dir: Path, n: int, repeats: int) -> dict[str, float]:
    """Median seconds to translate n held-out sentences with each fp32/int8 setting (one thread)."""
    from aiayn.decoding.search import SearchConfig
    from aiayn.decoding.translator import Translator

    torch.set_num_threads(1)
    lines = held_out(fixture_dir, n)
    out = {}
    for setting in ("fp32_greedy", "fp32_beam4", "int8_beam4"):
        precision, beam = SETTINGS[setting]
        translator = Translator.load(fixture_dir / "run", SearchConfig(beam=beam), precision)  # positional: as above
        out[setting] = measure(lambda: translator.translate(lines), repeats=repeats).median  # noqa: B023
    return out


def speed(fixture_dir: Path, trees: list[Path], rounds: int, n: int) -> None:
    """Decoding time in each tree, one process per tree a round, trees interleaved; medians over the rounds."""
    samples = {tree: [] for tree in trees}
    for r in range(rounds):
        for tree in trees if r % 2 == 0 else trees[::-1]:
            code = ("import json, sys; from pathlib import Path; from benchmarks.ab.same_outputs import time_decoding;"
                    f"print(json.dumps(time_decoding(Path({str(fixture_dir)!r}), {n}, 3)))")
            env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}  # this benchmarks package
            env["PYTHONPATH"] = f"{tree.resolve()}{os.pathsep}{env['PYTHONPATH']}"  # the tree's aiayn first
            done = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True,
                                  check=True)
            samples[tree].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"round {r}: {tree}: {samples[tree][-1]}", flush=True)
    base = trees[0]
    rows = []
    for setting in samples[base][0]:
        med = {t: statistics.median(s[setting] for s in samples[t]) for t in trees}
        rows.append([setting, *(f"{med[t]:.3f}" for t in trees), *(f"{med[t] / med[base]:.3f}" for t in trees[1:])])
    print(table(["setting", *(f"s ({t})" for t in trees), *(f"ratio {t}/{base}" for t in trees[1:])], rows))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fixture")
    f.add_argument("--out", type=Path, required=True)
    f.add_argument("--steps", type=int, default=1500)
    f.add_argument("--seed", type=int, default=1)
    r = sub.add_parser("record")
    r.add_argument("--fixture", type=Path, required=True)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--sentences", type=int, default=100)
    r.add_argument("--bf16-sentences", type=int, default=20)
    r.add_argument("--loss-steps", type=int, default=50)
    r.add_argument("--seed", type=int, default=1)
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    s = sub.add_parser("speed")
    s.add_argument("--fixture", type=Path, required=True)
    s.add_argument("--trees", type=Path, nargs="+", required=True)
    s.add_argument("--rounds", type=int, default=5)
    s.add_argument("--sentences", type=int, default=100)
    args = p.parse_args()
    if args.command == "fixture":
        fixture(args.out, args.steps, args.seed)
    elif args.command == "record":
        record(args.fixture, args.out, args.sentences, args.bf16_sentences, args.loss_steps, args.seed)
    elif args.command == "compare":
        sys.exit(0 if compare(args.a, args.b) else 1)
    else:
        speed(args.fixture, args.trees, args.rounds, args.sentences)


if __name__ == "__main__":
    main()
