"""Many machines, exercised on this one: two torchrun agents ("nodes", one gloo worker each) meeting at a c10d
rendezvous on localhost train as one process with --update-freq 2 does; a worker killed with SIGKILL is restarted
with its group by torchrun (--max-restarts 1), and `aiayn train --resume-if-exists` continues the run from its last
checkpoint to the weights of the uninterrupted run, bit for bit; the same for one process relaunched by hand.

Every run trains the same 40 steps (checkpoints every 10) without dropout, so that one process with --update-freq 2
and two processes are comparable (their dropout masks would differ: they are seeded per rank). Resuming with dropout
is tested in test_train.py::test_resume_after_sigkill_is_bit_exact."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import torch
from test_train import TINY_ARGS, _cli, _env, _weights

from aiayn import rundir
from aiayn.cli import main
from aiayn.rundir import RunDir

STEPS, SAVE_EVERY, KILL_AFTER = 40, 10, 13  # the kill comes once step 13 is logged: steps 11-13 are trained again


def _args(data: Path, out: Path) -> list[str]:
    """The one command every launch below runs (the same when relaunched)."""
    return ["train", "--data", str(data), "--out", str(out), "--resume-if-exists", "--max-steps", str(STEPS),
            "--save-every-steps", str(SAVE_EVERY), "--set", "dropout=0.0", *TINY_ARGS, "--log-every", "1"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _start_nodes(data: Path, out: Path, logs: Path, max_restarts: int) -> list[subprocess.Popen]:
    """Two torchrun agents, as two machines would start them (localhost standing for the head node's address).
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: without it the restarted workers bootstrap from the rendezvous store of the
    failed attempt and fail to connect (gloo: connection refused; torch 2.13, as pytorch/pytorch#135712 describes)."""
    port, rdzv_id = _free_port(), uuid.uuid4().hex[:8]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"localhost:{port}", "--rdzv-id", rdzv_id,
           "--max-restarts", str(max_restarts), "-m", "aiayn", *_args(data, out)]
    env = {**_env(), "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    return [subprocess.Popen(cmd, env=env, stdout=open(logs / f"node{i}.log", "w"), stderr=subprocess.STDOUT)
            for i in range(2)]


def _wait(procs: list[subprocess.Popen], logs: Path, timeout: float = 240) -> None:
    """Both agents end with 0; else they are stopped (SIGTERM: an agent stops its workers) and the test fails."""
    deadline = time.time() + timeout
    try:
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.time()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
    tails = "\n".join(f"{f.name}: {f.read_text()[-2000:]}" for f in sorted(logs.glob("node*.log")))
    assert [p.returncode for p in procs] == [0, 0], tails


def _logged_steps(run: Path) -> list[int]:
    path = run / rundir.LOG
    if not path.is_file():
        return []
    lines = path.read_text().split("\n")[:-1]  # complete lines only: the last one may be half-written
    return [r["step"] for r in map(json.loads, lines) if r["kind"] == "train"]


def _trained_twice(run: Path) -> list[int]:
    """The steps log.jsonl shows twice: those after the checkpoint a run resumed from, up to where it was killed."""
    steps = _logged_steps(run)
    assert sorted(set(steps)) == list(range(1, STEPS + 1))
    return sorted({s for s in steps if steps.count(s) == 2})


def _wait_for_step(run: Path, step: int, procs: list[subprocess.Popen], timeout: float = 240) -> None:
    deadline = time.time() + timeout
    while not any(s >= step for s in _logged_steps(run)):
        assert time.time() < deadline and all(p.poll() is None for p in procs), "no step logged, or a process ended"
        time.sleep(0.01)


def _final(run: Path) -> dict:
    return _weights(RunDir(run).step(STEPS))


@pytest.fixture(scope="module")
def one_process(copy_data, tmp_path_factory) -> Path:
    """The uninterrupted run of one process with --update-freq 2 (started by --resume-if-exists: no run there)."""
    run = tmp_path_factory.mktemp("one") / "run"
    subprocess.run(_cli(*_args(copy_data, run), "--update-freq", "2"), check=True, env=_env(), capture_output=True)
    return run


@pytest.fixture(scope="module")
def two_nodes(copy_data, tmp_path_factory) -> Path:
    """The uninterrupted run of two torchrun nodes, one worker each."""
    logs = tmp_path_factory.mktemp("two")
    _wait(_start_nodes(copy_data, logs / "run", logs, max_restarts=0), logs)
    return logs / "run"


@pytest.mark.slow
def test_two_nodes_equal_one_process_with_update_freq_2(one_process, two_nodes):
    """Bit for bit: each process scales its loss by 2 / tokens where one process scales by 1 / tokens, and DDP halves
    the sum of the two processes' gradients; scaling by a power of two is exact in floating point, and a sum of two
    terms does not depend on their order. (Three processes would agree only to rounding.)"""
    a, b = _final(one_process), _final(two_nodes)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_worker_killed_is_restarted_and_resumes_to_the_uninterrupted_weights(copy_data, two_nodes, tmp_path):
    """Rank 0's worker (its PID is in RUN/train.lock, the lock the trainer holds) dies by SIGKILL after step 13, its
    last checkpoint being step 10. torchrun restarts both workers (the other one fails in its next collective); the
    same command, run again, finds the run and resumes it from step 10, so steps 11-13 are trained twice (log.jsonl
    shows them twice) and the final weights are those of the uninterrupted two-node run, bit for bit."""
    run = tmp_path / "run"
    nodes = _start_nodes(copy_data, run, tmp_path, max_restarts=1)
    try:
        _wait_for_step(run, KILL_AFTER, nodes)
        worker = int((run / rundir.LOCK_FILE).read_text())
        assert worker not in [p.pid for p in nodes]  # a worker, not an agent
        os.kill(worker, signal.SIGKILL)
    finally:
        _wait(nodes, tmp_path)
    again = _trained_twice(run)
    assert again and again[0] % SAVE_EVERY == 1 and again[-1] >= KILL_AFTER, again
    ref, got = _final(two_nodes), _final(run)
    assert all(torch.equal(ref[k], got[k]) for k in ref)


@pytest.mark.slow
def test_one_process_killed_and_relaunched_equals_the_uninterrupted_run(copy_data, one_process, tmp_path):
    """The same for one process: SIGKILL after step 13, then the same command again resumes from step 10."""
    run = tmp_path / "run"
    cmd = _cli(*_args(copy_data, run), "--update-freq", "2")
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_step(run, KILL_AFTER, [proc])
    finally:
        proc.kill()
        proc.wait()
    last = int(RunDir(run).latest().stem.split("_")[1])
    assert SAVE_EVERY <= last < STEPS, "the run ended before it was killed"
    subprocess.run(cmd, check=True, env=_env(), capture_output=True)
    again = _trained_twice(run)
    assert again[0] == last + 1 and again[-1] >= KILL_AFTER, again
    ref, got = _final(one_process), _final(run)
    assert all(torch.equal(ref[k], got[k]) for k in ref)


def test_resume_if_exists_refuses_other_options_and_resume(copy_data, one_process, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(one_process, run)
    args = [*_args(copy_data, run), "--update-freq", "2"]
    assert main([*args, "--lr-factor", "1", "--set", "d_model=64", "--max-steps", "50"]) == 2
    err = capsys.readouterr().err
    assert "--set d_model 64 (the run has 32)" in err and "--lr-factor 1.0 (the run has 2.0)" in err
    assert "--max-steps 50" not in err and "--update-freq" not in err
    assert main([*args, "--resume", str(run)]) == 2
    assert "give one of them" in capsys.readouterr().err
    before = RunDir(run).checkpoints, (run / rundir.LOG).read_text()
    assert main(args) == 0  # the same command on the finished run: nothing to do
    assert f"done: step {STEPS}" in capsys.readouterr().out
    assert main([*args, "--dtype", "auto"]) == 0  # auto: the dtype the run resolved it to (fp32 here)
    assert (RunDir(run).checkpoints, (run / rundir.LOG).read_text()) == before
