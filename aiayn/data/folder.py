"""The prepared-data directory: its layout, written by `aiayn prepare` (aiayn.data.prepare) and read here only.

    DIR/meta.json                   format, options, input fingerprint, counts, the summary, and the size and
                                    SHA-256 of every file below ("files"; their digest: "content_sha256")
    DIR/vocab.model, vocab.vocab    the shared SentencePiece BPE (ids 0-3: pad, unk, bos, eos)
    DIR/{split}.src.bin, .tgt.bin   token ids of the kept pairs, concatenated (dtype in meta.json)
    DIR/{split}.idx.npy             int64 (2, n + 1): pair i spans [i]:[i + 1] of .src.bin (row 0) and .tgt.bin (row 1)
    DIR/{valid,test}.src.txt, .tgt.txt  the kept lines, untouched, for scoring

Prepared data are checked when opened, so damage is an error, never a silently different corpus: the index must be
well formed, each id file exactly as long as the index says, and every file as large as meta.json records (and
equal to its recorded SHA-256 where hashing is cheap, or when asked: `open_prepared(dir, full=True)`). A run
directory (aiayn.rundir) given where prepared data are expected is recognised and named.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from aiayn.errors import DataError
from aiayn.files import sha256_file, write_json

META_FILE = "meta.json"
PARTIAL_MARK = ".aiayn-partial"  # in a directory that prepare is still writing
FORMAT_VERSION = 2
SPLITS = ("train", "valid", "test")
RUN_CONFIG = "config.json"  # what marks a run directory: its config (aiayn.rundir.CONFIG is this name)
IMPORT_RECORD = "imported.json"  # an imported run's record: where from, its languages (aiayn.export.marian)
ARGOS_METADATA = "metadata.json"  # an Argos Translate package's record: its from_code and to_code
EXPORT_RECORD = "aiayn.json"  # a CTranslate2 folder's record: its model config, languages (aiayn.export.ct2)


def file_records(folder: Path) -> dict[str, dict[str, Any]]:
    """{name: {"bytes", "sha256"}} of the files of a prepared-data directory: what opening it checks against."""
    return {p.name: {"bytes": p.stat().st_size, "sha256": sha256_file(p)} for p in sorted(Path(folder).iterdir())
            if p.is_file() and p.name not in (META_FILE, PARTIAL_MARK)}


def content_sha256(files: dict[str, dict[str, Any]]) -> str:
    """One digest of a prepared-data directory's contents (names, sizes, hashes): equal iff the data are equal. A run
    records it, so that resuming on data prepared again in the same folder is refused."""
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


def prepared_sha256(data_dir: str | Path) -> str:
    """The content digest of a prepared-data directory, as prepare recorded it."""
    return read_meta(data_dir)["content_sha256"]


def read_meta(data_dir: str | Path) -> dict[str, Any]:
    """DIR/meta.json, with one clear line if the directory is not prepared data or the file is damaged."""
    path = Path(data_dir) / META_FILE
    if not path.is_file():
        if (Path(data_dir) / RUN_CONFIG).is_file():
            raise DataError(f"{data_dir} is a run directory, not a prepared-data directory; give the folder written "
                            "by `aiayn prepare` (a run's config.json names the data it trains on)")
        raise DataError(f"{data_dir} is not a prepared-data directory (no {META_FILE}); run `aiayn prepare`")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(f"{path} is damaged ({e}); prepare the data again") from None
    if not (isinstance(meta, dict) and isinstance(meta.get("splits"), dict) and meta.get("dtype") in ("uint16", "int32")
            and isinstance(meta.get("files"), dict) and isinstance(meta.get("content_sha256"), str)):
        raise DataError(f"{path} lacks its splits or id dtype (or has the wrong types); it was not written by "
                        "`aiayn prepare`, or was damaged: prepare the data again")
    return meta




def run_languages(checkpoint: str | Path) -> tuple[str, str] | None:
    """(source, target) codes recorded for a checkpoint's run (aiayn.languages): in its config.json, else in the
    meta.json of the prepared data its config.json names; for an imported run, in its IMPORT_RECORD; for a folder
    `aiayn export --to ct2` wrote, in its aiayn.json; for an Argos Translate package, in its metadata.json. None
    where nothing records them (data prepared without languages, or moved away; a model imported without them)."""
    start = Path(checkpoint).resolve()
    if start.suffix == ".argosmodel" or (start / ARGOS_METADATA).is_file():
        return package_languages(start)
    for folder in [start if start.is_dir() else start.parent, *start.parents][:3]:  # RUN, RUN/checkpoints/x
        try:
            records = [folder / name for name in (IMPORT_RECORD, EXPORT_RECORD) if (folder / name).is_file()]
            if records:  # (a CTranslate2 folder has a config.json of CTranslate2's too)
                pair = json.loads(records[0].read_text(encoding="utf-8")).get("languages")
            elif (folder / RUN_CONFIG).is_file():
                config = json.loads((folder / RUN_CONFIG).read_text(encoding="utf-8"))
                data = Path(config["data"])
                pair = config.get("languages") or (read_meta(data).get("languages") if (data / META_FILE).is_file()
                                                   else None)
            else:
                continue
            return (pair["source"], pair["target"]) if pair else None
        except (OSError, ValueError, KeyError, TypeError, AttributeError, DataError):
            return None
    return None


def package_languages(path: Path) -> tuple[str, str] | None:
    """(from_code, to_code) of an Argos Translate package's metadata.json: in its folder, or in the .argosmodel zip
    (one folder); None where it names none."""
    try:
        if path.is_file():
            with zipfile.ZipFile(path) as zf:
                name = next(n for n in zf.namelist() if n.count("/") == 1 and n.endswith("/" + ARGOS_METADATA))
                meta = json.loads(zf.read(name))
        else:
            meta = json.loads((path / ARGOS_METADATA).read_text(encoding="utf-8"))
        return (meta["from_code"], meta["to_code"]) if meta.get("type", "translate") == "translate" else None
    except (OSError, ValueError, KeyError, TypeError, StopIteration, zipfile.BadZipFile):
        return None


def write_meta(folder: Path, meta: dict[str, Any]) -> dict[str, Any]:
    """Record every file of `folder` (sizes, SHA-256, their digest) in `meta` and write it as DIR/meta.json, last."""
    records = file_records(folder)
    meta = {**meta, "format": FORMAT_VERSION, "files": records, "content_sha256": content_sha256(records)}
    write_json(Path(folder) / META_FILE, meta)
    return meta


# ---------------------------------------------------------------------------------------------------
# Opening a prepared split
# ---------------------------------------------------------------------------------------------------


# Files of a split below this size together are hashed whenever the split is opened (~0.1 s); larger ones only have
# their sizes checked, unless a full check is asked for (they were hashed once, by prepare).
HASH_BELOW_BYTES = 64 << 20

# ---------------------------------------------------------------------------------------------------
# Loading a prepared split
# ---------------------------------------------------------------------------------------------------


class PreparedSplit:
    """One split of a prepared-data directory: ds[i] -> (src_ids, tgt_ids), subword ids without specials."""

    def __init__(self, data_dir: Path, split: str, dtype: str) -> None:
        self.data_dir, self.split, self.dtype = data_dir, split, np.dtype(dtype)
        self.offsets = _load_index(data_dir / f"{split}.idx.npy")  # (2, n + 1)
        self.src_lengths = np.diff(self.offsets[0]) + 1  # + EOS
        self.tgt_lengths = np.diff(self.offsets[1]) + 1  # + BOS (tgt_in) or EOS (tgt_out)
        texts = (data_dir / f"{split}.src.txt", data_dir / f"{split}.tgt.txt")
        self.text_paths: tuple[Path, Path] | None = texts if texts[0].is_file() else None
        self._ids: tuple[np.ndarray, np.ndarray] | None = None  # memory maps, opened on first use

    def _open(self) -> tuple[np.ndarray, np.ndarray]:
        def ids(side: str) -> np.ndarray:
            path = self.data_dir / f"{self.split}.{side}.bin"
            if path.stat().st_size == 0:
                return np.zeros(0, self.dtype)
            return np.asarray(np.memmap(path, dtype=self.dtype, mode="r"))

        self._ids = (ids("src"), ids("tgt"))
        return self._ids

    def __len__(self) -> int:
        return self.offsets.shape[1] - 1

    def ids(self) -> tuple[np.ndarray, np.ndarray]:
        """Every pair's source ids and target ids, concatenated (pair i: [offsets[0, i]:offsets[0, i + 1]] and
        [offsets[1, i]:offsets[1, i + 1]]), as memory maps: what reads the whole split at once."""
        return self._ids or self._open()

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        if not 0 <= i < len(self):
            raise IndexError(f"pair {i} of a {len(self)}-pair split")
        src, tgt = self.ids()
        (s0, t0), (s1, t1) = self.offsets[:, i], self.offsets[:, i + 1]
        return src[s0:s1], tgt[t0:t1]

    def __getstate__(self) -> dict[str, Any]:  # DataLoader workers reopen the maps instead of pickling ids
        return {**self.__dict__, "_ids": None}


def _load_index(path: Path) -> np.ndarray:
    """{split}.idx.npy: int64 (2, n + 1), rows starting at 0 and never decreasing; anything else is a clear error."""
    try:
        offsets = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise DataError(f"{path} is missing; prepare the data again (aiayn prepare)") from None
    except (ValueError, OSError, EOFError):  # not .npy, truncated, or pickled objects (never loaded)
        raise DataError(f"{path} is damaged (not a readable .npy array); prepare the data again (aiayn prepare)"
                        ) from None
    if (offsets.dtype != np.int64 or offsets.ndim != 2 or offsets.shape[0] != 2 or offsets.shape[1] < 1
            or offsets[:, 0].any() or (np.diff(offsets, axis=1) < 0).any()):
        raise DataError(f"{path} is not an index of token ids (int64, 2 x (pairs + 1), starting at 0, never "
                        "decreasing); it was damaged: prepare the data again (aiayn prepare)")
    return offsets


def _check_file(path: Path, record: dict[str, Any] | None, full: bool | None) -> None:
    """A file of prepared data against its meta.json record: the size always, the SHA-256 if `full` (None: if small)."""
    if record is None:
        raise DataError(f"{path.parent / META_FILE} has no record of {path.name}; prepare the data again")
    if not path.is_file():
        raise DataError(f"{path} is missing; prepare the data again (aiayn prepare)")
    size = path.stat().st_size
    if size != record["bytes"]:
        raise DataError(f"{path} has {size:,} bytes, but {path.parent / 'meta.json'} records {record['bytes']:,}: "
                        "it was truncated or replaced since `aiayn prepare` wrote it; prepare the data again")
    if (full or (full is None and size < HASH_BELOW_BYTES)) and sha256_file(path) != record["sha256"]:
        raise DataError(f"{path} differs from what `aiayn prepare` wrote (its SHA-256 is not the one in "
                        f"{path.parent / 'meta.json'}): it was changed since; prepare the data again")


def _verify_split(ds: PreparedSplit, meta: dict[str, Any], full: bool | None) -> None:
    """The id files are exactly as long as the index says; every file of the split is as meta.json records it."""
    kept = meta["splits"][ds.split]["kept"]
    if kept != len(ds):
        raise DataError(f"{ds.data_dir / f'{ds.split}.idx.npy'} indexes {len(ds):,} pairs but meta.json says "
                        f"{kept:,}; the data were damaged: prepare them again")
    files = meta["files"]
    for row, side in enumerate(("src", "tgt")):
        path = ds.data_dir / f"{ds.split}.{side}.bin"
        if not path.is_file():
            raise DataError(f"{path} is missing; prepare the data again (aiayn prepare)")
        expected, size = int(ds.offsets[row, -1]) * ds.dtype.itemsize, path.stat().st_size
        if size != expected:
            raise DataError(f"{path} has {size:,} bytes but {ds.split}.idx.npy indexes {int(ds.offsets[row, -1]):,} "
                            f"{ds.dtype.name} token ids ({expected:,} bytes): the file was truncated or replaced; "
                            "prepare the data again (aiayn prepare)")
    names = [f"{ds.split}.{kind}" for kind in ("idx.npy", "src.bin", "tgt.bin")]
    names += [f"{ds.split}.{side}.txt" for side in ("src", "tgt") if f"{ds.split}.{side}.txt" in files]
    cheap = sum(files[n]["bytes"] for n in names if n in files) < HASH_BELOW_BYTES
    for name in names:
        _check_file(ds.data_dir / name, files.get(name), full if full is not None else cheap)


def has_split(data_dir: str | Path, split: str) -> bool:
    """Whether the prepared data lists `split` (a listed but corrupt split still raises when loaded)."""
    return split in read_meta(data_dir)["splits"]


def load_split(data_dir: str | Path, split: str, full_check: bool | None = None) -> PreparedSplit:
    """A split ("train", "valid", "test") of a directory written by `prepare`, checked against its index and
    meta.json (full_check: also hash large files; False: sizes only; default: hash when cheap)."""
    data_dir = Path(data_dir)
    meta = read_meta(data_dir)
    if split not in meta["splits"]:
        raise DataError(f"{data_dir} has no {split!r} split (it has: {', '.join(meta['splits'])}); "
                        f"prepare it with `aiayn prepare ... --{split}-src FILE --{split}-tgt FILE`")
    ds = PreparedSplit(data_dir, split, meta["dtype"])
    _verify_split(ds, meta, full_check)
    return ds


def open_prepared(data_dir: str | Path, full_check: bool | None = None) -> dict[str, PreparedSplit]:
    """Every split of a prepared-data directory, after checking it all: the vocabulary against meta.json (always
    hashed: it is small) and each split as `load_split` does."""
    data_dir = Path(data_dir)
    meta = read_meta(data_dir)
    vocab = data_dir / "vocab.model"
    if not vocab.is_file():
        raise DataError(f"{vocab} is missing; prepare the data again (aiayn prepare)")
    _check_file(vocab, meta["files"].get("vocab.model"), full=True)
    return {split: load_split(data_dir, split, full_check) for split in meta["splits"]}
