"""aiayn.files: a file appears whole or not at all, text is read strictly as UTF-8, digests are SHA-256."""

import hashlib
import json

import pytest

from aiayn import files
from aiayn.errors import DataError, UserError


def test_atomic_write_keeps_the_old_file_when_the_write_fails(tmp_path):
    path = tmp_path / "out.txt"
    files.write_text(path, "old\n")

    def half(tmp):
        tmp.write_text("half")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        files.atomic_write(path, half)
    assert path.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["out.txt"]  # no temp left


def test_write_json_is_sorted_indented_and_keeps_non_ascii(tmp_path):
    path = files.write_json(tmp_path / "sub" / "a.json", {"b": 1, "a": "año"})  # the folder is made
    text = path.read_text(encoding="utf-8")
    assert text == '{\n  "a": "año",\n  "b": 1\n}\n' and json.loads(text) == {"a": "año", "b": 1}


def test_commit_folder_moves_a_whole_folder_into_place(tmp_path):
    part, out = tmp_path / "data.partial", tmp_path / "data"
    part.mkdir()
    (part / "a.bin").write_bytes(b"\x00\x01")
    files.commit_folder(part, out)
    assert not part.exists() and (out / "a.bin").read_bytes() == b"\x00\x01"


def test_remove_stale_temps_removes_only_what_an_atomic_write_leaves(tmp_path):
    keep = [tmp_path / "config.json", tmp_path / ".hidden", tmp_path / ".x.tmp"]
    stale = [tmp_path / ".config.json.k2j4h1_x.tmp", tmp_path / "sub" / ".step_1.safetensors.abcd1234.tmp"]
    (tmp_path / "sub").mkdir()
    for p in keep + stale:
        p.write_text("x")
    assert sorted(files.remove_stale_temps(tmp_path, tmp_path / "sub", tmp_path / "missing")) == sorted(stale)
    assert all(p.exists() for p in keep) and not any(p.exists() for p in stale)


def test_lines_are_strict_utf8_split_on_newline_only(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes("one\r\ntwo\u2028still two\n\nfour".encode())
    assert files.read_lines(path) == ["one", "two\u2028still two", "", "four"]  # U+2028 is not a line break
    assert files.count_lines(path) == 4
    path.write_bytes(b"fine\nbad \xff byte\n")
    with pytest.raises(DataError, match=r"in\.txt, line 2: not valid UTF-8 .*iconv"):
        files.read_lines(path)


def test_sha256_and_output_paths(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    assert files.sha256_file(path) == hashlib.sha256(b"abc").hexdigest()
    with pytest.raises(UserError, match="it is a folder"):
        files.check_output_path(tmp_path)
    with pytest.raises(UserError, match="there is no folder"):
        files.check_output_path(tmp_path / "nothing" / "out.txt")


def test_waiting_lock_makes_a_second_holder_wait_and_says_why(tmp_path, capsys):
    import threading
    import time

    lock, order = tmp_path / "x.lock", []

    def second():
        with files.waiting_lock(lock, "test: another process holds x"):
            order.append("second")

    with files.waiting_lock(lock, "first"):
        t = threading.Thread(target=second)
        t.start()
        time.sleep(0.3)
        order.append("first done")
    t.join(10)
    assert order == ["first done", "second"]
    assert "test: another process holds x (PID" in capsys.readouterr().err
    assert not lock.exists()  # nothing left behind
