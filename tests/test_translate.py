"""translate: order kept while batching by length, blank and over-long lines, n-best, the CLI end to end."""

import io

import pytest
from helpers import save_run, tiny_model

from aiayn.cli import main
from aiayn.config import EOS_ID, PAD_ID
from aiayn.data import Vocab
from aiayn.decoding.attention import padded
from aiayn.decoding.lines import encode_sources
from aiayn.decoding.search import SearchConfig
from aiayn.decoding.translator import Translator
from aiayn.errors import UsageError


def translate_lines(model, vocab, lines, batch_size=64, max_input_len=None, precision="fp32", **search):
    """(text, score) n-best lists through a Translator."""
    t = Translator(model, vocab, SearchConfig(**search), precision, batch_size=batch_size, max_input_len=max_input_len)
    return [[(h.text, h.score) for h in hs] for hs in t.translate_nbest(lines)]


@pytest.fixture(scope="module")
def setup(copy_data):
    vocab = Vocab.load(copy_data / "vocab.model")
    lines = (copy_data / "test.src.txt").read_text().splitlines()[:12]
    return tiny_model(len(vocab), eos_bias=4.0), vocab, lines


def test_order_kept_and_batch_invariant(setup):
    model, vocab, lines = setup
    one_batch = translate_lines(model, vocab, lines, batch_size=64, max_len_b=10)
    small = translate_lines(model, vocab, lines, batch_size=5, max_len_b=10)
    alone = [translate_lines(model, vocab, [line], max_len_b=10)[0] for line in lines[:4]]
    assert [h[0][0] for h in small] == [h[0][0] for h in one_batch]
    assert [h[0][0] for h in alone] == [h[0][0] for h in one_batch[:4]]
    assert len({h[0][0] for h in one_batch}) > 1  # the outputs do depend on the input
    greedy = translate_lines(model, vocab, lines, beam=1, max_len_b=10)  # beam 1 is greedy search
    greedy_small = translate_lines(model, vocab, lines, beam=1, batch_size=3, max_len_b=10)
    assert [h[0][0] for h in greedy] == [h[0][0] for h in greedy_small]


def test_default_batch_is_larger_where_each_sentence_is_one_decoder_row(setup, monkeypatch):
    """No batch size asked: 64 sentences a batch, 128 where the search runs one row a sentence (greedy search, one
    sample); an asked size wins. The batches the Translator searches, observed."""
    from aiayn.decoding import translator as module
    from aiayn.decoding.batches import default_batch_size

    assert default_batch_size(SearchConfig(beam=1)) == 128
    assert default_batch_size(SearchConfig(beam=4)) == default_batch_size(SearchConfig(beam=4, nbest=4)) == 64
    assert default_batch_size(SearchConfig(beam=1, sampling=True, nbest=1)) == 128
    assert default_batch_size(SearchConfig(beam=1, sampling=True, nbest=3)) == 64
    model, vocab, lines = setup
    sizes = []
    real = module.length_sorted
    monkeypatch.setattr(module, "length_sorted", lambda src, size, **kw: sizes.append(size) or real(src, size, **kw))
    lines = lines * 20  # 240 lines
    for search, batch in [(SearchConfig(beam=1, max_len_b=2), None), (SearchConfig(beam=4, max_len_b=2), None),
                          (SearchConfig(beam=1, max_len_b=2), 32)]:
        Translator(model, vocab, search, batch_size=batch).translate_nbest(lines)
    assert sizes == [128, 64, 32]


def test_blank_and_overlong_lines(setup, capsys):
    model, vocab, lines = setup
    text = ["", lines[0], "   ", " ".join(lines[:6])]
    out = translate_lines(model, vocab, text, max_input_len=8, max_len_b=5)
    assert len(out) == 4 and out[0] == [("", 0.0)] and out[2] == [("", 0.0)]
    assert out[1][0][0] == translate_lines(model, vocab, [lines[0]], max_len_b=5)[0][0][0]
    err = capsys.readouterr().err
    assert "input line 4" in err and "--max-input-len 8" in err and "input line 2" not in err


def test_learned_positions_never_overflow(copy_data):
    # A table of 12 positions: long inputs are cut to 12 tokens, outputs to 11 words (BOS takes one).
    vocab = Vocab.load(copy_data / "vocab.model")
    model = tiny_model(len(vocab), eos_bias=4.0, positional="learned", max_positions=12)
    long_line = " ".join((copy_data / "test.src.txt").read_text().splitlines()[:8])
    sources = encode_sources(vocab, [long_line], model.cfg.max_positions)
    assert len(sources[0]) == 12 and sources[0][-1] == EOS_ID
    (hyp,), = Translator(model, vocab, SearchConfig(max_len_b=50, min_len=50)).search_ids(sources)
    assert len(hyp.tokens) == 11


def test_nbest_and_bf16(setup):
    model, vocab, lines = setup
    nb = translate_lines(model, vocab, lines[:3], beam=4, nbest=3, max_len_b=6)
    for hyps in nb:
        assert len(hyps) == 3 and [s for _, s in hyps] == sorted((s for _, s in hyps), reverse=True)
    bf = translate_lines(model, vocab, lines[:3], beam=2, max_len_b=6, precision="bf16")
    assert len(bf) == 3 and all(len(h) == 1 for h in bf)


def test_cli_called_in_process_leaves_collection_as_it_was(setup, copy_data, tmp_path):
    """main([...]) from a caller keeps the garbage collector on and freezes none of the caller's objects (only the
    command's own process start, main(), freezes what torch's import made)."""
    import gc

    model, _, lines = setup
    run = save_run(model, copy_data / "vocab.model", tmp_path / "run")
    (tmp_path / "in.txt").write_text(lines[0] + "\n")
    frozen = gc.get_freeze_count()
    assert main(["translate", "--checkpoint", str(run), "--input", str(tmp_path / "in.txt"), "--output",
                 str(tmp_path / "out.txt"), "--max-len-b", "5", "--no-progress"]) == 0
    assert gc.isenabled() and gc.get_freeze_count() == frozen


def test_cli_end_to_end(setup, copy_data, tmp_path, monkeypatch, capsys):
    model, vocab, lines = setup
    run = save_run(model, copy_data / "vocab.model", tmp_path / "run")
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("\n".join(lines[:6]) + "\n")
    assert main(["translate", "--checkpoint", str(run), "--input", str(src), "--output", str(out),
                 "--batch-size", "4", "--max-len-b", "10", "--no-progress"]) == 0
    expect = [h[0][0] for h in translate_lines(model, vocab, lines[:6], max_len_b=10)]
    assert out.read_text().splitlines() == expect

    monkeypatch.setattr("sys.stdin", io.StringIO(lines[0] + "\n\n"))
    assert main(["translate", "--checkpoint", str(run / "checkpoints" / "step_00000010.safetensors"),
                 "--nbest", "2", "--max-len-b", "10"]) == 0
    got = capsys.readouterr().out.splitlines()
    assert len(got) == 3 and got[0].startswith("0 ||| ") and got[2] == "1 |||  ||| 0.0000"
    assert got[0].split(" ||| ")[1] == expect[0]

    assert main(["translate", "--checkpoint", str(run), "--beam", "2", "--nbest", "3"]) == 2


def test_precision_flag_and_keyword(setup, copy_data, tmp_path):
    # translate --precision int8 decodes as Translator.load(precision=) does; the old keywords are gone.
    model, vocab, lines = setup
    run = save_run(model, copy_data / "vocab.model", tmp_path / "run")
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines[:4]) + "\n")
    out = tmp_path / "out.txt"
    assert main(["translate", "--checkpoint", str(run), "--input", str(src), "--output", str(out), "--precision",
                 "int8", "--max-len-b", "10", "--no-progress"]) == 0
    got = [out.read_text().splitlines()]
    new = Translator.load(run, SearchConfig(max_len_b=10), precision="int8")
    assert new.precision == new.model.precision == "int8"
    assert got[0] == new.translate(lines[:4])
    bf = Translator(model, vocab, precision="bf16")
    assert bf.precision == bf.model.precision == "bf16"
    with pytest.raises(TypeError):
        Translator(model, vocab, weights="bf16")
    with pytest.raises(TypeError):
        Translator(model, vocab, packed=False)


def test_sampling_same_in_any_batch_size(setup):
    """Each line draws from a generator of (seed, its line number): batches of 8 or of 3 give the same samples."""
    model, vocab, lines = setup
    search = dict(sampling=True, nbest=2, top_p=0.9, max_len_b=10, seed=7)
    one_batch = translate_lines(model, vocab, lines[:8], batch_size=8, **search)
    small = translate_lines(model, vocab, lines[:8], batch_size=3, **search)
    assert [[t for t, _ in hyps] for hyps in one_batch] == [[t for t, _ in hyps] for hyps in small]
    assert [s for hyps in one_batch for _, s in hyps] == pytest.approx([s for hyps in small for _, s in hyps], abs=1e-4)
    assert all(len(hyps) == 2 for hyps in one_batch)
    other_seed = translate_lines(model, vocab, lines[:8], batch_size=8, **{**search, "seed": 8})
    assert [[t for t, _ in hyps] for hyps in other_seed] != [[t for t, _ in hyps] for hyps in one_batch]


def test_prefix_starts_every_translation(setup):
    model, vocab, lines = setup
    greedy = translate_lines(model, vocab, lines[:3], beam=1, max_len_b=10)
    prefix = vocab.decode(vocab.encode(greedy[0][0][0])[:2])  # the first two pieces greedy search would choose...
    other = "a b"  # ... and pieces it would not
    for search in (dict(beam=1), dict(beam=3, nbest=2), dict(sampling=True, nbest=3)):
        t = Translator(model, vocab, SearchConfig(max_len_b=10, **search))
        out = t.translate_nbest(lines[:3], prefixes=[prefix, other, ""])
        pre, oth = vocab.encode(prefix), vocab.encode(other)
        assert all(h.tokens[: len(pre)] == pre for h in out[0]) and all(h.tokens[: len(oth)] == oth for h in out[1])
    t = Translator(model, vocab, SearchConfig(beam=1, max_len_b=10))
    assert t.translate_nbest(lines[:3], prefixes=[prefix, "", ""])[0][0].text == greedy[0][0][0]  # its own start
    with pytest.raises(UsageError, match="input line 2: the prefix piece '.*€' is not in the vocabulary"):
        t.translate_nbest(lines[:2], prefixes=["", "€"])
    with pytest.raises(UsageError, match="input line 1 is blank but has a target prefix"):
        t.translate_nbest([""], prefixes=["a"])


def test_cli_prefix_column_and_file_and_sampling(setup, copy_data, tmp_path, capsys):
    model, vocab, lines = setup
    run = save_run(model, copy_data / "vocab.model", tmp_path / "run")
    (tmp_path / "in.txt").write_text(f"{lines[0]}\ta b\n{lines[1]}\n")
    base = ["translate", "--checkpoint", str(run), "--max-len-b", "10", "--no-progress", "--beam", "2"]
    assert main([*base, "--input", str(tmp_path / "in.txt")]) == 0
    got = capsys.readouterr().out.splitlines()
    t = Translator(model, vocab, SearchConfig(beam=2, max_len_b=10))
    assert got == [h[0].text for h in t.translate_nbest(lines[:2], prefixes=["a b", ""])]
    (tmp_path / "src.txt").write_text(f"{lines[0]}\n{lines[1]}\n")
    (tmp_path / "prefix.txt").write_text("a b\n\n")
    assert main([*base, "--input", str(tmp_path / "src.txt"), "--prefix", str(tmp_path / "prefix.txt")]) == 0
    assert capsys.readouterr().out.splitlines() == got
    (tmp_path / "prefix.txt").write_text("a b\n")
    assert main([*base, "--input", str(tmp_path / "src.txt"), "--prefix", str(tmp_path / "prefix.txt")]) == 2
    assert "--prefix has 1 lines but the input has 2" in capsys.readouterr().err
    assert main([*base, "--input", str(tmp_path / "in.txt"), "--prefix", str(tmp_path / "prefix.txt")]) == 2
    assert "not both" in capsys.readouterr().err
    sample = [*base, "--input", str(tmp_path / "src.txt"), "--sampling", "--nbest", "3", "--seed", "1"]
    assert main(sample) == 0
    first = capsys.readouterr().out.splitlines()
    assert len(first) == 6 and first[0].startswith("0 ||| ") and first[3].startswith("1 ||| ")
    assert main([*sample, "--batch-size", "1"]) == 0 and capsys.readouterr().out.splitlines() == first
    # Input line i draws from (seed, i) wherever the input was cut: one line per buffer samples as the whole file.
    assert main([*sample, "--buffer-size", "1"]) == 0 and capsys.readouterr().out.splitlines() == first
    lone = Translator(model, vocab, SearchConfig(sampling=True, nbest=3, seed=1, max_len_b=10))
    assert [h.text for h in lone.translate_nbest(lines[1:2], first_line=1)[0]] == [
        line.split(" ||| ")[1] for line in first[3:]]
    assert lone.translate_nbest(lines[1:2], first_line=1) != lone.translate_nbest(lines[1:2])
    for bad, says in [(["--top-p", "1.5"], "top_p must lie in (0, 1]"), (["--top-p", "0"], "--top-p: must be"),
                      (["--temperature", "-1"], "--temperature: must be"), (["--top-k", "-2"], "--top-k: must be"),
                      (["--no-repeat-ngram-size", "-1"], "--no-repeat-ngram-size: must be")]:
        assert main([*sample, *bad]) == 2
        err = capsys.readouterr().err
        assert says in err and len(err.strip().splitlines()) == 1
    assert main([*base, "--input", str(tmp_path / "src.txt"), "--top-k", "5"]) == 2
    assert "only apply to sampling" in capsys.readouterr().err


def test_translate_help_lists_the_decoding_options(capsys):
    assert main(["translate", "--help"]) == 0
    text = capsys.readouterr().out
    for flag in ("--sampling", "--top-k", "--top-p", "--temperature", "--seed", "--prefix", "--no-repeat-ngram-size"):
        assert flag in text


def test_fixed_shape_search_gives_the_eager_translations(setup, copy_data, tmp_path, capsys):
    """search_impl="fixed" (aiayn.decoding.static_search: what a GPU runs by default) gives the eager search's
    hypotheses for greedy, beam and n-best search; options it does not do run eagerly, announced once on stderr."""
    model, vocab, lines = setup
    for search in (SearchConfig(beam=1, max_len_b=10), SearchConfig(beam=4, max_len_b=10),
                   SearchConfig(beam=3, nbest=2, max_len_b=10, lp="power")):
        eager = Translator(model, vocab, search, batch_size=5, search_impl="eager")
        fixed = Translator(model, vocab, search, batch_size=5, search_impl="fixed")
        assert eager.fixed_shape is None and fixed.fixed_shape is not None
        want, got = eager.translate_nbest(lines), fixed.translate_nbest(lines)
        assert [[h.tokens for h in hs] for hs in got] == [[h.tokens for h in hs] for hs in want]
        assert [h.score for hs in got for h in hs] == pytest.approx([h.score for hs in want for h in hs], abs=1e-5)
        assert len(fixed.fixed_shape.states) == 3  # a state per batch shape (exact shapes on a CPU: 3 batches)
    assert Translator(model, vocab).fixed_shape is None  # auto: eager on a CPU
    capsys.readouterr()
    fixed = Translator(model, vocab, SearchConfig(beam=2, max_len_b=10), search_impl="fixed")
    want = Translator(model, vocab, SearchConfig(beam=2, max_len_b=10)).translate_nbest(lines[:3], prefixes=["a"] * 3)
    for _ in range(2):
        assert fixed.translate_nbest(lines[:3], prefixes=["a"] * 3) == want
    assert capsys.readouterr().err.count("does not do target prefixes: decoding with the eager search") == 1
    with pytest.raises(UsageError, match="search_impl must be one of auto, eager, fixed"):
        Translator(model, vocab, search_impl="graphs")

    run = save_run(model, copy_data / "vocab.model", tmp_path / "run")
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    base = ["translate", "--checkpoint", str(run), "--input", str(tmp_path / "in.txt"), "--max-len-b", "10",
            "--no-progress"]
    assert main([*base, "--search-impl", "fixed"]) == 0
    fixed_out = capsys.readouterr().out
    assert main([*base, "--search-impl", "eager"]) == 0 and capsys.readouterr().out == fixed_out
    assert main([*base, "--engine", "ct2", "--search-impl", "fixed"]) == 2
    assert "needs --engine aiayn" in capsys.readouterr().err


def test_cli_splits_lines_into_sentences(setup, copy_data, tmp_path, capsys):
    """A line of two sentences is translated as the two, joined by the source's space; --no-split-sentences keeps it
    whole; n-best lines of a split line join the sentences' hypotheses."""
    model, vocab, lines = setup
    run = save_run(model, copy_data / "vocab.model", tmp_path / "run")
    first, second = lines[0] + ".", "X " + lines[1] + "."
    (tmp_path / "in.txt").write_text(f"{first} {second}\n{lines[2]}\n")
    base = ["translate", "--checkpoint", str(run), "--input", str(tmp_path / "in.txt"), "--max-len-b", "10",
            "--no-progress"]
    t = Translator(model, vocab, SearchConfig(max_len_b=10))
    a, b, c = t.translate([first, second, lines[2]])
    assert main(base) == 0
    assert capsys.readouterr().out.splitlines() == [f"{a} {b}", c]
    assert main(base + ["--no-split-sentences"]) == 0
    assert capsys.readouterr().out.splitlines() == t.translate([f"{first} {second}", lines[2]])
    assert main(base + ["--nbest", "2"]) == 0
    got = capsys.readouterr().out.splitlines()
    assert [line.split(" ||| ")[0] for line in got] == ["0", "0", "1", "1"]
    assert got[0].split(" ||| ")[1] == f"{a} {b}"


def test_parallel_batches_search_side_by_side_with_the_same_translations(setup, copy_data, tmp_path, capsys,
                                                                          monkeypatch):
    """On a CPU with two threads the eager search runs two batches at once (the default), each in a thread of its own
    on one torch thread, torch's count as it was afterwards: the hypotheses of one batch at a time on one thread
    (bit for bit; two threads may sum a product in another order), for beam, n-best, sampling and prefixes. A barrier
    that two batches must reach together proves them side by side."""
    import threading

    import torch

    from aiayn.decoding import translator as module

    model, vocab, lines = setup
    lines = lines * 3  # 36 lines: 8 batches of 5
    real = module.search_function
    seen, meet = [], threading.Barrier(2, timeout=20)

    def together(search):  # the search of each batch
        def run(*args, **kwargs):
            if len(seen) < 2:
                seen.append((threading.current_thread().name, torch.get_num_threads()))
                meet.wait()  # broken (an error) unless a second batch runs meanwhile
            return real(search)(*args, **kwargs)
        return run

    before = torch.get_num_threads()
    try:
        for search, prefixes in [(SearchConfig(beam=4, max_len_b=10), None),
                                 (SearchConfig(beam=3, nbest=2, max_len_b=10, lp="power"), ["a"] * len(lines)),
                                 (SearchConfig(sampling=True, nbest=2, top_k=5, max_len_b=10, seed=3), None)]:
            torch.set_num_threads(1)
            one = Translator(model, vocab, search, batch_size=5, parallel_batches=1).translate_nbest(lines,
                                                                                                   prefixes=prefixes)
            torch.set_num_threads(2)
            seen.clear()
            meet.reset()
            monkeypatch.setattr(module, "search_function", together)
            two = Translator(model, vocab, search, batch_size=5).translate_nbest(lines, prefixes=prefixes)
            monkeypatch.setattr(module, "search_function", real)
            assert two == one
            assert len({name for name, _ in seen}) == 2 and all(name.startswith("aiayn-batch") for name, _ in seen)
            assert {n for _, n in seen} == {1} and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)

    with pytest.raises(UsageError, match="parallel batches must be at least 1"):
        Translator(model, vocab, parallel_batches=0)
    with pytest.raises(UsageError, match="one batch at a time: leave it out"):
        Translator(model, vocab, search_impl="fixed", parallel_batches=2)
    run = save_run(model, copy_data / "vocab.model", tmp_path / "run")
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    base = ["translate", "--checkpoint", str(run), "--input", str(tmp_path / "in.txt"), "--max-len-b", "10",
            "--batch-size", "5", "--no-progress"]
    assert main([*base, "--parallel-batches", "1"]) == 0
    one_out = capsys.readouterr().out
    assert main([*base, "--parallel-batches", "2"]) == 0 and capsys.readouterr().out == one_out
    assert main([*base, "--parallel-batches", "0"]) == 2
    assert "--parallel-batches" in capsys.readouterr().err


def test_batches_side_by_side_stop_together(setup):
    """When the caller of in_parallel stops (an error in one batch, Ctrl-C), the batch still searching beside it ends
    at its next step instead of running to its end: a search's model raises at its next decoder call once `stop` is
    set (_Stoppable), and otherwise answers as the model does (the shortlist's decode_pieces only where it has one)."""
    import threading
    import time

    from aiayn.decoding import translator as module

    started, seen = threading.Event(), []

    def work(batch, stop):
        if batch == [0]:
            assert started.wait(10)
            raise ValueError("batch 0 fails")
        started.set()
        deadline = time.monotonic() + 20
        while not stop.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)
        seen.append(stop.is_set())
        return []

    clock = time.monotonic()
    with pytest.raises(ValueError, match="batch 0 fails"):
        list(module.in_parallel(work, [[0], [1]], 2))
    assert seen == [True] and time.monotonic() - clock < 10
    model, vocab, lines = setup
    stop = threading.Event()
    stoppable = module._Stoppable(model, stop)
    assert stoppable.cfg is model.cfg and not hasattr(stoppable, "decode_pieces")
    src = padded(encode_sources(vocab, lines[:2], 64))
    assert stoppable.encode(src).equal(model.encode(src))
    stop.set()
    with pytest.raises(module._Stopped):
        stoppable.decode(src[:, :1], model.encode(src), src.eq(PAD_ID))
