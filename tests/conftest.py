import random
from pathlib import Path

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    """Tiny models gain nothing from a second thread, and on a shared 2-core machine two threads stall."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "fox", "golf", "hotel", "india", "juliet", "kilo", "lima",
         "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango"]


def write_copy_corpus(folder: Path, n: int, seed: int) -> tuple[Path, Path]:
    """A 'translation' task a tiny model can learn: the target is the source reversed, upper-cased."""
    rng = random.Random(seed)
    src_lines, tgt_lines = [], []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(2, 7))]
        src_lines.append(" ".join(words))
        tgt_lines.append(" ".join(w.upper() for w in reversed(words)))
    folder.mkdir(parents=True, exist_ok=True)
    src, tgt = folder / f"copy{seed}.src", folder / f"copy{seed}.tgt"
    src.write_text("\n".join(src_lines) + "\n")
    tgt.write_text("\n".join(tgt_lines) + "\n")
    return src, tgt


@pytest.fixture(scope="session")
def copy_data(tmp_path_factory) -> Path:
    """A prepared-data directory (train/valid/test) of the reversed-copy task, vocabulary 120."""
    from aiayn.data import prepare

    root = tmp_path_factory.mktemp("copy")
    train = write_copy_corpus(root / "raw", 600, seed=1)
    valid = write_copy_corpus(root / "raw", 40, seed=2)
    test = write_copy_corpus(root / "raw", 40, seed=3)
    out = root / "data"
    prepare(*train, out, vocab_size=120, valid=valid, test=test)
    return out
