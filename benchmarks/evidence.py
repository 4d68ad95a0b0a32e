"""The evidence folders (benchmarks/results): raw outputs kept compressed, and readers that do not care.

    python -m benchmarks.evidence compress benchmarks/results/NEW-FOLDER   # xz every raw text file over 1 kB
    python -m benchmarks.evidence share                                    # evidence's share of the repository

A raw output is committed as written, but a text file over 1 kB (per-step logs, JSON lines, hypotheses) is kept as
FILE.xz: `xz -d -k FILE.xz` or `xzless FILE.xz` reads it, and `read_text(path)` here reads FILE or FILE.xz, so the
scripts that redraw tables and figures from a results folder take either. README.md and figures stay as they are.
The files `aiayn paper --from` reads in the folders it reuses (Table 1, Table 3, the parser) stay uncompressed.
tests/test_docs.py keeps the evidence at most a fifth of the repository's bytes.
"""

from __future__ import annotations

import argparse
import json
import lzma
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
LARGEST_RAW = 1_000  # bytes: a raw text file larger than this is kept compressed
KEPT_AS_IS = (".md", ".png", ".jpg", ".svg", ".xz")
# `aiayn paper --from` reuses these folders and reads these files of them (the rest, e.g. worker logs, is kept as .xz)
READ_BY_AIAYN = ("table1-xeon", "table3-xeon", "parsing-xeon")
AIAYN_READS = ("table1.json", "plan.json", "result.json", "summary.json", "eval.log", "config.json", "log.jsonl")
MOST_SHARE = 0.20


def kept(path: str | Path) -> Path | None:
    """`path`, or `path`.xz where only the compressed file is kept; None if neither is there."""
    path = Path(path)
    for found in (path, path.with_name(path.name + ".xz")):
        if found.is_file():
            return found
    return None


def read_text(path: str | Path) -> str:
    """The text of `path` (decompressed if it is FILE.xz), or of `path`.xz where only the compressed file is kept."""
    found = kept(path) or Path(path)
    if found.suffix == ".xz":
        return lzma.decompress(found.read_bytes()).decode("utf-8")
    return found.read_text(encoding="utf-8")


def read_jsonl(path: str | Path) -> list[dict]:
    """The JSON lines of `path` (or `path`.xz); [] when neither exists."""
    if kept(path) is None:
        return []
    return [json.loads(line) for line in read_text(path).splitlines() if line.strip()]


def compressible(folder: Path) -> list[Path]:
    """The raw text files of `folder` that should be kept as .xz (not those `aiayn paper --from` reads)."""
    read = Path(folder).resolve().name in READ_BY_AIAYN
    return sorted(p for p in Path(folder).rglob("*") if p.is_file() and p.suffix not in KEPT_AS_IS
                  and p.stat().st_size > LARGEST_RAW and not (read and (p.name in AIAYN_READS or p.suffix == ".trees")))


def compress(folder: Path) -> list[Path]:
    """Replace each compressible file of `folder` by FILE.xz (xz -9e); returns the new files."""
    done = []
    for path in compressible(folder):
        xz = path.with_name(path.name + ".xz")
        xz.write_bytes(lzma.compress(path.read_bytes(), preset=9 | lzma.PRESET_EXTREME))
        path.unlink()
        done.append(xz)
    return done


def tracked_bytes(repo: Path = REPO) -> tuple[int, int]:
    """(bytes of benchmarks/results, bytes of the repository), over the files git tracks."""
    names = subprocess.run(["git", "ls-files", "-z"], cwd=repo, capture_output=True, check=True).stdout
    sizes = {name: (repo / name).stat().st_size for name in names.decode().split("\0") if (repo / name).is_file()}
    evidence = sum(size for name, size in sizes.items() if name.startswith("benchmarks/results/"))
    return evidence, sum(sizes.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    sub.add_parser("compress", help="xz the raw text files over 1 kB of results folders").add_argument(
        "folders", nargs="+", type=Path)
    sub.add_parser("share", help="the evidence's share of the repository's tracked bytes")
    args = ap.parse_args()
    if args.what == "compress":
        for folder in args.folders:
            for path in compress(folder):
                print(path)
    else:
        evidence, total = tracked_bytes()
        print(f"benchmarks/results: {evidence:,} of {total:,} bytes ({evidence / total:.1%}; at most "
              f"{MOST_SHARE:.0%})")


if __name__ == "__main__":
    main()
