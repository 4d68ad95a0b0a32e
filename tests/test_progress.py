"""aiayn.progress: one design of progress for training, translating and preparing: a bar on a terminal, plain lines
at an interval elsewhere, nothing when disabled."""

import io

from aiayn.progress import Progress


def test_plain_lines_at_an_interval_with_the_figures(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr("aiayn.progress.time.time", lambda: clock[0])
    out = io.StringIO()
    p = Progress("translate", 300, "sentences", plain_every=60, terminal=False, stream=out)
    assert p.bar is None
    for second in range(10, 191, 10):  # 10 sentences every 10 s: a line once a minute
        clock[0] = second
        p.update(10, bleu="1.0")
    p.update(5, line=False)  # not a time for a line
    p.write("a line of its own")
    p.close()
    assert out.getvalue().splitlines() == [f"translate: {n}/300 sentences, bleu 1.0" for n in (60, 120, 180)] + [
        "a line of its own"]


def test_unknown_total_and_updates_to_a_count():
    out = io.StringIO()
    with Progress("check train", None, "pairs", plain_every=0, terminal=False, stream=out) as p:
        p.update(10_000)
        p.update(to=25_000)
    assert out.getvalue().splitlines() == ["check train: 10000 pairs", "check train: 25000 pairs"]


def test_a_terminal_gets_a_bar_and_disabled_shows_nothing():
    out = io.StringIO()
    bar = Progress("prepare", 10, "pairs", terminal=True, stream=out)
    assert bar.bar is not None and bar.plain_every is None
    bar.update(10)
    bar.close()
    assert "10/10" in out.getvalue()
    quiet = io.StringIO()
    off = Progress("prepare", 10, "pairs", enabled=False, plain_every=0, terminal=False, stream=quiet)
    off.update(5)
    off.write("model: 1M parameters")  # write is the job's own message: shown without the bar too
    assert quiet.getvalue() == "model: 1M parameters\n"
