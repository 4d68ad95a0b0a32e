"""Files: the one place that writes what a user may rely on, reads text lines, and hashes files.

    atomic_write(path, write)      write(tmp) on a temp file beside path, fsync, rename over path, fsync the folder
    commit_folder(part, path)      a folder written whole under a temp name, fsynced and renamed into place
    write_text, write_json         the same for a string, or JSON (sorted keys, indented)
    atomic_text_output(path)       a text stream for a command's --output (stdout for None / "-"), replaced whole
    check_output_path(path)        refuse an output path whose folder is missing, or that is a folder
    remove_stale_temps(folders)    delete the temp files a kill left behind (only a folder's one writer may)
    decode_lines, read_lines       strict UTF-8 lines: a bad byte names the input and the line
    sha256_file                    the SHA-256 of a file's bytes

A kill at any instant leaves either the previous file or the complete new one, never a truncated one. This module
imports nothing else of aiayn but its errors: every floor may use it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

from aiayn.errors import DataError, UserError

_TEMP_RE = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")  # what _temp_beside makes: .NAME.XXXXXXXX.tmp


def is_temp(path: Path) -> bool:
    """Whether `path` is a temp file that an atomic write makes (and a kill may leave behind)."""
    return bool(_TEMP_RE.match(Path(path).name))


def _temp_beside(path: Path) -> Path:
    """An empty temp file in path's folder (so the rename is atomic), with the permissions a new file would get."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; a checkpoint or output should read like any other file
    os.close(fd)
    return Path(tmp)


def fsync_folder(folder: Path) -> None:
    """fsync a folder, so that the names created or renamed in it survive a crash."""
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _commit(tmp: Path, path: Path) -> None:
    """fsync tmp, rename it over path, fsync the folder: path is now the complete new file, even after a crash."""
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_folder(path.parent)


def commit_folder(part: Path, path: Path) -> Path:
    """Make the folder `part`, written completely, appear as `path` (which must not exist or be empty): fsync its
    files, rename it, fsync the parent. A kill before the rename leaves `part`, never a half-written `path`."""
    for p in Path(part).rglob("*"):
        if p.is_file() and not p.is_symlink():
            with open(p, "rb") as f:
                os.fsync(f.fileno())
    fsync_folder(part)
    os.replace(part, path)
    fsync_folder(Path(path).parent)
    return Path(path)


@contextlib.contextmanager
def waiting_lock(path: str | Path, what: str) -> Iterator[None]:
    """Hold an exclusive lock (flock) on the file `path` while the block runs, waiting for another process that holds
    it (saying so once: `what` names the work, e.g. "prepare: another process is preparing data-bin/x"). The file is
    removed when the block ends, so nothing is left behind; a waiter that then holds a removed file's lock starts
    again on the path. The OS drops a lock when its holder ends, however it ends. No lock without flock (not POSIX)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    said = False
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not said:
                holder = os.read(fd, 32).decode("ascii", "replace").strip() or "unknown"
                print(f"{what} (PID {holder}); waiting for it to finish", file=sys.stderr, flush=True)
                said = True
            fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                break  # the file at `path` is the one locked
        except FileNotFoundError:
            pass
        os.close(fd)  # its holder removed it while this process waited: lock the path anew
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.close(fd)


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Call write(tmp) on a temp file beside `path`, fsync it, then rename it over `path`. Returns `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_beside(path)
    try:
        write(tmp)
        _commit(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_text(path: str | Path, text: str) -> Path:
    """`text` into `path` as UTF-8, atomically."""
    return atomic_write(path, lambda p: p.write_text(text, encoding="utf-8"))


def write_json(path: str | Path, obj: Any) -> Path:
    """`obj` as JSON (indented, sorted keys, non-ASCII kept) into `path`, atomically."""
    return write_text(path, json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


@contextlib.contextmanager
def atomic_text_output(path: str | Path | None) -> Iterator[TextIO]:
    """A UTF-8 text stream for a command's output: stdout for None or "-"; for a file, a temp file beside it that
    replaces it only when the block completes, so an interrupt or error leaves the previous file (or none), never a
    truncated one. Devices and pipes (/dev/stdout, a FIFO) are written directly: they cannot be replaced.

        with atomic_text_output(args.output) as out:
            out.write(...)
    """
    if path is None or str(path) == "-":
        yield sys.stdout
        sys.stdout.flush()
        return
    path = check_output_path(path)
    if path.exists() and not stat.S_ISREG(path.stat().st_mode):
        with open(path, "w", encoding="utf-8") as f:
            yield f
        return
    tmp = _temp_beside(path)
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            yield f
        _commit(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def check_output_path(path: str | Path) -> Path:
    """Refuse an output path whose folder does not exist, or that is a folder (call it before long work, too)."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"cannot write {path}: it is a folder; give a file name")
    if not path.parent.is_dir():
        raise UserError(f"cannot write {path}: there is no folder {path.parent}")
    return path


def remove_stale_temps(*folders: Path) -> list[Path]:
    """Delete the temp files that writes interrupted by a kill left in these folders (each can be as large as a
    checkpoint). Only the one writer of a folder may call this: another writer's temp files are live."""
    removed = []
    for folder in map(Path, folders):
        if folder.is_dir():
            for p in folder.iterdir():
                if is_temp(p) and p.is_file():
                    p.unlink(missing_ok=True)
                    removed.append(p)
    return removed


# ---------------------------------------------------------------------------------------------------------
# Reading text, hashing.


def decode_lines(raw_lines: Iterable[bytes], name: str, first: int = 1) -> Iterator[str]:
    """Strict UTF-8 lines without their newline, from the byte lines of a file or stdin (`name` says which, for the
    error; `first`: the number of the first line given). The one decoding rule of every text input: bad bytes name
    the input and the line."""
    for n, raw in enumerate(raw_lines, first):
        try:
            yield raw.rstrip(b"\r\n").decode("utf-8")
        except UnicodeDecodeError as e:
            raise DataError(
                f"{name}, line {n}: not valid UTF-8 ({e.reason} at byte {e.start} of the line); "
                "re-encode it as UTF-8 (e.g. `iconv -f latin1 -t utf-8`) or fix that line"
            ) from None


def iter_lines(path: str | Path) -> Iterator[str]:
    """The lines of a UTF-8 file, streamed, without their newline. Splits on b"\\n" only, never on Unicode
    separators."""
    with open(path, "rb") as f:
        yield from decode_lines(f, str(path))


def read_lines(path: str | Path | None) -> list[str]:
    """The lines of a UTF-8 text file, or of stdin for None or "-", without their newline (split on \\n only)."""
    if path is None or str(path) == "-":
        stdin = getattr(sys.stdin, "buffer", None)
        if stdin is None:  # a text stream put in place of stdin (tests)
            return [line.rstrip("\r\n") for line in sys.stdin]
        return list(decode_lines(stdin, "stdin"))
    return list(iter_lines(path))


def line_buffers(path: str | Path | None, most: int | None = None) -> Iterator[list[str]]:
    """The lines of a file, or of stdin for None or "-", in buffers of at most `most` lines (None: a file at once;
    stdin as its lines arrive: every complete line a read returns, so a line typed into a pipe is answered before
    the next one comes, and a file piped in still arrives in large buffers)."""
    stdin = path is None or str(path) == "-"
    fd = _fileno(sys.stdin.buffer if hasattr(sys.stdin, "buffer") else sys.stdin) if stdin else None
    if fd is None:  # a file, or a text stream put in place of stdin (tests): all its lines, then cut to size
        lines = read_lines(path)
        step = most or len(lines) or 1
        yield from (lines[i: i + step] for i in range(0, len(lines), step))
        return
    done, pending = 0, b""
    while chunk := os.read(fd, 1 << 16):  # blocks only until something arrives, then returns what there is
        *complete, pending = (pending + chunk).split(b"\n")
        step = most or len(complete) or 1
        for i in range(0, len(complete), step):
            yield list(decode_lines(complete[i: i + step], "stdin", done + 1))
            done += len(complete[i: i + step])
    if pending:  # a last line without its newline
        yield list(decode_lines([pending], "stdin", done + 1))


def _fileno(stream) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        return None


def count_lines(path: str | Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def sha256_file(path: str | Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
