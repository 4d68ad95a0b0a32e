"""Dev PPL by step of Table 3 rows, one markdown table per results folder: a pilot protocol's rows (<row>/log.jsonl,
copied by `LOGS=1 benchmarks/e2e/table3_sync.sh`) or a finished study's (<row>/result.json's dev curve).

    python -m benchmarks.e2e.table3_curves benchmarks/results/table3-pilot-xeon/* benchmarks/results/table3-xeon
"""

import argparse
import json
from pathlib import Path

from benchmarks.evidence import kept, read_jsonl, read_text

STEPS = (200, 400, 600, 800, 1000, 1200, 1400, 1600, 1800, 2000)


def curve(row: Path) -> dict[int, float]:
    """Dev PPL by step of one row: its training log where copied, else its result's dev curve."""
    log, result = kept(row / "log.jsonl"), kept(row / "result.json")  # either may be kept as .xz
    if log:
        return {r["step"]: r["ppl"] for r in read_jsonl(row / "log.jsonl") if r["kind"] == "valid"}
    if result:
        return {p["step"]: p["dev_ppl"] for p in json.loads(read_text(row / "result.json")).get("dev_curve", [])}
    return {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=Path, help="results folders, each with a plan.json")
    for protocol in ap.parse_args().folders:
        if not (protocol / "plan.json").is_file():
            continue
        plan = json.loads((protocol / "plan.json").read_text())
        t = plan["train"]
        print(f"\n{protocol.name}: scale 1/{plan['scale']}, {plan['steps']} steps, lr factor {t['lr_factor']}, "
              f"warm-up {t['warmup']}, anneal {t['anneal']}, {t['max_tokens']} tokens, backbone "
              f"{plan.get('backbone') or 'paper (post-norm)'}\n")
        print("| row | " + " | ".join(map(str, STEPS)) + " |")
        print("|---|" + "---|" * len(STEPS))
        for row in sorted(d for d in protocol.iterdir() if d.is_dir()):
            c = curve(row)
            if c:
                print(f"| {row.name} | " + " | ".join(f"{c[s]:.1f}" if s in c else "" for s in STEPS) + " |")


if __name__ == "__main__":
    main()
