"""The training package: its __init__ imports nothing (a command that decodes never loads the trainer), and each
module is reached by its name (the modules' own tests: test_train.py, test_losses.py, test_selection.py,
test_checkpoint.py, test_packed.py)."""

import subprocess
import sys

from helpers import REPO

MODULES = ("train", "losses", "selection", "checkpoint", "packed", "run")


def test_the_package_imports_nothing_until_a_module_is_named():
    code = ("import sys, aiayn.training\nprint(sorted(m for m in sys.modules if m.startswith('aiayn.')))\n"
            f"for m in {MODULES!r}: __import__('aiayn.training.' + m)\nprint(sorted(m for m in sys.modules "
            "if m.startswith('aiayn.training.')))")
    before, after = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                                   check=True).stdout.splitlines()
    assert eval(before) == ["aiayn.training"]
    assert eval(after) == sorted(f"aiayn.training.{m}" for m in MODULES)


def test_decoding_loads_none_of_the_trainer():
    code = ("import sys\nimport aiayn.decoding.translator\n"
            "print(sorted(m for m in sys.modules if m.startswith('aiayn.training.')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    # the weights' file format and the model's packed-batch route (model.py), never the trainer's loop or loss
    assert eval(out.stdout) == ["aiayn.training.checkpoint", "aiayn.training.packed"]
