"""The layering of docs/architecture.md: the core never imports the feature subpackages or their heavy optional
dependencies, so `pip install aiayn` without extras can train, translate and score."""

import ast
import subprocess
import sys

from helpers import REPO

PACKAGE = REPO / "aiayn"
FEATURES = ("aiayn.parsing", "aiayn.experiments", "aiayn.export", "aiayn.viz", "aiayn.serve", "aiayn.cli",
            "aiayn.markup", "aiayn.documents")
CORE_PACKAGES = ("data", "metrics", "decoding", "training")
OPTIONAL_DEPS = ("transformers", "ctranslate2", "fastapi", "uvicorn", "matplotlib", "selenium", "datasets")


def core_files() -> list:
    """The core: the top-level modules (but `python -m aiayn`, which is the CLI) and the core's subpackages."""
    files = [*PACKAGE.glob("*.py"), *(f for sub in CORE_PACKAGES for f in (PACKAGE / sub).glob("*.py"))]
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


# The core's floors, lowest first (docs/architecture.md): a module imports only modules on floors below its own.
FLOORS = [
    ["decoding", "training", "errors", "allocator", "torch_import"],  # the subpackages' __init__ import nothing
    ["native"],
    ["fast", "training.packed", "decoding.cache", "progress", "decoding.sampling", "decoding.sentences",
     "decoding.int8_rows"],
    ["files", "config", "extras", "metrics.bleu", "metrics.evalb", "decoding.ensemble", "languages",
     "decoding.alignment"],
    ["data.folder", "data.vocab", "data.batching", "model", "runtime", "decoding.search", "metrics.significance",
     "decoding.lines", "decoding.batches"],
    ["data.prepare", "data.corpora", "training.losses", "doctor", "decoding.static_search", "decoding.glossary",
     "decoding.attention", "decoding.aligner", "decoding.step"],
    ["data", "decoding.ct2"],
    ["training.checkpoint", "metrics.perplexity"],
    ["metrics", "rundir", "training.shrink"],
    ["decoding.inference", "decoding.shortlist", "training.run"],
    ["decoding.translator"],
    ["training.selection", "scoring", "decoding.engine"],
    ["training.train"],
    ["quickstart", "training.distill"],
]


def _module(path) -> str:
    return ".".join(path.relative_to(PACKAGE).with_suffix("").parts).removesuffix(".__init__") or "__init__"


def test_core_modules_import_only_from_floors_below():
    floor = {m: i for i, names in enumerate(FLOORS) for m in names}
    modules = {_module(f): f for f in core_files() if f != PACKAGE / "__init__.py"}
    assert set(modules) == set(floor), "every core module has its floor in FLOORS (and docs/architecture.md)"
    upward = {}
    for name, path in modules.items():
        used = {m.removeprefix("aiayn.") for m in imported_modules(path) if m.startswith("aiayn.")}
        bad = sorted(m for m in used if m in floor and floor[m] >= floor[name])
        if bad:
            upward[name] = bad
    assert not upward


def test_sizes_stay_readable_in_one_sitting():
    """No module over 500 lines, no function over 80 (docs/architecture.md: each module readable in one sitting)."""
    long_modules, long_functions = [], []
    for f in sorted(PACKAGE.rglob("*.py")):
        text = f.read_text(encoding="utf-8")
        if text.count("\n") > 500:
            long_modules.append(str(f.relative_to(REPO)))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 80:
                long_functions.append(f"{f.relative_to(REPO)}:{node.name}")
    assert not long_modules and not long_functions


def test_tests_mirror_the_package():
    """tests/test_<module>.py for every core module, tests/test_<subpackage>.py for every subpackage (errors are
    tested through every command: test_reliability.py)."""
    names = {_module(f).split(".")[0] for f in PACKAGE.rglob("*.py")} - {"__init__", "__main__", "errors"}
    missing = sorted(n for n in names if not (REPO / "tests" / f"test_{n}.py").is_file())
    assert not missing


def test_no_import_cycles():
    """No module imports, even lazily, one that imports it back, directly or through others (e.g. serve's app and
    reload share aiayn.serve.state instead of importing each other)."""
    modules = {"aiayn." + _module(f) if _module(f) != "__init__" else "aiayn": f for f in PACKAGE.rglob("*.py")}
    imports = {m: {n for n in imported_modules(f) if n in modules and n != m} for m, f in modules.items()}
    cycles = []
    for start in modules:  # a path from each module's imports back to it
        seen, todo = set(), list(imports[start])
        while todo:
            m = todo.pop()
            if m == start:
                cycles.append(start)
                break
            if m not in seen:
                seen.add(m)
                todo.extend(imports[m])
    assert not cycles


def test_multi_head_attention_reads_like_the_paper():
    """MultiHeadAttention.forward is eq. 1 and the projections, at most 30 lines: the cache, beam rows, kernels and
    attention recording live beside it (aiayn.decoding.cache, aiayn.fast, aiayn.training.packed, aiayn.viz)."""
    tree = ast.parse((PACKAGE / "model.py").read_text(encoding="utf-8"))
    mha = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "MultiHeadAttention")
    forward = next(n for n in mha.body if isinstance(n, ast.FunctionDef) and n.name == "forward")
    assert forward.end_lineno - forward.lineno + 1 <= 30


# What sets a process-wide setting: glibc's allocator (mallopt), oneDNN's kernel caches, torch's threads, cuDNN's
# attention, TF32. runtime.configure_process applies them; allocator.py and fast.py hold how the first two are done.
PROCESS_SETTERS = {"mallopt", "keep_freed_memory", "bound_kernel_cache", "set_num_threads", "enable_cudnn_sdp",
                   "attention_without_shape_plans", "allow_tf32"}
ENTRY_POINTS = {"cli/__init__.py": {"main"}, "serve/workers.py": {"serve", "build_server"},
                "runtime.py": {"setup_runtime"}, "decoding/inference.py": {"load"}}


def _setters(tree) -> set[str]:
    """The PROCESS_SETTERS a tree calls (allow_tf32: assigns)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            found.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            found.add(node.attr)
    return found & PROCESS_SETTERS


def test_process_settings_are_applied_in_one_place():
    """No module but runtime.py sets a process-wide setting (allocator.py's keep_freed_memory calls mallopt: how it
    is done); every entry point goes through runtime.configure_process instead."""
    setters = {str(f.relative_to(PACKAGE)): _setters(ast.parse(f.read_text(encoding="utf-8")))
               for f in sorted(PACKAGE.rglob("*.py"))}
    # allocator.py: how glibc's setting is made (torch-free); cli/__init__.py makes it alone for a command that runs
    # without torch (translate --engine ct2), where configure_process (torch) is not imported
    assert {f: s for f, s in setters.items() if s and f != "runtime.py"} == {"allocator.py": {"mallopt"},
                                                                             "cli/__init__.py": {"keep_freed_memory"}}
    for path, functions in ENTRY_POINTS.items():
        tree = ast.parse((PACKAGE / path).read_text(encoding="utf-8"))
        through = {f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name in functions
                   and any(getattr(c.func, "id", getattr(c.func, "attr", "")) == "configure_process"
                           for c in ast.walk(f) if isinstance(c, ast.Call))}
        assert through == functions, path


def test_the_top_level_holds_the_concepts_a_reader_needs():
    """At most 24 modules at the top of the package (__init__ and __main__ included): decoding and training code
    lives in aiayn/decoding/ and aiayn/training/, whose __init__ import nothing (a command loads what it runs)."""
    assert len(list(PACKAGE.glob("*.py"))) <= 24
    for sub in ("decoding", "training"):
        tree = ast.parse((PACKAGE / sub / "__init__.py").read_text(encoding="utf-8"))
        assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))], sub
