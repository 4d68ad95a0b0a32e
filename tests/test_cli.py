"""The dispatcher: every command registered, one error handler (a user's mistake is one "error:" line and exit 1,
or 2 for bad flags; a bug keeps its traceback), and training flags generated from TrainConfig's fields."""

import argparse
import dataclasses

import pytest
from helpers import REPO, save_run, tiny_model

from aiayn.cli import COMMANDS, build_parser, main
from aiayn.cli.common import add_precision_arg
from aiayn.training.train import TrainConfig


def test_every_command_module_registers_and_has_help(capsys):
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert len(sub.choices) >= len(COMMANDS)
    for name in sub.choices:
        with pytest.raises(SystemExit) as e:
            parser.parse_args([name, "--help"])
        assert e.value.code == 0
    capsys.readouterr()


def test_train_flags_are_the_train_config_fields():
    p = next(a for a in build_parser()._actions if a.dest == "command").choices["train"]
    flags = {o for a in p._actions for o in a.option_strings}
    for f in dataclasses.fields(TrainConfig):
        assert "--" + f.name.replace("_", "-") in flags, f.name
    args = p.parse_args(["--max-steps", "7", "--adam-betas", "0.8", "0.9", "--compile"])
    assert (args.max_steps, args.adam_betas, args.compile, args.warmup) == (7, [0.8, 0.9], True, None)


def test_precision_is_the_decoding_number_format():
    # --precision: the number format decoding runs in, in every command that decodes (--weights, a day-old name of
    # it that nobody used, is gone: tests/test_cli_vocabulary.py keeps it out)
    commands = next(a for a in build_parser()._actions if a.dest == "command").choices
    having = sorted(name for name, p in commands.items() if any("--precision" in a.option_strings for a in p._actions))
    assert {"translate", "serve", "score", "parse", "attention"} <= set(having)
    p = argparse.ArgumentParser()
    add_precision_arg(p)
    assert p.parse_args([]).precision == "fp32" and p.parse_args(["--precision", "bf16"]).precision == "bf16"


@pytest.mark.parametrize("argv, code, says", [
    (["train", "--resume", "/no/such/run"], 1, "not a run directory"),
    (["train", "--data", "/no/such/data", "--out", "x", "--max-steps", "0"], 2, "--max-steps: must be an integer >= 1"),
    (["average", "--inputs", "/no/such.safetensors", "--output", "x"], 1, "no checkpoint"),
    (["average", "--inputs", "/no/such.safetensors"], 2, "--inputs needs --output"),
    (["evaluate", "--hyp", "/no/such/hyp"], 2, "--hyp needs --ref"),
    (["evaluate", "--ref", "/no/ref", "--hyp", "/no/a", "--paired-bs"], 2, "--paired-bs compares two or more systems"),
    (["evaluate", "--ref", "/no/ref", "--hyp", "/no/a", "--hyp", "/no/b"], 2, "add --paired-bs"),
    (["evaluate", "--ref", "/no/ref", "--hyp", "/no/a", "--hyp", "/no/a", "--paired-ar"], 2, "/no/a is given twice"),
    (["evaluate", "--paired-bs", "--paired-ar"], 2, "not allowed with"),
])
def test_user_errors_are_one_line(argv, code, says, capsys):
    assert main(argv) == code
    err = capsys.readouterr().err
    assert err.startswith("error: ") and says in err and err.count("\n") == 1 and "Traceback" not in err


def test_search_flags_validated_and_device_checked(copy_data, tmp_path, capsys):
    run = save_run(tiny_model(120), copy_data / "vocab.model", tmp_path / "run")
    assert main(["translate", "--checkpoint", str(run), "--beam", "2", "--nbest", "3"]) == 2
    assert "nbest must lie in 1..beam" in capsys.readouterr().err
    import torch

    if not torch.cuda.is_available():
        assert main(["translate", "--checkpoint", str(run), "--device", "cuda"]) == 2
        assert "sees no CUDA GPU" in capsys.readouterr().err


def test_a_bug_keeps_its_traceback(monkeypatch):
    def broken(args):
        raise KeyError("a bug, not a user's mistake")

    monkeypatch.setattr("aiayn.cli.params.params_command", broken)
    with pytest.raises(KeyError):
        main(["params"])


@pytest.mark.parametrize("path", sorted((REPO / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_are_valid(path):
    from aiayn.cli.train import load_config_file

    cfg = load_config_file(path)  # raises UsageError naming the file on an unknown preset, field or value
    assert cfg["preset"] and cfg["data"].startswith("data-bin/")


def test_set_overrides_read_json_values_and_refuse_a_missing_value():
    from aiayn.cli.common import model_overrides
    from aiayn.errors import UsageError

    assert model_overrides(["dropout=0.0", "norm_first=true", "positional=learned"]) == {
        "dropout": 0.0, "norm_first": True, "positional": "learned"}
    with pytest.raises(UsageError):
        model_overrides(["dropout"])
