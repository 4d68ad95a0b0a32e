"""aiayn.allocator: glibc's setting applies where glibc is, changes nothing elsewhere, and needs no torch."""

import platform
import subprocess
import sys

from helpers import REPO

from aiayn.allocator import keep_freed_memory, release_freed_memory

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


def test_keep_freed_memory_applies_on_glibc():
    assert keep_freed_memory() is GLIBC
    assert release_freed_memory() in (True, False) and (GLIBC or release_freed_memory() is False)


def test_imports_no_torch_and_a_torch_free_command_gets_the_setting():
    code = ("import sys\nfrom aiayn import allocator\ncalls = []\nallocator.keep_freed_memory = lambda: calls.append(1)"
            "\nfrom aiayn.cli import main\nmain(['translate', '--engine', 'ct2', '--checkpoint', 'nowhere'])\n"
            "print('torch' in sys.modules, calls)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False [1]"
