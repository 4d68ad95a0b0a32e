"""Which aiayn modules a command walks through, in order: how many times the code moves from one module to another,
and how many of those moves climb back up (into a module that is already on the call path below the current one).

Every Python call into a function of the aiayn package is seen (sys.setprofile); a call whose nearest aiayn caller
lies in another module is a move (aiayn/rundir.py -> `rundir`, aiayn/cli/train.py -> `cli.train`). A move is counted
once per pair of functions (caller, callee), in the order first made: a training loop's thousandth step makes no new
move. A climb is a move into a module that already has a frame on the call stack beneath the caller: the code went
down into a module and comes back up into one it has not finished (a callback, or two modules calling each other).
Module-level code run by imports is not counted.

    python -m benchmarks.ab.import_walk quickstart --out /tmp/walk   # aiayn quickstart --max-steps 2 --preset tiny
    python -m benchmarks.ab.import_walk load --run /tmp/walk         # aiayn.decoding.inference.load(run)
    python -m benchmarks.ab.import_walk table before.txt after.txt    # saved reports side by side

Each prints the moves (caller module.function -> callee module.function, "CLIMB" where one climbs), then the
modules in the order first entered with how many moves entered each, then one summary line. `table` reads saved
reports and counts, beside the totals, the moves among the modules that hold a run on disk (RUN_ON_DISK). A
benchmark of the code's structure, not of its speed; it uses the aiayn that `import aiayn` finds (run it in the tree
to measure).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import aiayn
from benchmarks.evidence import read_text
from benchmarks.timing import table

PACKAGE = Path(aiayn.__file__).resolve().parent
RUN_ON_DISK = ("run", "rundir", "checkpoint", "selection")  # the modules a run on disk was spread over
_MOVE = re.compile(r"^ *\d+  ([\w.]+)\.([\w<>]+) -> ([\w.]+)\.([\w<>]+)( +CLIMB)?$")


class Walk:
    """The moves between aiayn's modules during one call (see the module's docstring)."""

    def __init__(self):
        self.moves: list[tuple[str, str, str, str, bool]] = []  # (caller module, caller function, callee ..., climb)
        self._seen: set[tuple[object, object]] = set()
        self._module: dict[str, str | None] = {}  # code file -> aiayn module name, None outside the package

    def module(self, filename: str) -> str | None:
        if filename not in self._module:
            path = Path(filename).resolve()
            name = None
            if path.suffix == ".py" and path.is_relative_to(PACKAGE):
                name = ".".join(path.relative_to(PACKAGE).with_suffix("").parts).removesuffix(".__init__")
            self._module[filename] = name
        return self._module[filename]

    def _profile(self, frame, event, arg) -> None:
        if event != "call" or frame.f_code.co_name == "<module>":
            return
        callee = self.module(frame.f_code.co_filename)
        if callee is None:
            return
        stack = []  # the aiayn modules beneath, nearest first
        caller_code = None
        f = frame.f_back
        while f is not None:
            m = self.module(f.f_code.co_filename)
            if m is not None:
                if caller_code is None:
                    caller_code = f.f_code
                stack.append(m)
            f = f.f_back
        if not stack or stack[0] == callee or (caller_code, frame.f_code) in self._seen:
            return
        self._seen.add((caller_code, frame.f_code))
        climb = callee in stack[1:]
        self.moves.append((stack[0], caller_code.co_name, callee, frame.f_code.co_name, climb))

    def run(self, fn: Callable[[], object]) -> None:
        sys.setprofile(self._profile)
        try:
            fn()
        finally:
            sys.setprofile(None)

    def report(self, title: str) -> str:
        lines = [f"# {title}", "", "moves (caller -> callee, in the order first made):"]
        for i, (a, fa, b, fb, climb) in enumerate(self.moves, 1):
            lines.append(f"{i:4d}  {a}.{fa} -> {b}.{fb}{'   CLIMB' if climb else ''}")
        entered = Counter(b for _, _, b, _, _ in self.moves)
        order = list(dict.fromkeys(b for _, _, b, _, _ in self.moves))
        lines += ["", "modules in the order first entered (moves into each):"]
        lines += [f"  {m:28} {entered[m]}" for m in order]
        climbs = sum(c for *_, c in self.moves)
        lines += ["", f"summary: {len(order)} modules entered, {len(self.moves)} moves, {climbs} climbs back up"]
        return "\n".join(lines)


def summary(report: Path) -> list[str]:
    """One table row of a saved report: modules entered, moves, climbs; moves among RUN_ON_DISK and into each."""
    lines = read_text(report).splitlines()  # FILE or FILE.xz (benchmarks.evidence)
    moves = [(_short(m[1]), _short(m[3]), bool(m[5])) for line in lines if (m := _MOVE.match(line))]
    ours = [(a, b) for a, b, _ in moves if a in RUN_ON_DISK and b in RUN_ON_DISK]
    into = Counter(b for _, b, _ in moves)
    return [report.name.removesuffix(".xz"), str(len({b for _, b, _ in moves})), str(len(moves)),
            str(sum(c for *_, c in moves)), str(len(ours)), " ".join(f"{m} {into[m]}" for m in RUN_ON_DISK if into[m])]


def _short(module: str) -> str:
    """A module's name without the package the decoding and training code moved into (training.checkpoint ->
    checkpoint), so that reports from before and after the move compare row by row."""
    return module.split(".", 1)[1] if module.startswith(("training.", "decoding.")) else module


def walk_quickstart(out: Path) -> Walk:
    from aiayn.cli import main

    w = Walk()
    w.run(lambda: main(["quickstart", "--max-steps", "2", "--preset", "tiny", "--out", str(out), "--no-progress"]))
    return w


def walk_load(run: Path) -> Walk:
    from aiayn.decoding import inference

    w = Walk()
    w.run(lambda: inference.load(run))
    return w


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    q = sub.add_parser("quickstart", help="aiayn quickstart --max-steps 2 --preset tiny --out OUT")
    q.add_argument("--out", type=Path, required=True, help="a new folder for the quickstart")
    lo = sub.add_parser("load", help="aiayn.decoding.inference.load(RUN)")
    lo.add_argument("--run", type=Path, required=True, help="a run directory (e.g. the quickstart's OUT/run)")
    t = sub.add_parser("table", help="saved reports side by side")
    t.add_argument("reports", type=Path, nargs="+")
    args = p.parse_args()
    if args.command == "table":
        print(table(["report", "modules", "moves", "climbs", "moves among run/rundir/checkpoint/selection",
                     "moves into each of them"], [summary(r) for r in args.reports]))
    elif args.command == "quickstart":
        w = walk_quickstart(args.out)
        print(w.report(f"aiayn quickstart --max-steps 2 --preset tiny --out {args.out} ({PACKAGE})"))
    else:
        w = walk_load(args.run)
        print(w.report(f"aiayn.decoding.inference.load({args.run}) ({PACKAGE})"))


if __name__ == "__main__":
    main()
