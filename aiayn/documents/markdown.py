"""Markdown (.md): the text translated, the file otherwise written back as it was (no reformatting).

Kept as they are: front matter (--- or +++ at the top), fenced and indented code blocks, HTML blocks, link reference
definitions, thematic breaks, setext underlines, table separator rows, and every line's markers (headings' #,
list bullets and numbers, task boxes, blockquotes' >, indentation, a hard break's trailing spaces). A paragraph or
list item wrapped over several lines is one block cut back into as many lines (aiayn.documents.text). Inline:
`code` and autolinks <...> are kept verbatim ("keep" spans), emphasis (** __ * _ ~~), links [text](url),
reference links [text][ref] and [text], and images' alt text ![alt](src) are wrap spans whose URLs and labels are
untouched, inline HTML tags stay at their place. Table rows are translated cell by cell. Emphasis is read within a
line (a ** pair across a line break is left as text); a code span cut by a line break joins its two lines into one,
the one change to the layout (Markdown reads a soft break as a space).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from aiayn.documents.blocks import BlockBuilder, Node
from aiayn.documents.safe import DocumentLimits
from aiayn.documents.text import parts_block, read_text, split_parts
from aiayn.files import write_text
from aiayn.markup.spans import Block

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_REF_DEF = re.compile(r"^ {0,3}\[([^\]]+)\]:\s*\S+")
_HTML_BLOCK = re.compile(r"^ {0,3}<(/?[a-zA-Z][\w-]*|!--)")
_BREAK = re.compile(r"^ {0,3}([-*_])(\s*\1){2,}\s*$|^ {0,3}=+\s*$")
_TABLE_SEP = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
_HEADING = re.compile(r"^( {0,3}#{1,6}\s+)(.*?)(\s+#+)?(\s*)$")
_ITEM = re.compile(r"^(\s*(?:>\s?)*(?:[-*+]|\d{1,9}[.)])\s+(?:\[[ xX]\]\s+)?)(.*?)(\s*)$")
_QUOTE = re.compile(r"^(\s*(?:>\s?)+)(.*?)(\s*)$")
_LINE = re.compile(r"^(\s*)(.*?)(\s*)$")
_CODE = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)")
_AUTOLINK = re.compile(r"<(?:[a-zA-Z][\w+.-]*:[^\s<>]+|[\w.+-]+@[\w-]+(?:\.[\w-]+)+)>")
_TAG = re.compile(r"</?[a-zA-Z][\w-]*(?:\s[^<>]*)?/?>")
_EMPHASIS = ("**", "__", "~~", "*", "_")


@dataclass
class Unit:
    """Lines translated as one block: their indexes, each line's prefix and suffix, and the texts in between."""

    lines: list[int] = field(default_factory=list)
    prefixes: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    suffixes: list[str] = field(default_factory=list)
    joined: list[int] = field(default_factory=list)  # lines written into the line before them (see _join_code)


class _Inline:
    """A line's inline Markdown as spans on a builder."""

    def __init__(self, refs: set[str]) -> None:
        self.refs = refs

    def __call__(self, b: BlockBuilder, s: str) -> None:
        plain, i = [], 0
        while i < len(s):
            found = self._at(b, s, i, plain)
            if found is None:
                plain.append(s[i])
                i += 1
            else:
                i = found
        b.text("".join(plain))

    def _at(self, b: BlockBuilder, s: str, i: int, plain: list) -> int | None:
        """Add the construct starting at s[i] (flushing the plain text before it); its end, or None."""
        c = s[i]
        if c == "\\" and i + 1 < len(s) and not s[i + 1].isalnum():
            return self._flush(b, plain, lambda: b.keep(s[i + 1], ("esc",)), i + 2)
        if c == "`" and (m := _CODE.match(s, i)):
            return self._flush(b, plain, lambda: b.keep(m.group(2), ("code", m.group(1))), m.end())
        if c == "<" and (m := _AUTOLINK.match(s, i) or _TAG.match(s, i)):
            return self._flush(b, plain, lambda: b.void(("raw", m.group(0))), m.end())
        if c in "![" and (found := self._link(s, i)):
            start, end, close = found
            return self._flush(b, plain, lambda: self._wrap(b, s[start:end], s[i:start], close), end + len(close))
        for marker in _EMPHASIS:
            if s.startswith(marker, i) and (end := self._closing(s, i, marker)) is not None:
                inner, mark = s[i + len(marker):end], marker
                return self._flush(b, plain, lambda: self._wrap(b, inner, mark, mark), end + len(mark))  # noqa: B023
        return None

    @staticmethod
    def _flush(b: BlockBuilder, plain: list, add, end: int) -> int:
        b.text("".join(plain))
        plain.clear()
        add()
        return end

    def _wrap(self, b: BlockBuilder, inner: str, opening: str, closing: str) -> None:
        b.open(("md", opening, closing))
        self(b, inner)
        b.close()

    def _link(self, s: str, i: int) -> tuple[int, int, str] | None:
        """[text](url), [text][ref], [text] (a defined reference), with ! for an image: (text start, text end,
        what closes it)."""
        start = i + 2 if s.startswith("![", i) else i + 1
        if s[start - 1] != "[":
            return None
        depth, j = 1, start
        while j < len(s) and depth:
            depth += {"[": 1, "]": -1}.get(s[j], 0) if s[j - 1] != "\\" or j == start else 0
            j += 1
        if depth:
            return None
        end = j - 1
        rest = s[j:]
        if rest.startswith("(") and (m := re.match(r"\((?:[^()\s]|\([^()]*\))*(?:\s+(\"[^\"]*\"|'[^']*'))?\)", rest)):
            return start, end, "]" + m.group(0)
        if m := re.match(r"\[([^\]]*)\]", rest):
            if (m.group(1) or s[start:end]).lower() in self.refs:
                return start, end, "]" + m.group(0)
        if s[start:end].lower() in self.refs and start == i + 1:
            return start, end, "]"
        return None

    @staticmethod
    def _closing(s: str, i: int, marker: str) -> int | None:
        """Where an emphasis opened at s[i] closes (CommonMark's flanking, simplified): no space inside its edges;
        _ and __ never inside a word."""
        after = i + len(marker)
        if after >= len(s) or s[after].isspace() or s[after] == marker[0]:
            return None
        if marker[0] == "_" and i > 0 and s[i - 1].isalnum():
            return None
        j = after + 1
        while (j := s.find(marker, j)) != -1:
            before_ok = not s[j - 1].isspace()
            after_char = s[j + len(marker)] if j + len(marker) < len(s) else " "
            if before_ok and after_char != marker[0] and not (marker[0] == "_" and after_char.isalnum()):
                return j
            j += 1
        return None


def render_markdown(items: list) -> str:
    out = []
    for item in items:
        if isinstance(item, str):
            out.append(item)
            continue
        key = item.span.key if isinstance(item, Node) and isinstance(item.span.key, tuple) else ("",)
        inner = render_markdown(item.children)
        if key[0] == "md" and (inner.strip() or key[1] == "!["):  # an emphasis or link left empty is dropped
            out.append(key[1] + inner + key[2])
        elif key[0] == "md":
            out.append(inner)
        elif key[0] == "code":
            pad = " " if inner.startswith("`") or inner.endswith("`") else ""
            out.append(key[1] + pad + inner + pad + key[1])
        elif key[0] == "esc":
            out.append("\\" + inner)
        elif key[0] == "raw":
            out.append(key[1])
        else:
            out.append(inner)
    return "".join(out)


class MarkdownDocument:
    """A .md file read for translation: one block per paragraph, list item, heading or table cell."""

    def __init__(self, path: Path, limits: DocumentLimits) -> None:
        text = read_text(path, limits)
        self.lines = text.split("\n")  # a \r before it stays in the line's suffix: endings kept as they were
        refs = {m.group(1).lower() for line in self.lines if (m := _REF_DEF.match(line))}
        self.inline = _Inline(refs)
        self.units = _units(self.lines)
        self.blocks = [parts_block(u.texts, self.inline) for u in self.units]

    def write(self, path_out: Path, translated: list[Block], target_lang: str) -> None:
        lines, touched = list(self.lines), set()
        for unit, block in zip(self.units, translated):
            pieces = split_parts(block, [len(t) for t in unit.texts], render_markdown)
            for n, pre, piece, post in zip(unit.lines, unit.prefixes, pieces, unit.suffixes):
                lines[n] = (lines[n] if n in touched else "") + pre + piece + post  # a table row: cell after cell
                touched.add(n)
        dropped = {n for unit in self.units for n in unit.joined}
        write_text(path_out, "\n".join(line for n, line in enumerate(lines) if n not in dropped))


def _units(lines: list[str]) -> list[Unit]:
    """The translatable units of a Markdown file, in order (see the module's docstring for what is kept)."""
    units: list[Unit] = []
    current: Unit | None = None
    skip_until, fence, after_blank, in_list = _front_matter(lines), None, True, False
    for n, line in enumerate(lines):
        if n < skip_until:
            continue
        if fence:
            fence = None if re.match(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$", line) else fence
            continue
        if m := _FENCE.match(line):
            fence, current = m.group(1), None
            continue
        if not line.strip():
            current, after_blank = None, True
            continue
        if after_blank and not in_list and line.startswith(("    ", "\t")):
            continue  # an indented code block (after_blank stays set for its next lines)
        if _REF_DEF.match(line) or _BREAK.match(line) or _TABLE_SEP.match(line) or (
                _HTML_BLOCK.match(line) and current is None):
            current, after_blank = None, False
            continue
        after_blank = False
        if "|" in line and _is_table_row(lines, n):
            units.extend(_table_cells(n, line))
            current = None
            continue
        m = _HEADING.match(line) or _ITEM.match(line)
        if m or current is None:
            m = m or _QUOTE.match(line) or _LINE.match(line)
            in_list = bool(_ITEM.match(line)) or (in_list and line[:1].isspace())
            current = Unit()
            units.append(current)
            if _HEADING.match(line):
                current.lines.append(n)
                current.prefixes.append(m.group(1))
                current.texts.append(m.group(2))
                current.suffixes.append((m.group(3) or "") + m.group(4))
                current = None
                continue
        else:
            m = _QUOTE.match(line) or _LINE.match(line)
        current.lines.append(n)
        current.prefixes.append(m.group(1))
        current.texts.append(m.group(2))
        current.suffixes.append(m.group(3))
    return [_join_code(u) for u in units if any(ch.isalnum() for t in u.texts for ch in t)]


def _join_code(unit: Unit) -> Unit:
    """A code span that a line break cuts (`a` ... `b\nc`) is read whole: its two lines become one (a soft line
    break is a space in Markdown, so the page reads the same), the only change to the layout."""
    k = 0
    while k + 1 < len(unit.texts):
        if "`" in _CODE.sub("", unit.texts[k].replace("\\`", "")):  # a backtick left open at the line's end
            unit.texts[k] += " " + unit.texts.pop(k + 1)
            unit.suffixes[k] = unit.suffixes.pop(k + 1)
            unit.joined.append(unit.lines.pop(k + 1))
            unit.prefixes.pop(k + 1)
        else:
            k += 1
    return unit


def _front_matter(lines: list[str]) -> int:
    """The number of lines of YAML (---) or TOML (+++) front matter at the top (0 if none)."""
    if lines and lines[0].strip() in ("---", "+++"):
        for n, line in enumerate(lines[1:], 1):
            if line.strip() == lines[0].strip() or (lines[0].strip() == "---" and line.strip() == "..."):
                return n + 1
    return 0


def _is_table_row(lines: list[str], n: int) -> bool:
    """A row of a pipe table: this line or the one after (the header) or some line above it is a separator row."""
    if n + 1 < len(lines) and _TABLE_SEP.match(lines[n + 1]) and "-" in lines[n + 1]:
        return True
    k = n - 1
    while k >= 0 and "|" in lines[k] and lines[k].strip():
        if _TABLE_SEP.match(lines[k]) and "-" in lines[k]:
            return True
        k -= 1
    return False


def _table_cells(n: int, line: str) -> list[Unit]:
    """Each cell of a table row as a one-line unit: everything around the cell's text stays (pipes, padding)."""
    units, pos = [], 0
    for m in re.finditer(r"(?:\\\||`[^`]*`|[^|])+", line):
        cell = m.group(0)
        pre, body, post = _LINE.match(cell).groups()
        if body and any(ch.isalnum() for ch in body):
            units.append(Unit([n], [line[pos:m.start()] + pre], [body], [post]))
            pos = m.end()
    if units:
        units[-1].suffixes[-1] += line[pos:]
    return units
