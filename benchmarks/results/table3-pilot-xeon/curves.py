"""Dev PPL by step of the pilot's rows under each protocol, from the copies of their logs in this folder
(<protocol>/<row>/log.jsonl, copied from OUT/<row>/run/log.jsonl by collect.sh), as one markdown table per protocol.
Protocol C, pre-norm, is the study itself: its rows' logs are in ../table3-cpu/<row>/run/log.jsonl.

    python benchmarks/results/2026-11-26-table3-pilot/curves.py
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).parent
STEPS = (200, 400, 600, 800, 1000, 1200, 1400, 1600, 1800, 2000)


def curve(log: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return {r["step"]: r["ppl"] for r in rows if r["kind"] == "valid"}


def main() -> None:
    study = HERE.parent / "table3-cpu"
    for protocol in [*sorted(p for p in HERE.iterdir() if p.is_dir() and p.name != "__pycache__"), study]:
        plan = json.loads((protocol / "plan.json").read_text())
        t = plan["train"]
        print(f"\n{protocol.name}: scale 1/{plan['scale']}, {plan['steps']} steps, lr factor {t['lr_factor']}, "
              f"warm-up {t['warmup']}, anneal {t['anneal']}, {t['max_tokens']} tokens, backbone "
              f"{plan.get('backbone') or 'paper (post-norm)'}\n")
        print("| row | " + " | ".join(map(str, STEPS)) + " |")
        print("|---|" + "---|" * len(STEPS))
        for row in sorted(d for d in protocol.iterdir() if d.is_dir()):
            log = row / "log.jsonl" if (row / "log.jsonl").is_file() else row / "run" / "log.jsonl"
            if not log.is_file():
                continue
            c = curve(log)
            print(f"| {row.name} | " + " | ".join(f"{c[s]:.1f}" if s in c else "" for s in STEPS) + " |")


if __name__ == "__main__":
    sys.exit(main())
