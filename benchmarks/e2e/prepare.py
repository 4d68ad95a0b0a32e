"""Measure the data pipeline: `aiayn prepare` at scale, and padding of length-grouped batches.

    python -m benchmarks.e2e.prepare scale       # 1M synthetic pairs (real text repeated): pairs/s, peak RSS
    python -m benchmarks.e2e.prepare padding   # share of real tokens per batch on Multi30k train

`scale` runs prepare twice in fresh processes, on N/4 and N pairs, fits time and peak memory as
a + b * pairs and extrapolates to WMT14's 4.5M pairs. The vocabulary is trained on a fixed-size sample,
so its cost does not grow with the corpus. Results go to stdout as Markdown (docs/data.md quotes them).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from aiayn.files import read_lines
from benchmarks.timing import once

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = REPO / "../shared/data"
WMT14_PAIRS = 4_500_000

CHILD = """
import json, resource, sys
from aiayn.data import prepare
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
meta = prepare(*sys.argv[1:4], vocab_size=int(sys.argv[4]), vocab_sample=int(sys.argv[5]))
result = {"import_rss_kb": base, "seconds": meta["seconds"], "train": meta["splits"]["train"]}
print("RESULT " + json.dumps(result))
"""


def real_share(batches: list[list[int]], lengths: np.ndarray) -> float:
    """Real tokens / padded tokens over all batches, for one side."""
    return sum(int(lengths[b].sum()) for b in batches) / sum(len(b) * int(lengths[b].max()) for b in batches)


def synthetic_corpus(src: Path, tgt: Path, out_dir: Path, pairs: int) -> tuple[Path, Path]:
    """The first `pairs` lines of src/tgt repeated as often as needed."""
    lines = [p.read_bytes().splitlines(keepends=True) for p in (src, tgt)]
    out = (out_dir / f"synthetic.{pairs}.src", out_dir / f"synthetic.{pairs}.tgt")
    for side, path in enumerate(out):
        reps, rest = divmod(pairs, len(lines[side]))
        with open(path, "wb") as f:
            for _ in range(reps):
                f.writelines(lines[side])
            f.writelines(lines[side][:rest])
    return out


def run_prepare(src: Path, tgt: Path, out: Path, vocab_size: int, vocab_sample: int) -> dict:
    """prepare() in a fresh process; adds wall time and the child's peak RSS."""
    proc, wall = once(lambda: subprocess.run(
        [sys.executable, "-c", CHILD, str(src), str(tgt), str(out), str(vocab_size), str(vocab_sample)],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
    ))
    if proc.returncode:
        sys.exit(proc.stderr)
    result = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])
    # RUSAGE_CHILDREN is the largest of all children so far; runs go from small to large, so it is this one
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    result["import_rss_mb"] = result.pop("import_rss_kb") / 1024
    result["wall_s"] = wall
    return result


def scale(args: argparse.Namespace) -> None:
    from aiayn.data import TokenBatchSampler, Vocab, load_split

    src, tgt = (Path(f"{args.corpus}.{lang}") for lang in args.langs.split("-"))
    sizes = [args.pairs // 4, args.pairs]
    print(f"machine: {platform.processor() or platform.machine()}, {len(os.sched_getaffinity(0))} cores; "
          f"corpus: {src.name}/{tgt.name} repeated; vocabulary {args.vocab_size:,} pieces on a "
          f"{args.vocab_sample:,}-sentence sample\n")
    print("| pairs | check s | vocab s | tokenize s | total s | pairs/s (total) | pairs/s (w/o vocab) "
          "| peak RSS MB | RSS after imports MB |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        results = []
        for n in sizes:
            paths = synthetic_corpus(src, tgt, Path(tmp), n)
            r = run_prepare(*paths, Path(tmp) / f"prepared.{n}", args.vocab_size, args.vocab_sample)
            s = r["seconds"]
            total, streamed = sum(s.values()), s["check"] + s["tokenize"]
            print(f"| {n:,} | {s['check']:.1f} | {s['vocab']:.1f} | {s['tokenize']:.1f} | {total:.1f} "
                  f"| {n / total:,.0f} | {n / streamed:,.0f} | {r['peak_rss_mb']:.0f} "
                  f"| {r['import_rss_mb']:.0f} |", flush=True)
            results.append((n, streamed, s["vocab"], r["peak_rss_mb"], r["train"]))
            for path in paths:
                path.unlink()

        (n0, t0, _, m0, _), (n1, t1, vocab_s, m1, train) = results
        per_pair_s, per_pair_mb = (t1 - t0) / (n1 - n0), (m1 - m0) / (n1 - n0)
        print(f"\n{n1:,}-pair run: kept {train['kept']:,} of {train['read']:,} pairs, dropped "
              f"{train['dropped']}; {train['src_tokens']:,} source and {train['tgt_tokens']:,} target tokens")
        est_s = t1 + per_pair_s * (WMT14_PAIRS - n1) + vocab_s
        est_mb = m1 + per_pair_mb * (WMT14_PAIRS - n1)
        print(f"linear fit: {1e6 * per_pair_s:.1f} s and {1e6 * per_pair_mb:.0f} MB per million pairs "
              f"(beyond the vocabulary and imports)")
        print(f"extrapolated to {WMT14_PAIRS:,} pairs: ~{est_s / 60:.1f} min, peak RSS ~{est_mb:,.0f} MB "
              f"(plus vocabulary training, which grows with --vocab-sample, not with the corpus)")

        # Repeated text makes the vocabulary sample cheap (few distinct sentences): time it on distinct text.
        files = [f"{corpus}.{lang}" for corpus in ("bible-en-de/web-elb1905", "multi30k/train",
                                                    "iwslt16-de-en/train-sample", "toy-ende-wmt/train")
                 for lang in ("en", "de")]
        lines = sorted({line for f in files for line in read_lines(SHARED_DATA / f) if line.strip()})
        _, seconds = once(lambda: Vocab.train(lines, tmp, args.vocab_size))
        print(f"vocabulary training on {len(lines):,} distinct real EN/DE sentences (all of ../shared/data's "
              f"EN-DE training text), {args.vocab_size:,} pieces: {seconds:.1f} s")

        # The sampler at WMT14 size: the 1M split's lengths tiled to 4.5M pairs.
        ds = load_split(Path(tmp) / f"prepared.{n1}", "train")
        reps = -(-WMT14_PAIRS // len(ds))
        src_len, tgt_len = (np.tile(x, reps)[:WMT14_PAIRS] for x in (ds.src_lengths, ds.tgt_lengths))
        n_batches, seconds = once(lambda: len(TokenBatchSampler(src_len, tgt_len, max_tokens=25_000, seed=1,
                                                                world_size=8)))
        print(f"TokenBatchSampler on {WMT14_PAIRS:,} pairs, 25,000 tokens, 8 ranks: one epoch's batches "
              f"({8 * n_batches:,}) in {seconds:.1f} s")
        batches = list(TokenBatchSampler(ds.src_lengths, ds.tgt_lengths, max_tokens=25_000, seed=1))
        print(f"real tokens in the {n1:,}-pair split's batches at 25,000 tokens: "
              f"{100 * real_share(batches, ds.src_lengths):.1f}% source, "
              f"{100 * real_share(batches, ds.tgt_lengths):.1f}% target")


def padding(args: argparse.Namespace) -> None:
    from aiayn.data import TokenBatchSampler, load_split, prepare

    m30k = SHARED_DATA / "multi30k"
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        prepare(m30k / "train.en", m30k / "train.de", Path(tmp) / "m30k", vocab_size=args.vocab_size)
        ds = load_split(Path(tmp) / "m30k", "train")
    print(f"\nMulti30k train EN->DE, {len(ds):,} pairs, {args.vocab_size:,}-piece BPE\n")
    print("| max_tokens | batches | pairs/batch | real source tokens | real target tokens |")
    print("|---|---|---|---|---|")
    for max_tokens in (4096, 25_000):
        batches = list(TokenBatchSampler(ds.src_lengths, ds.tgt_lengths, max_tokens=max_tokens, seed=1))
        share = [real_share(batches, lengths) for lengths in (ds.src_lengths, ds.tgt_lengths)]
        print(f"| {max_tokens:,} | {len(batches)} | {len(ds) / len(batches):.0f} | {100 * share[0]:.1f}% "
              f"| {100 * share[1]:.1f}% |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("scale", help="prepare on N/4 and N synthetic pairs; extrapolate to 4.5M")
    p.add_argument("--pairs", type=int, default=1_000_000)
    p.add_argument("--corpus", default=str(SHARED_DATA / "bible-en-de/web-elb1905"),
                   help="path prefix of the real text to repeat (default: %(default)s)")
    p.add_argument("--langs", default="en-de", help="file suffixes: source-target (default: %(default)s)")
    p.add_argument("--vocab-size", type=int, default=37_000)
    p.add_argument("--vocab-sample", type=int, default=200_000,
                   help="sentences the vocabulary trains on (prepare's default: 1M)")
    p.add_argument("--tmp", default=None, help="directory for the synthetic corpus (needs ~1 GB)")
    p.set_defaults(func=scale)
    p = sub.add_parser("padding", help="share of real tokens in batches on Multi30k train")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--tmp", default=None)
    p.set_defaults(func=padding)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
