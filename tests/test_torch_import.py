"""aiayn.torch_import: `aiayn translate` imports torch without its meta-device and CUDA registrations, translates the
same, and runs them where they are needed (any device but the CPU, or a use of the module)."""

import subprocess
import sys

import pytest
from helpers import REPO, save_run, tiny_model

from aiayn import runtime, torch_import
from aiayn.data import Vocab
from aiayn.errors import UsageError


def _python(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          check=True).stdout.strip().splitlines()[-1]


def test_translate_leaves_the_registrations_unrun_and_translates_as_with_them(copy_data, tmp_path):
    run = save_run(tiny_model(len(Vocab.load(copy_data / "vocab.model")), eos_bias=3.0), copy_data / "vocab.model",
                   tmp_path / "run")
    outputs = {}
    for first in ("", "import torch\n"):  # torch imported before main: the plain import, nothing deferred
        out = tmp_path / f"out{len(first)}.txt"
        outputs[first] = out
        args = ["translate", "--checkpoint", str(run), "--input", str(copy_data / "test.src.txt"), "--output",
                str(out), "--no-progress"]
        said = _python(f"{first}from aiayn import torch_import\nfrom aiayn.cli import main\n"
                       f"assert main({args!r}) == 0\nprint(torch_import.deferred())")
        assert said == (str(list(torch_import.REGISTRATIONS)) if not first else "[]")
    lines = outputs[""].read_text(encoding="utf-8").splitlines()
    assert len(lines) == 40 and lines == outputs["import torch\n"].read_text(encoding="utf-8").splitlines()


def test_other_commands_import_torch_whole():
    """`aiayn score` imports torch in cli.main, as translate does (its module imports none), and defers nothing."""
    said = _python("import sys\nfrom aiayn import torch_import\nfrom aiayn.cli import main\n"
                   "main(['score', '--checkpoint', 'nowhere', '--src', 'nowhere', '--tgt', 'nowhere'])\n"
                   "print('torch._native' in sys.modules, torch_import.deferred())")
    assert said == "True []"


def test_a_deferred_module_runs_at_finish_or_at_its_first_use():
    code = ("import sys\nfrom aiayn import torch_import\nwith torch_import.registrations_deferred():\n"
            "    import torch\nprint(torch_import.deferred())\n"
            "sys.modules['torch._meta_registrations'].__doc__\nprint(torch_import.deferred())\n"
            "torch_import.finish()\nprint(torch_import.deferred())\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == [str(list(torch_import.REGISTRATIONS)), "['torch._native']", "[]"]


def test_any_device_but_the_cpu_runs_what_was_deferred(monkeypatch):
    calls = []
    monkeypatch.setattr(torch_import, "finish", lambda: calls.append(1))
    runtime.resolve_device("cpu")
    assert calls == []
    with pytest.raises(UsageError):  # no GPU here; what it registers is run before the device is looked for
        runtime.resolve_device("cuda:7")
    assert calls == [1]
