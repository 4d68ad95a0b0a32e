"""SubRip subtitles (.srt): sentences that run across cues translated whole, cut back into the same cues.

Cues follow each other into one block until a cue ends a sentence (. ! ? … and their closing quotes), so "I think
that" / "we should go." is one sentence; each line of each cue is a "part" span, and the translation is cut back at
the target words aligned to each line's end (in order; a line left empty gets its share of the words in proportion,
aiayn.documents.blocks.distribute). Numbers, timings (and positions after them) are kept; a dialogue dash opening a
line stays; <i>, <b>, <u> and <font> tags are wrap spans, other tags and {\\...} overrides stay at their place.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from aiayn.documents.blocks import BlockBuilder, Node
from aiayn.documents.safe import DocumentLimits
from aiayn.documents.text import parts_block, read_text, split_parts
from aiayn.errors import DataError
from aiayn.files import write_text
from aiayn.markup.spans import Block

_TIMING = re.compile(r"^\s*\d+:\d\d:\d\d[,.]\d+\s*-->\s*\d+:\d\d:\d\d[,.]\d+")
_SENTENCE_END = re.compile(r"[.!?…。！？♪][\"'”’»)\]]*\s*$")
_TAG = re.compile(r"<(/?)([a-zA-Z]+)[^>]*>|\{\\[^}]*\}")
_WRAPS = ("i", "b", "u", "font")
_DASH = re.compile(r"^(\s*-\s*)(.*)$")
MOST_CUES = 8  # a block joins at most this many cues (a run of cues without a full stop is cut there)


@dataclass
class Cue:
    head: list[str]  # number and timing lines
    lines: list[str]  # text lines, dialogue dash split off into prefixes
    prefixes: list[str]


def parse_srt(text: str, path: Path) -> list[Cue]:
    cues = []
    for n, chunk in enumerate(re.split(r"\n\s*\n", text.replace("\r\n", "\n").strip("\n")), 1):
        rows = chunk.split("\n")
        timing = next((i for i, r in enumerate(rows[:2]) if _TIMING.match(r)), None)
        if timing is None:
            raise DataError(f"{path}: cue {n} has no timing line (HH:MM:SS,mmm --> HH:MM:SS,mmm); not a SubRip file?")
        cue = Cue(rows[:timing + 1], [], [])
        for row in rows[timing + 1:]:
            dash, body = _DASH.match(row).groups() if _DASH.match(row) else ("", row)
            cue.prefixes.append(dash)
            cue.lines.append(body)
        cues.append(cue)
    return cues


def srt_inline(b: BlockBuilder, text: str) -> None:
    """A line's text with its tags: paired <i>/<b>/<u>/<font> as wrap spans, the rest kept in place."""
    pos, stack = 0, []
    for m in _TAG.finditer(text):
        b.text(text[pos:m.start()])
        pos = m.end()
        closing, name = m.group(1), (m.group(2) or "").lower()
        if name in _WRAPS and not closing:
            b.open(("tag", m.group(0), f"</{m.group(2)}>"))
            stack.append(name)
        elif name in _WRAPS and stack and stack[-1] == name:
            b.close()
            stack.pop()
        else:
            b.void(("raw", m.group(0)))
    b.text(text[pos:])
    while stack:  # a tag left open at the line's end is closed there (and written closed)
        b.close()
        stack.pop()


def render_srt(items: list) -> str:
    out = []
    for item in items:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, Node) and isinstance(item.span.key, tuple) and item.span.key[0] == "tag":
            inner = render_srt(item.children)  # a tag left around nothing is dropped
            out.append(item.span.key[1] + inner + item.span.key[2] if inner.strip() else inner)
        elif isinstance(item, Node) and isinstance(item.span.key, tuple) and item.span.key[0] == "raw":
            out.append(item.span.key[1])
        else:
            out.append(render_srt(item.children))
    return "".join(out)


class SrtDocument:
    """An .srt file read for translation: one block per run of cues that a sentence crosses."""

    def __init__(self, path: Path, limits: DocumentLimits) -> None:
        text = read_text(path, limits)
        self.newline = "\r\n" if "\r\n" in text else "\n"
        self.cues = parse_srt(text, path)
        self.groups: list[list[int]] = []
        for i, cue in enumerate(self.cues):
            joined = " ".join(cue.lines)
            if not self.groups or len(self.groups[-1]) >= MOST_CUES or _ends_sentence(self.cues[self.groups[-1][-1]]):
                self.groups.append([])
            self.groups[-1].append(i)
            if not joined.strip():
                self.groups.append([])  # a cue without text ends the run
        self.groups = [g for g in self.groups if g]
        self.blocks = [parts_block([line for i in g for line in self.cues[i].lines], srt_inline) for g in self.groups]

    def write(self, path_out: Path, translated: list[Block], target_lang: str) -> None:
        for group, block in zip(self.groups, translated):
            lines = [line for i in group for line in self.cues[i].lines]
            pieces = iter(split_parts(block, [len(_TAG.sub("", line)) for line in lines], render_srt))
            for i in group:  # a line left empty is dropped: a blank line would end the cue
                cue = self.cues[i]
                kept = [(p, line) for p, line in zip(cue.prefixes, (next(pieces) for _ in cue.lines)) if line]
                cue.prefixes, cue.lines = [p for p, _ in kept], [line for _, line in kept]
        chunks = ["\n".join(c.head + [p + line for p, line in zip(c.prefixes, c.lines)]) for c in self.cues]
        write_text(path_out, ("\n\n".join(chunks) + "\n").replace("\n", self.newline))


def _ends_sentence(cue: Cue) -> bool:
    return bool(_SENTENCE_END.search(_TAG.sub("", " ".join(cue.lines)))) or not "".join(cue.lines).strip()
