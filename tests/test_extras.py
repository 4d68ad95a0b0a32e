"""Every command that needs an optional extra says so in one "error:" line (exit 1, no traceback) when the extra is
not installed, naming the extra and its pip line; training without tensorboard stays silent."""

import sys

import pytest

from aiayn.cli import main
from aiayn.data import load_wmt14
from aiayn.extras import OPTIONAL, MissingExtra, pip_line


def hide(monkeypatch, *modules: str) -> None:
    """Make `import m` fail for each module, as if it were not installed (None in sys.modules)."""
    for m in modules:
        monkeypatch.setitem(sys.modules, m, None)


# (command line, modules hidden, what the error names, the extra)
CASES = [
    (["attention", "--checkpoint", "{tmp}/run", "--src", "a b", "--out", "{tmp}/maps"], ["matplotlib"],
     "aiayn attention", "viz"),
    (["plot", "{tmp}/run"], ["matplotlib"], "aiayn plot", "viz"),
    (["table1", "--quick", "--plot", "{tmp}/t1.png"], ["matplotlib"], "aiayn table1 --plot", "viz"),
    (["serve", "--checkpoint", "{tmp}/run"], ["fastapi", "uvicorn"], "aiayn serve", "serve"),
    (["serve", "--checkpoint", "{tmp}/run"], ["uvicorn"], "aiayn serve", "serve"),
    (["serve", "--checkpoint", "{tmp}/run"], ["python_multipart", "fastapi_offline", "prometheus_client"],
     "aiayn serve", "serve"),
    (["export", "--checkpoint", "{tmp}/run", "--to", "hf", "{tmp}/hf"], ["transformers"], "aiayn export --to hf",
     "export"),
    (["export", "--checkpoint", "{tmp}/run", "--to", "ct2", "{tmp}/ct2"], ["ctranslate2"], "aiayn export --to ct2",
     "export"),
    (["export", "--checkpoint", "{tmp}/run", "--to", "argos", "{tmp}/x.argosmodel", "--source-lang", "en",
      "--target-lang", "es"], ["spacy"], "aiayn export --to argos", "export"),
    (["translate", "--checkpoint", "{tmp}/ct2", "--engine", "ct2", "--lp", "power"], ["ctranslate2"],
     "decoding with CTranslate2 (--engine ct2)", "export"),
]


@pytest.mark.parametrize("argv, hidden, what, extra", CASES, ids=[" ".join(c[0][:1] + c[1]) for c in CASES])
def test_a_command_without_its_extra_is_one_error_line(argv, hidden, what, extra, tmp_path, monkeypatch, capsys):
    hide(monkeypatch, *hidden)
    assert main([a.format(tmp=tmp_path) for a in argv]) == 1
    out, err = capsys.readouterr()
    assert err.splitlines() == [f"error: {what} needs the {extra} extra ({', '.join(hidden)} not installed): "
                                f"{pip_line(extra)}"]
    assert pip_line(extra) == f'pip install -e ".[{extra}]"' and not list(tmp_path.iterdir())


def test_load_wmt14_without_datasets_names_its_extra(tmp_path, monkeypatch):
    hide(monkeypatch, "datasets")
    with pytest.raises(MissingExtra, match=r'load_wmt14 needs the datasets extra \(datasets not installed\): '
                                           r'pip install -e "\.\[datasets\]"'):
        load_wmt14(out_dir=tmp_path)


def test_every_optional_module_is_asked_for_by_some_case():
    hidden = {m for case in CASES for m in case[1]} | {"datasets", "tensorboard"}
    assert hidden == {m for _, modules, _ in OPTIONAL.values() for m in modules}


def test_training_without_tensorboard_is_silent(copy_data, tmp_path, monkeypatch, capsys):
    hide(monkeypatch, "tensorboard", "torch.utils.tensorboard")
    run = tmp_path / "run"
    assert main(["train", "--data", str(copy_data), "--out", str(run), "--preset", "tiny", "--max-tokens", "160",
                 "--max-steps", "2", "--save-every-minutes", "0", "--no-progress", "--threads", "1"]) == 0
    err = capsys.readouterr().err
    assert "tensorboard" not in err.lower() and "error" not in err
    assert (run / "log.jsonl").is_file() and not (run / "tb").exists()
