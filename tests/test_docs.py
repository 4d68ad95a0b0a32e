"""The docs as a reference: every relative link resolves (anchors to a heading of the page), every path a page names
under benchmarks/results exists, no evidence folder is orphaned, and docs/paper.md names only code and tests that
exist."""

import re
from pathlib import Path

from helpers import REPO

RESULTS = REPO / "benchmarks" / "results"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
EVIDENCE_PATH = re.compile(r"benchmarks/results/[\w@.\-/]*[\w@]")
CODE_PATH = re.compile(r"`((?:aiayn|tests|benchmarks)/[\w/]+\.(?:py|sh))(?:::(\w+))?`")
DOTTED = re.compile(r"`(aiayn(?:\.\w+)+)`")


def pages() -> list[Path]:
    """The pages a reader meets: README, RESULTS, docs/, and every README under benchmarks/."""
    return [REPO / "README.md", REPO / "RESULTS.md", *sorted((REPO / "docs").glob("*.md")),
            *sorted((REPO / "benchmarks").rglob("README.md"))]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {slug(m) for m in re.findall(r"^#{1,6}\s+(.*)$", text, flags=re.M)}


def links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


def broken_links(page: Path) -> list[str]:
    bad = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{page.relative_to(REPO)}: {target}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    return bad


def test_every_relative_link_resolves():
    assert len(pages()) > 20
    bad = [b for page in pages() for b in broken_links(page)]
    assert not bad


def test_every_evidence_path_named_in_a_page_exists():
    bad = [f"{page.relative_to(REPO)}: {m}" for page in pages()
           for m in EVIDENCE_PATH.findall(page.read_text(encoding="utf-8"))
           if not (REPO / m).exists() and "<" not in m]
    assert not bad


def linked_evidence_folders() -> set[str]:
    """The folders directly under benchmarks/results that README.md, RESULTS.md or docs/ link to (or into)."""
    found = set()
    for page in [REPO / "README.md", REPO / "RESULTS.md", *(REPO / "docs").glob("*.md")]:
        for target in links(page):
            dest = (page.parent / target.partition("#")[0]).resolve()
            if dest.is_relative_to(RESULTS) and dest != RESULTS:
                found.add(dest.relative_to(RESULTS).parts[0])
    return found


def test_no_orphan_evidence():
    folders = {d.name for d in RESULTS.iterdir() if d.is_dir()}
    assert len(folders) > 10
    assert not folders - linked_evidence_folders(), "every results folder is linked from README, RESULTS or docs/"


def test_every_evidence_folder_says_how_it_was_made():
    missing = [d.name for d in RESULTS.iterdir() if d.is_dir() and not all(
        k in (d / "README.md").read_text(encoding="utf-8") for k in ("Command:", "Hardware:", "Measured on:"))]
    assert not missing


def test_evidence_is_lean():
    """Raw text over 1 kB is kept as .xz (python -m benchmarks.evidence compress), and the evidence stays at most a
    fifth of the repository's tracked bytes."""
    from benchmarks import evidence

    loose = [str(p.relative_to(REPO)) for d in RESULTS.iterdir() if d.is_dir() for p in evidence.compressible(d)]
    assert not loose, "compress them: python -m benchmarks.evidence compress FOLDER"
    kept_bytes, total = evidence.tracked_bytes(REPO)
    assert kept_bytes <= evidence.MOST_SHARE * total, f"evidence is {kept_bytes / total:.1%} of the repository"


def test_evidence_reader_takes_either_form(tmp_path):
    from benchmarks import evidence

    (tmp_path / "a.jsonl").write_text('{"step": 1}\n' * 600)
    assert evidence.compress(tmp_path) == [tmp_path / "a.jsonl.xz"] and not (tmp_path / "a.jsonl").exists()
    assert evidence.read_jsonl(tmp_path / "a.jsonl") == [{"step": 1}] * 600
    (tmp_path / "b.json").write_text("[]")  # small: left as it is
    assert evidence.compress(tmp_path) == [] and evidence.read_text(tmp_path / "b.json") == "[]"
    assert evidence.read_jsonl(tmp_path / "missing.jsonl") == []


def _section(text: str, start: str, end: str) -> str:
    return text[text.index(start):text.index(end, text.index(start))]


def test_readme_quickstart_rows_match_their_logs():
    """Each row of the README's table by kind of CPU: its test BLEU / chrF are what the linked raw log printed."""
    from benchmarks import evidence

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    rows = [r for r in _section(readme, "## On your hardware", "**Translating real text").splitlines() if "**" in r]
    assert len(rows) >= 3
    for row in rows:
        bleu, chrf = re.search(r"\*\*([\d.]+)\*\* / ([\d.]+)", row).groups()
        log = evidence.read_text(REPO / re.search(r"\]\((benchmarks/results/[^)]+\.log(?:\.xz)?)\)", row).group(1))
        assert re.search(rf"test BLEU {re.escape(bleu)} +chrF {re.escape(chrf)}", log), row[:60]


def test_real_text_ratios_match_the_evidence():
    """The README's and docs/speed.md's real-text ratios (whole process / in process) are rows of the committed
    table the benchmark wrote."""
    def rows(folder: str, model: str = "quickstart") -> set[tuple[str, str, str, str]]:
        table = (RESULTS / folder / model / "table.md").read_text(encoding="utf-8")
        return {(m[1], m[2], *re.findall(r"\*\*([\d.]+)\*\*", line)[:2]) for line in table.splitlines()
                if (m := re.match(r"\| (\d) \| (\w+) \|", line)) and line.count("**") >= 4}  # not start-up rows

    measured = rows("realtext-xeon-amx")
    epyc = set().union(*(rows("realtext-epyc-avx2", cells) for cells in ("1t", "2t")))  # 2t: CT2's inter_threads too
    zen4 = set().union(*(rows("realtext-epyc-zen4", cells) for cells in ("1t", "2t")))
    assert len(measured) == 6 and len(epyc) == 6 and len(zen4) == 9
    speed = _section((REPO / "docs" / "speed.md").read_text(encoding="utf-8"), "## Real text", "The other models")
    quoted = {(t, p, a, b) for t, p, a, b in re.findall(
        r"^\| (\d) \| (\w+) \| \w+ \| [^|]+ \| \*\*([\d.]+)\*\* \| [^|]+ \| \*\*([\d.]+)\*\*", speed, flags=re.M)}
    assert quoted == measured
    readme = _section((REPO / "README.md").read_text(encoding="utf-8"), "**Translating real text", "## Results")
    pairs = set(re.findall(r"(?<![\d.-])(\d\.\d\d)x / (\d\.\d\d)x", readme))
    assert len(pairs) >= 8 and pairs <= {(a, b) for _, _, a, b in measured | epyc | zen4}


def defines(module: Path, name: str) -> bool:
    return re.search(rf"^\s*(?:class|def|async def)\s+{name}\b|^{name}\s*[:=]", module.read_text(encoding="utf-8"),
                     flags=re.M) is not None


def module_file(dotted: str) -> tuple[Path | None, list[str]]:
    """The longest prefix of a dotted name that is a module or package of the repository, and the rest."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        base = REPO.joinpath(*parts[:i])
        for f in (base.with_suffix(".py"), base / "__init__.py"):
            if f.is_file():
                return f, parts[i:]
    return None, parts


def test_the_paper_map_names_code_and_tests_that_exist():
    text = (REPO / "docs" / "paper.md").read_text(encoding="utf-8")
    paths, dotted = CODE_PATH.findall(text), DOTTED.findall(text)
    assert len(paths) > 20 and len(dotted) > 20
    bad = [p for p, _ in paths if not (REPO / p).is_file()]
    bad += [f"{p}::{t}" for p, t in paths if t and (REPO / p).is_file() and not defines(REPO / p, t)]
    for name in dotted:
        f, rest = module_file(name)
        if f is None or (rest and not defines(f, rest[0])):
            bad.append(name)
    assert not bad
