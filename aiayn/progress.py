"""How a long job shows its progress (training, translating a file, preparing a corpus): one design for all.

On a terminal, a tqdm bar. Elsewhere (a log file, nohup, a pipe) one plain line every `plain_every` seconds with the
same figures, `desc: n/total unit, figure value, ...`, so that a log holds readable lines instead of a bar redrawn
thousands of times. Nothing at all when disabled (--no-progress) or on a process that is not the main one.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO


class Progress:
    """Progress of one job over `total` units (None: unknown), starting at `initial`. stream: where the bar or the
    lines go (default standard error, so that standard output stays the job's own); terminal: whether it is one
    (default: ask the stream)."""

    def __init__(self, desc: str, total: float | None, unit: str, enabled: bool = True, initial: float = 0,
                 plain_every: float = 60.0, terminal: bool | None = None, stream: TextIO | None = None,
                 bar_format: str | None = None):
        self.desc, self.total, self.unit, self.n = desc, total, unit, initial
        self.stream = stream or sys.stderr
        self.bar, self.plain_every, self.last_plain = None, None, time.time()
        if not enabled:
            return
        if not (self.stream.isatty() if terminal is None else terminal):
            self.plain_every = plain_every
            return
        from tqdm.auto import tqdm

        self.bar = tqdm(total=total, initial=initial, desc=desc, unit=f" {unit}", dynamic_ncols=True, mininterval=1.0,
                        file=self.stream, **({"bar_format": bar_format} if bar_format else {}))

    def write(self, msg: str) -> None:
        """A line of its own (above the bar on a terminal)."""
        if self.bar is not None:
            self.bar.write(msg, file=self.stream)
        else:
            print(msg, file=self.stream, flush=True)

    def update(self, n: float = 1, to: float | None = None, line: bool = True, **figures: Any) -> None:
        """Advance by n units (or to `to`), with `figures` shown beside the count. line=False: no plain line now
        (the figures are not new)."""
        new = self.n + n if to is None else to
        if self.bar is not None:
            if figures:
                self.bar.set_postfix(**figures, refresh=False)
            self.bar.update(new - self.n)
        self.n = new
        if line and self.plain_every is not None and time.time() - self.last_plain >= self.plain_every:
            self.last_plain = time.time()
            total = f"/{self.total:.0f}" if self.total is not None else ""
            print(f"{self.desc}: {self.n:.0f}{total} {self.unit}" + "".join(f", {k} {v}" for k, v in figures.items()),
                  file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class TrainingProgress(Progress):
    """Training's progress (`tc`: aiayn.training.train's TrainConfig): counting seconds for a time budget, else steps,
    on standard output; the figures of each logged step beside the count (a plain line only on those steps). silent:
    not the main process (nothing shown)."""

    def __init__(self, tc, step: int, enabled: bool, silent: bool = False, plain_every: float = 60.0,
                 terminal: bool | None = None):
        self.by_time, self.silent = tc.max_minutes > 0, silent
        total = round(tc.max_minutes * 60) if self.by_time else tc.max_steps
        fmt = "{l_bar}{bar}| {n:.0f}/{total} s [{elapsed}<{remaining}{postfix}]" if self.by_time else None
        super().__init__("train", total, "s" if self.by_time else "steps", enabled and not silent,
                         initial=0 if self.by_time else step, plain_every=plain_every, terminal=terminal,
                         stream=sys.stdout, bar_format=fmt)

    def write(self, msg: str) -> None:
        if not self.silent:
            super().write(msg)

    def update(self, elapsed_s: float, **postfix: Any) -> None:
        """One update done, `elapsed_s` into the run; postfix: the figures of a logged step (its step among them)."""
        if self.by_time:
            super().update(to=min(elapsed_s, self.total), line=bool(postfix), **postfix)
        else:
            figures = {k: v for k, v in postfix.items() if k != "step"}
            super().update(to=postfix.get("step", self.n + 1), line=bool(postfix), **figures)
