"""One command-line vocabulary: every subcommand spells and explains the flags it shares with others one way
(aiayn.cli.common): --source-lang/--target-lang, --device (default auto), --out for a folder and --output for a file,
--precision; every option has a help line. A flag that drifts (an old or new spelling, another default, its own help
text) fails test_every_command_speaks_one_vocabulary; test_a_divergent_flag_is_caught shows that it would. A renamed
flag's old spelling is gone, not hidden: it is an error like any unknown flag."""

import argparse
import re

import pytest

from aiayn.cli import build_parser, main
from aiayn.cli.common import add_device_arg, add_language_args, add_precision_arg
from aiayn.training.train import TrainConfig

OLD_SPELLINGS = {"--src-lang": "--source-lang", "--tgt-lang": "--target-lang", "--lang": "--target-lang",
                 "--weights": "--precision"}


def commands(parser: argparse.ArgumentParser | None = None) -> dict[str, argparse.ArgumentParser]:
    parser = parser or build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def shown(p: argparse.ArgumentParser) -> list[argparse.Action]:
    """The arguments --help lists (hidden ones, help=SUPPRESS, are old spellings or internal)."""
    return [a for a in p._actions if a.help != argparse.SUPPRESS]


def _help_of(add, *args, **kwargs) -> dict[str, str]:
    """{flag: help} of what a common.add_* function adds, on a parser of its own."""
    p = argparse.ArgumentParser()
    add(p, *args, **kwargs)
    return {a.option_strings[0]: a.help for a in p._actions if a.option_strings and a.dest != "help"}


def device_help(default: str) -> str:
    return _help_of(add_device_arg, default)["--device"]


def _default(command: str, action: argparse.Action):
    """The flag's default; train's TrainConfig flags default to None on the command line (not given, so that --resume
    can refuse a given one), and to their field's default otherwise."""
    if command == "train" and action.default is None:
        return next(f.default for f in TrainConfig.__dataclass_fields__.values() if f.name == action.dest)
    return action.default


def problems(cmds: dict[str, argparse.ArgumentParser]) -> list[str]:
    """Each way a command's flags leave the shared vocabulary, as one line naming the command and the flag."""
    languages, precision = _help_of(add_language_args), _help_of(add_precision_arg)["--precision"]
    found = []
    for name, p in cmds.items():
        for a in shown(p):
            where = f"{name} {'/'.join(a.option_strings) or a.dest}"
            if not (isinstance(a.help, str) and a.help.strip()):
                found.append(f"{where}: no help line")
            for opt in a.option_strings:
                if opt in OLD_SPELLINGS:
                    found.append(f"{where}: {opt} is the old spelling of {OLD_SPELLINGS[opt]}")
                elif "lang" in opt and opt not in languages:
                    found.append(f"{where}: a language is --source-lang or --target-lang")
                elif "device" in opt and opt != "--device":
                    found.append(f"{where}: the device is --device")
                elif opt.startswith("--out") and opt not in ("--out", "--output"):
                    found.append(f"{where}: a folder is --out, a file --output")
            opt = a.option_strings[0] if a.option_strings else None
            help_ = a.help if isinstance(a.help, str) else ""
            if opt == "--device":
                default = _default(name, a)
                if default != "auto":
                    found.append(f"{where}: defaults to {default!r}, not 'auto'")
                if help_ != device_help(default):
                    found.append(f"{where}: its help is not add_device_arg's: {help_!r}")
            elif opt in languages and help_ != languages[opt]:
                found.append(f"{where}: its help is not add_language_args': {help_!r}")
            elif opt == "--precision" and help_ != precision:
                found.append(f"{where}: its help is not add_precision_arg's: {help_!r}")
            elif opt == "--out" and not (re.search(r"\b(folder|directory)\b", help_)
                                         and not re.search(r"\bfile\b", help_)):
                found.append(f"{where}: --out names a folder (a file is --output): {help_!r}")
            elif opt == "--output" and not re.search(r"\bfile\b", help_):
                found.append(f"{where}: --output names a file (a folder is --out): {help_!r}")
    return found


def test_every_command_speaks_one_vocabulary():
    cmds = commands()
    assert not problems(cmds)
    having = {flag: {name for name, p in cmds.items() for a in shown(p) if flag in a.option_strings}
              for flag in ("--device", "--source-lang", "--target-lang", "--out", "--output")}
    assert {"quickstart", "train", "translate", "score", "attention", "serve", "parse", "evaluate", "variations",
            "paper"} <= having["--device"]
    assert having["--source-lang"] == {"prepare", "serve", "export", "import"}
    assert having["--target-lang"] == {"prepare", "serve", "export", "import", "evaluate"}
    assert {"average", "plot", "shortlist", "score", "translate", "parse"} <= having["--output"]
    for name, p in cmds.items():  # nor in the text of --help
        assert not re.search(r"--(src|tgt)-lang|--lang\b|--weights\b", p.format_help()), name


def test_a_divergent_flag_is_caught():
    def one(*args, **kwargs) -> dict[str, argparse.ArgumentParser]:
        parser = argparse.ArgumentParser()
        parser.add_subparsers().add_parser("new").add_argument(*args, **kwargs)
        return commands(parser)

    assert not problems(one("--device", default="auto", help=device_help("auto")))
    for bad in [one("--src-lang", help="source language"), one("--lang", help="language"),
                one("--weights", help="precision"), one("--source-language", help="x"),
                one("--device", default="cpu", help=device_help("cpu")),
                one("--device", default="auto", help="auto, cpu or cuda"), one("--gpu-device", help="x"),
                one("--target-lang", help="target language"), one("--out", help="output file"),
                one("--output", help="output folder"), one("--out-dir", help="folder"), one("--beam"),
                one("--precision", help="fp32 or int8")]:
        assert len(problems(bad)) >= 1, bad["new"]._actions[-1].option_strings


# Spellings of flags that were renamed before the first release: none is accepted
OLD_NAMES = [
    ["prepare", "--tsv", "t.tsv", "--out", "d", "--src-lang", "en"],
    ["prepare", "--tsv", "t.tsv", "--out", "d", "--tgt-lang", "es"],
    ["evaluate", "--hyp", "h", "--ref", "r", "--lang", "de"],
]  # (average and plot --out: argparse's abbreviation of their --output, the same meaning)


@pytest.mark.parametrize("argv", OLD_NAMES, ids=[f"{a[0]} {a[-2]}" for a in OLD_NAMES])
def test_an_old_spelling_is_an_error(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and argv[-2] in err


def test_no_flag_is_hidden():
    """Every flag is in --help: no hidden second spelling of a flag."""
    hidden = {(name, opt) for name, p in commands().items() for a in p._actions if a.help == argparse.SUPPRESS
              for opt in a.option_strings if any(a.dest == b.dest for b in shown(p))}
    assert not hidden
