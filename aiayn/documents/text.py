"""Plain text (.txt), and what the line-based formats share: lines joined into one block and cut back.

A line is translated on its own, as `aiayn translate` does, unless it is prose wrapped onto the next line: a line
that ends no sentence and is long (50 characters or more) or followed by a line starting in lower case goes on into
the next one, and the lines so joined are one block, so a sentence wrapped over several lines is translated whole;
each line is a "part" span of it, and the translation is cut back into the same number of lines at the target words
aligned to each line's end (aiayn.documents.blocks.distribute). Blank lines, each line's indentation and trailing
spaces, and the file's line endings (\n or \r\n) are kept.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aiayn.documents.blocks import BlockBuilder, Node, distribute, nest
from aiayn.documents.safe import DocumentLimits, check_size
from aiayn.errors import DataError
from aiayn.files import write_text
from aiayn.markup.spans import Block

Inline = Callable[[BlockBuilder, str], None]  # adds one line's text (with its inline spans) to a block
Render = Callable[[list], str]  # a nested piece of a translated block back to text


def plain_inline(b: BlockBuilder, text: str) -> None:
    b.text(text)


def render_plain(items: list) -> str:
    return "".join(i if isinstance(i, str) else render_plain(i.children) for i in items)


def parts_block(parts: list[str], inline: Inline = plain_inline) -> Block:
    """One block of several parts (lines, cues), joined by a space, each a wrap span ("part", i)."""
    b = BlockBuilder()
    for i, part in enumerate(parts):
        if i:
            b.text(" ")
        b.open(("part", i))
        inline(b, part)
        b.close()
    return b.block()


def split_parts(block: Block, sizes: list[int], render: Render = render_plain) -> list[str]:
    """A translated parts_block cut back into its parts, in order (see blocks.distribute)."""
    items = []
    for item in nest(block):
        if isinstance(item, Node) and isinstance(item.span.key, tuple) and item.span.key[0] == "part":
            items.append((item.span.key[1], render(item.children)))
        else:
            items.append((None, render([item])))
    return distribute(items, sizes)


def read_text(path: Path, limits: DocumentLimits) -> str:
    """A text file's content (strict UTF-8, a BOM dropped): a bad byte names the file and the line."""
    check_size(path, limits)
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise DataError(f"{path}, line {line}: not valid UTF-8 ({e.reason}); re-encode the file as UTF-8") from None


_LINE = re.compile(r"^(\s*)(.*?)(\s*)$")


@dataclass
class Paragraph:
    first: int  # index of its first line
    prefixes: list[str]
    texts: list[str]
    suffixes: list[str]


_ENDS = re.compile(r"[.!?…:;。！？][\"'”’»)\]]*$")
WRAPPED = 50  # a line this long that ends no sentence is taken for prose wrapped onto the next line


def _continues(line: str, next_line: str) -> bool:
    """Whether next_line goes on with line's sentence: line ends none, and is long (wrapped prose) or the next one
    starts in lower case. Short lines without a full stop (titles, lists, verse) stay lines of their own."""
    return not _ENDS.search(line) and (len(line) >= WRAPPED or next_line[:1].islower())


class TextDocument:
    """A .txt file read for translation: one block per paragraph."""

    def __init__(self, path: Path, limits: DocumentLimits) -> None:
        text = read_text(path, limits)
        self.lines = text.split("\n")  # a \r before it stays in the line's suffix: endings kept as they were
        self.paragraphs: list[Paragraph] = []
        current = None
        for n, line in enumerate(self.lines):
            pre, body, post = _LINE.match(line).groups()
            if not body:
                current = None
                continue
            if current is None or not _continues(current.texts[-1], body):
                current = Paragraph(n, [], [], [])
                self.paragraphs.append(current)
            current.prefixes.append(pre)
            current.texts.append(body)
            current.suffixes.append(post)
        self.blocks = [parts_block(p.texts) for p in self.paragraphs]

    def write(self, path_out: Path, translated: list[Block], target_lang: str) -> None:
        lines = list(self.lines)
        for p, block in zip(self.paragraphs, translated):
            pieces = split_parts(block, [len(t) for t in p.texts])
            for k, piece in enumerate(pieces):
                lines[p.first + k] = p.prefixes[k] + piece + p.suffixes[k]
        write_text(path_out, "\n".join(lines))
