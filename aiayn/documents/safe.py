"""Reading untrusted documents safely: bounded zips, XML without entities or network, one error line per problem.

    DocumentLimits            the bounds a document must stay within (file size, unpacked size, ratio, text budget)
    read_zip(path, limits)    a zip's entries (read when asked for), after every check (size, ratio, count,
                              encryption, names, each entry unpacking whole)
    write_zip(path, entries)  the entries back, atomically, `mimetype` first and stored where the format wants it;
                              entries not replaced are streamed from the input
    xml_safe(text)            a translation's text without the characters XML cannot hold
    parse_xml(data, where)    an lxml tree from bytes: no DTD loaded, no entity expanded, no network, no DOCTYPE with
                              an internal subset (where entity bombs live); a parse error names the file and part
    refuse_macros(...)        a package holding macros (vbaProject.bin, ODF Basic/Scripts) is refused

Every problem is a DataError whose one line names the file and what is wrong; nothing is written until the whole
output exists (aiayn.files.atomic_write).
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path

from lxml import etree

from aiayn.errors import DataError
from aiayn.files import atomic_write


@dataclass(frozen=True)
class DocumentLimits:
    """What a document may hold. max_chars is the text budget: the characters of every block sent to translation."""

    max_file_bytes: int = 64 << 20
    max_unpacked_bytes: int = 512 << 20  # all a zip's entries together, uncompressed
    max_ratio: int = 200  # uncompressed / compressed, for entries over 1 MiB unpacked
    max_entries: int = 20_000
    max_chars: int = 5_000_000


_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # a compound file: an encrypted OOXML package, or .doc/.ppt
_RATIO_FLOOR = 1 << 20
_CHUNK = 1 << 20


def check_size(path: Path, limits: DocumentLimits) -> int:
    """The file's size, refused over the limit (and a missing or empty file refused)."""
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    size = path.stat().st_size
    if size > limits.max_file_bytes:
        raise DataError(f"{path}: the file is {size} bytes, over the limit of {limits.max_file_bytes} bytes")
    if size == 0:
        raise DataError(f"{path}: the file is empty")
    return size


def read_zip(path: Path, limits: DocumentLimits) -> tuple[list[zipfile.ZipInfo], ZipEntries]:
    """A zip package's entries (their infos in order, and name -> bytes, read when asked for), after checking that it
    is a zip, not encrypted, within the limits on entries, unpacked size and compression ratio (a zip bomb is refused
    before any of it is unpacked), and that every entry unpacks whole to the size its header says (streamed, a MiB
    at a time: a corrupt file is refused before anything is translated, and no more than a MiB of media is held)."""
    check_size(path, limits)
    with open(path, "rb") as f:
        head = f.read(8)
    if head == _OLE_MAGIC:
        raise DataError(f"{path}: the file is encrypted (password-protected) or a legacy binary Office file; "
                        "save it unprotected as .docx/.pptx")
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise DataError(f"{path}: not a valid {path.suffix or 'zip'} file (a corrupt or truncated zip: {e})") from None
    with archive:
        infos = archive.infolist()
        _check_infos(path, infos, limits)
        for info in infos:
            _unpack(path, archive, info, None)
    return infos, ZipEntries(path, infos)


def _check_infos(path: Path, infos: list[zipfile.ZipInfo], limits: DocumentLimits) -> None:
    if len(infos) > limits.max_entries:
        raise DataError(f"{path}: the zip holds {len(infos)} entries, over the limit of {limits.max_entries}")
    total = sum(i.file_size for i in infos)
    if total > limits.max_unpacked_bytes:
        raise DataError(f"{path}: the zip unpacks to {total} bytes, over the limit of {limits.max_unpacked_bytes} "
                        "(a zip bomb?)")
    names = set()
    for info in infos:
        if info.flag_bits & 0x1:
            raise DataError(f"{path}: entry {info.filename!r} is encrypted; save the file without a password")
        if info.file_size > _RATIO_FLOOR and info.file_size > limits.max_ratio * max(info.compress_size, 1):
            raise DataError(f"{path}: entry {info.filename!r} expands {info.file_size // max(info.compress_size, 1)}"
                            f"-fold, over the limit of {limits.max_ratio} (a zip bomb?)")
        if info.filename in names:
            raise DataError(f"{path}: entry {info.filename!r} appears twice in the zip")
        names.add(info.filename)


def _unpack(path: Path, archive: zipfile.ZipFile, info: zipfile.ZipInfo, sink) -> None:
    """Unpack an entry a MiB at a time, never past its declared size plus one byte (a lying header cannot unpack
    more), into sink(chunk) (None: checked only); refused unless it unpacks whole to its declared size."""
    try:
        with archive.open(info) as f:
            size = 0
            while chunk := f.read(min(_CHUNK, info.file_size + 1 - size) or 1):
                size += len(chunk)
                if size > info.file_size:
                    break
                if sink is not None:
                    sink(chunk)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError, RuntimeError) as e:
        raise DataError(f"{path}: entry {info.filename!r} cannot be read (a corrupt zip: {e})") from None
    if size != info.file_size:
        raise DataError(f"{path}: entry {info.filename!r} is not the size its header says (a corrupt zip)")


class ZipEntries(MutableMapping):
    """A checked zip's entries, name -> bytes: read from the file when asked for, replaced by assignment."""

    def __init__(self, path: Path, infos: list[zipfile.ZipInfo]) -> None:
        self.path, self.infos = path, {i.filename: i for i in infos}
        self.changed: dict[str, bytes] = {}

    def __getitem__(self, name: str) -> bytes:
        if name in self.changed:
            return self.changed[name]
        info = self.infos[name]
        parts: list[bytes] = []
        with zipfile.ZipFile(self.path) as archive:
            _unpack(self.path, archive, info, parts.append)
        return b"".join(parts)

    def __setitem__(self, name: str, data: bytes) -> None:
        self.changed[name] = data

    def __delitem__(self, name: str) -> None:
        raise TypeError("entries of a document are replaced, never removed")

    def __iter__(self):
        return iter(self.infos)

    def __len__(self) -> int:
        return len(self.infos)


def write_zip(path: Path, infos: list[zipfile.ZipInfo], entries: ZipEntries, stored_first: str | None = None) -> None:
    """Write the entries in the order of `infos`, atomically; `stored_first` (ODF's and EPUB's `mimetype`) goes first
    and uncompressed, as those formats require. Every other entry keeps its compression (deflated if it had none);
    an entry not replaced is copied from the input a MiB at a time."""
    order = [i for i in infos if i.filename == stored_first] + [i for i in infos if i.filename != stored_first]

    def write(tmp: Path) -> None:
        with zipfile.ZipFile(tmp, "w") as out, zipfile.ZipFile(entries.path) as source:
            for info in order:
                stored = info.filename == stored_first or info.compress_type == zipfile.ZIP_STORED
                new = zipfile.ZipInfo(info.filename, date_time=info.date_time)
                new.compress_type = zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED
                new.external_attr = info.external_attr
                if info.filename in entries.changed:
                    out.writestr(new, entries.changed[info.filename])
                else:
                    new.file_size = info.file_size
                    with out.open(new, "w") as sink:
                        _unpack(entries.path, source, info, sink.write)
    atomic_write(path, write)


_INTERNAL_SUBSET = re.compile(rb"<!DOCTYPE[^>\[]*\[", re.I)


def _parser() -> etree.XMLParser:
    """A parser per document (lxml's parser objects are not to be shared across threads): no entity resolved, no
    DTD loaded, nothing fetched, lxml's limits on depth and text sizes kept (huge_tree off)."""
    return etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, dtd_validation=False,
                           huge_tree=False, remove_blank_text=False, strip_cdata=False)


def parse_xml(data: bytes, where: str, allow_doctype: bool = False) -> etree._ElementTree:
    """A tree from untrusted XML: no DTD is loaded, no entity expanded, nothing fetched; a DOCTYPE is refused (Office
    and ODF files never have one; EPUB's XHTML may carry a plain one: allow_doctype, but never an internal subset,
    where entity declarations live). `where`: "FILE: PART", for the error line."""
    head = data[:4096]
    if b"<!DOCTYPE" in head.upper() or b"<!ENTITY" in data.upper():
        if not allow_doctype or _INTERNAL_SUBSET.search(data) or b"<!ENTITY" in data.upper():
            raise DataError(f"{where}: the XML declares a DOCTYPE or entities, which documents are not allowed to")
    try:
        tree = etree.ElementTree(etree.fromstring(data, _parser()))
    except etree.XMLSyntaxError as e:
        raise DataError(f"{where}: the XML does not parse ({e.msg})") from None
    for node in tree.iter(etree.Entity):
        raise DataError(f"{where}: the XML uses an undeclared entity {node.text}")
    return tree


_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_safe(text: str) -> str:
    """Text that XML can hold: the control characters and lone surrogates a translation might hold, dropped."""
    return _NOT_XML.sub("", text)


def serialize_xml(tree: etree._ElementTree) -> bytes:
    """A tree back to bytes with an XML declaration (UTF-8, standalone="yes" where it was), as Office and ODF write
    them."""
    return etree.tostring(tree, xml_declaration=True, encoding="UTF-8",
                          standalone=True if tree.docinfo.standalone else None)


def refuse_macros(path: Path, names: list[str], content_types: bytes | None = None) -> None:
    """Refuse a package that holds macros: VBA (vbaProject.bin, a macro-enabled content type) or ODF's Basic and
    script folders. aiayn never runs them, but a translated copy would carry them to a new reader."""
    for name in names:
        low = name.lower()
        if low.endswith("vbaproject.bin") or (low.startswith(("basic/", "scripts/")) and not low.endswith("/")):
            raise DataError(f"{path}: the file holds macros ({name}); remove them (save as .docx/.pptx/.odt/.odp "
                            "without macros) and try again")
    if content_types is not None and b"macroEnabled" in content_types:
        raise DataError(f"{path}: the file is macro-enabled; save it as a plain .docx/.pptx and try again")
