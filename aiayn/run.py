"""A run on disk as its trainer holds it: one `Run` per `aiayn train`, opened once and held to the end.

    run = Run.new(folder, main)                 refuses a folder that is a run already or holds anything else; writes
                                                nothing yet (a start that fails later leaves nothing behind)
    with run.create(record, vocab): ...         the folder, the lock (one writer per run), the check again under it,
                                                interrupted writes' temp files removed, vocabulary and config.json
    with Run.resume(folder, saved, main) as run:  the lock; the data checked to be those the run started on
                                                (run.data_dir); a fine-tuning run with no checkpoint yet: its parent
                                                (run.parent), checked unchanged
    run.restore(state)                          where the run stopped: the newest resumable checkpoint (run.latest)
    run.save(state, keep_last), run.save_best(state)   a step checkpoint (older ones dropped); checkpoint_best
    run.open_log(), run.log(kind, step, ...)    log.jsonl and TensorBoard

Leaving the `with` block lets the lock go and closes the log. In a torchrun job every process holds a Run, but only
the main one (`main`) takes the lock and writes; the others read what it wrote. Where each file lies and what it
holds: aiayn.rundir (read by translate, evaluate, export, average, the reports); the checkpoint files themselves:
aiayn.checkpoint.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aiayn import checkpoint as ckpt
from aiayn import rundir
from aiayn.errors import CheckpointError


class Run:
    """One run directory held by its trainer (see the module's docstring)."""

    def __init__(self, folder: Path, main: bool = True):
        self.folder, self.main = Path(folder), main
        self.data_dir: Path | None = None  # a resumed run's data, checked to be those it started on
        self.parent: Path | None = None  # the checkpoint a resumed fine-tuning run with no checkpoint starts from
        self._held = contextlib.ExitStack()  # the lock, from opening to the end of the `with` block
        self._log: rundir.Logger | None = None

    @classmethod
    def new(cls, folder: Path, main: bool = True) -> Run:
        """A run to start in `folder`: missing, empty, or left by a start interrupted before its config.json."""
        run = cls(folder, main)
        if main:
            rundir.check_new(run.folder)
        return run

    def create(self, record: dict[str, Any], vocab_path: Path) -> Run:
        """Create the run on disk (rundir.run_record: what config.json holds; vocab_path: the data's vocabulary)."""
        if self.main:
            self.folder.mkdir(parents=True, exist_ok=True)
        with self._locking():
            if self.main:
                rundir.check_new(self.folder)  # again under the lock: another process may have started it meanwhile
                self._remove_stale_temps()
                rundir.start(self.folder, record, vocab_path)
        return self

    @classmethod
    def resume(cls, folder: Path, saved: dict[str, Any], main: bool = True) -> Run:
        """The run in `folder` (saved: its config.json, rundir.read_config), to continue where it stopped."""
        run = cls(folder, main)
        with run._locking():
            run.data_dir = rundir.check_same_data(run.folder, saved)
            # A fine-tuning run stopped before its first checkpoint starts again from its parent, as it first did.
            run.parent = rundir.check_parent(run.folder, saved) if run.latest is None else None
        return run

    @contextlib.contextmanager
    def _locking(self) -> Iterator[None]:
        """Take the run's lock (main process) for the block, and hold it after it until the run is closed; let it go
        at once if the block fails."""
        with contextlib.ExitStack() as stack:
            if self.main:
                stack.enter_context(rundir.RunLock(self.folder))
            yield
            self._held = stack.pop_all()

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
        self._held.close()

    def _remove_stale_temps(self) -> None:
        removed = rundir.remove_stale_temps(self.folder)
        if removed:
            print(f"removed {len(removed)} temp file(s) that interrupted writes had left in {self.folder} (e.g. "
                  f"{removed[0].name})", flush=True)

    # -----------------------------------------------------------------------------------------------------
    # Step checkpoints and checkpoint_best.

    @property
    def latest(self) -> Path | None:
        """The newest step checkpoint that has its trainer state beside it: where a resume continues."""
        return rundir.latest_checkpoint(self.folder, resumable=True)

    @property
    def best(self) -> Path:
        return self.folder / rundir.BEST

    def save(self, state, keep_last: int) -> Path:
        """A step checkpoint of `state` (a train.TrainState: its model, step and state_dict()), then all but the newest
        `keep_last` step checkpoints dropped. Main process only."""
        path = rundir.step_checkpoint_path(self.folder, state.step)
        ckpt.save_checkpoint(path, state.model.state_dict(), state.model.cfg, state.step, state.state_dict())
        for old in rundir.checkpoint_paths(self.folder)[:-keep_last]:
            old.unlink(missing_ok=True)
            rundir.state_path(old).unlink(missing_ok=True)
        return path

    def save_best(self, state) -> None:
        """checkpoint_best: the weights of `state`'s model at its step. Main process only."""
        ckpt.save_weights(self.best, state.model.state_dict(), state.model.cfg, state.step)

    def restore(self, state) -> None:
        """Where the run stopped: the temp files interrupted writes left are removed (main process), then the newest
        resumable checkpoint, if there is one, is loaded into `state` (a train.TrainState: its model, then
        load_state_dict), each part checked to belong to this run before it is used."""
        if self.main:
            self._remove_stale_temps()
        path = self.latest
        if path is None:
            return
        meta, cfg, shapes = ckpt.read_header(path)
        model = state.model
        if cfg != model.cfg:
            differ = [k for k, v in cfg.to_dict().items() if getattr(model.cfg, k) != v]
            raise CheckpointError(f"{path} holds another model (differs in {', '.join(differ)}) than the run's "
                                  "config.json describes; it does not belong to this run: move it away")
        ckpt.check_shapes(path, cfg, shapes)
        model.load_state_dict(ckpt.load_weights(path)[0])
        trainer = ckpt.load_trainer_state(path)
        if "step" in meta and meta["step"] != str(trainer["step"]):
            raise CheckpointError(f"{path} is step {meta['step']} but its trainer state is step {trainer['step']}; "
                                  f"delete both {path.name} files to resume from the previous checkpoint")
        state.load_state_dict(trainer, path)

    # -----------------------------------------------------------------------------------------------------
    # log.jsonl (and TensorBoard): main process only.

    def open_log(self) -> None:
        """Start appending to the log (a line a kill left torn is cut first)."""
        self._log = rundir.Logger(self.folder, self.main)

    def log(self, kind: str, step: int, **values: Any) -> None:
        self._log.log(kind, step, **values)
