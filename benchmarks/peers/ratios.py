"""aiayn against each peer, as ratios, from one run of the shared harness (the JSON lines `run_peers.sh` writes).

    python -m benchmarks.peers.ratios $RESULTS      # a folder with train.jsonl / infer.jsonl / peak.jsonl

One row per case (training: config x dtype; decoding: search x dtype): aiayn's median throughput, then for every
peer measured in that run (same case) aiayn / peer. Decoding rows also compare against CTranslate2's best compute
type of the same search (it has no bf16 on CPU). Ratios > 1 mean aiayn is faster. Ratios, not absolute numbers,
because absolute times on shared machines drift; within one run the measurements are interleaved.

Each section ends with a peak-memory table in the same case layout: the peak RSS (MB) of the process that took each
measurement (`max_rss_mb`: `ru_maxrss`, so it includes the interpreter, torch and the library's own imports, the
model, the optimizer state for training, and for CTranslate2 its loaded model), one column per implementation, every
case of the run (aiayn's cell is empty where aiayn was not measured). CTranslate2's cells repeat its one measurement
in the fp32 and bf16 rows, as in the ratio table; a CTranslate2 process that had to convert the model first (no cached
--model-dir) also counts the HF model it built for that.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.evidence import read_jsonl

OURS = "aiayn"


def load(path: Path) -> list[dict]:
    return read_jsonl(path)  # the file or its .xz (benchmarks/evidence.py)


def name(r: dict) -> str:
    if str(r.get("adapter", "")).endswith("aiayn_adapter.py") or r.get("impl") == OURS:
        return OURS
    if is_ct2(r):
        return f"CTranslate2 {r.get('ct2_type', r['dtype'])}"
    return r.get("impl") or r.get("adapter")


def is_ct2(r: dict) -> bool:
    return "CTranslate2" in str(r.get("impl"))


def table(rows: list[dict], key, metric: str, unit: str, extra=None) -> list[str]:
    cases: dict[tuple, dict[str, float]] = {}
    for r in rows:
        cases.setdefault(key(r), {})[name(r)] = r[metric]["median"]
    peers = sorted({p for case in cases.values() for p in case if p != OURS})
    out = [f"| case | aiayn {unit} | " + " | ".join(f"vs {p}" for p in peers) + " |",
           "|---|---|" + "---|" * len(peers)]
    for case, got in sorted(cases.items(), key=lambda kv: [str(x) for x in kv[0]]):
        if OURS not in got:
            continue
        ours = got[OURS]
        cells = [f"{ours / got[p]:.2f}x" if p in got else "" for p in peers]
        out.append(f"| {' '.join(map(str, case))} | {ours:,.1f} | " + " | ".join(cells) + " |")
    return out


def memory_table(rows: list[dict], key) -> list[str]:
    """Peak RSS (MB) per case and implementation; a cell for every case x implementation in the run."""
    cases: dict[tuple, dict[str, float]] = {}
    for r in rows:
        if r.get("max_rss_mb") is not None:
            cases.setdefault(key(r), {})[name(r)] = r["max_rss_mb"]
    impls = sorted({p for case in cases.values() for p in case if p != OURS})
    out = ["| case | aiayn MB | " + " | ".join(f"{p} MB" for p in impls) + " |",
           "|---|---|" + "---|" * len(impls)]
    for case, got in sorted(cases.items(), key=lambda kv: [str(x) for x in kv[0]]):
        cells = [f"{got[p]:,.0f}" if p in got else "" for p in [OURS] + impls]
        out.append(f"| {' '.join(map(str, case))} | " + " | ".join(cells) + " |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path)
    args = ap.parse_args()
    train = load(args.results / "train.jsonl")
    if train:
        print("### Training: aiayn target tokens/s and aiayn / peer\n")
        print("\n".join(table(train, lambda r: (r["config"], r["dtype"]), "tgt_tok_per_s", "tok/s")))
        mfu = {(r["config"], r["dtype"]): r["mfu"]["median"] for r in train if name(r) == OURS and r.get("mfu")}
        if mfu:
            print("\naiayn MFU (model FLOP/s / matmul peak of the same dtype, measured in the same run): "
                  + ", ".join(f"{c} {d} {v:.1%}" for (c, d), v in sorted(mfu.items())))
        print("\n### Training: peak RSS of each measurement process (MB)\n")
        print("\n".join(memory_table(train, lambda r: (r["config"], r["dtype"]))))
    infer = load(args.results / "infer.jsonl")
    if infer:
        # CTranslate2 rows carry their compute type instead of fp32/bf16: compare them with every aiayn dtype.
        ct2 = [r for r in infer if is_ct2(r)]
        rest = [r for r in infer if not is_ct2(r)]
        expanded = rest + [dict(r, dtype=d, ct2_type=r["dtype"]) for r in ct2 for d in ("fp32", "bf16")]
        print("\n### Decoding (base, 64 sentences, 30 tokens each): aiayn sentences/s and aiayn / peer\n")
        print("\n".join(table(expanded, lambda r: (r["mode"], r["dtype"]), "sents_per_s", "sents/s")))
        print("\n### Decoding: peak RSS of each measurement process (MB)\n")
        print("\n".join(memory_table(expanded, lambda r: (r["mode"], r["dtype"]))))


if __name__ == "__main__":
    main()
