"""The layering of docs/architecture.md: the core never imports the feature subpackages or their heavy optional
dependencies, so `pip install aiayn` without extras can train, translate and score."""

import ast
import subprocess
import sys

from helpers import REPO

PACKAGE = REPO / "aiayn"
FEATURES = ("aiayn.parsing", "aiayn.experiments", "aiayn.export", "aiayn.viz", "aiayn.serve", "aiayn.cli")
OPTIONAL_DEPS = ("transformers", "ctranslate2", "fastapi", "uvicorn", "matplotlib", "selenium", "datasets")


def core_files() -> list:
    """The core: the top-level modules (but `python -m aiayn`, which is the CLI) and data/ and metrics/."""
    files = [*PACKAGE.glob("*.py"), *(PACKAGE / "data").glob("*.py"), *(PACKAGE / "metrics").glob("*.py")]
    return sorted(f for f in files if f.name != "__main__.py")


def imported_modules(path) -> set[str]:
    """Every module an import statement in the file names, at any depth (lazy imports inside functions too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def test_core_sources_import_no_feature_subpackage():
    assert len(core_files()) > 15
    bad = {str(f.relative_to(REPO)): sorted(m for m in imported_modules(f) if m.startswith(FEATURES))
           for f in core_files()}
    assert not {f: m for f, m in bad.items() if m}


def test_importing_the_core_loads_no_feature_and_no_optional_dependency():
    core = [".".join(f.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__") for f in core_files()]
    code = (f"import sys\nfor m in {core!r}: __import__(m)\n"
            f"print(sorted(m for m in sys.modules if m.startswith({FEATURES + OPTIONAL_DEPS!r})))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
