"""prepare: raw parallel text -> a prepared-data directory (shared vocabulary + token-id cache).

`prepare` streams the text three times (check and filter; draw the vocabulary's training sample;
tokenize), so memory holds per-pair lengths, never the corpus. The layout it writes is aiayn.data.folder's
(docs/data.md).
"""

from __future__ import annotations

import copy
import itertools
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from aiayn.config import PAPER_VOCAB, UNK_ID
from aiayn.data.folder import META_FILE, PARTIAL_MARK, read_meta, write_meta
from aiayn.data.vocab import Vocab
from aiayn.errors import DataError
from aiayn.files import commit_folder, count_lines, iter_lines, sha256_file, waiting_lock, write_json
from aiayn.languages import pair_record
from aiayn.progress import Progress

CHUNK = 20_000  # pairs tokenized per SentencePiece call

# Why a pair is dropped (Moses clean-corpus-n); the code is stored per input line during the first pass.
KEEP, EMPTY, TOO_LONG, RATIO = 0, 1, 2, 3
DROP_NAMES = {EMPTY: "empty", TOO_LONG: "too_long", RATIO: "ratio"}


# ---------------------------------------------------------------------------------------------------
# Reading: strict UTF-8, line-aligned files or TSV
# ---------------------------------------------------------------------------------------------------


def _read_pairs(paths: tuple[Path, ...]) -> Iterator[tuple[str, str]]:
    """(source, target) per line of two line-aligned files, or of one TSV file (source TAB target)."""
    if len(paths) == 1:
        for n, line in enumerate(iter_lines(paths[0]), 1):
            fields = line.split("\t")
            if len(fields) != 2:
                raise DataError(
                    f"{paths[0]}, line {n}: expected 2 tab-separated fields (source TAB target), found "
                    f"{len(fields)}; remove tabs inside sentences or give --src/--tgt files instead"
                )
            yield fields[0], fields[1]
        return
    src, tgt = paths
    for s, t in itertools.zip_longest(iter_lines(src), iter_lines(tgt)):
        if s is None or t is None:
            raise DataError(
                f"line counts differ: {src} has {count_lines(src)} lines, {tgt} has {count_lines(tgt)}; "
                "the files must be line-aligned (line i of one is the translation of line i of the other)"
            )
        yield s, t


def _verdict(src: str, tgt: str, max_len: float, max_ratio: float) -> int:
    """KEEP or why not, as Moses clean-corpus-n does it: by whitespace-separated words."""
    ns, nt = len(src.split()), len(tgt.split())
    if ns == 0 or nt == 0:
        return EMPTY
    if ns > max_len or nt > max_len:
        return TOO_LONG
    if ns > max_ratio * nt or nt > max_ratio * ns:
        return RATIO
    return KEEP


# ---------------------------------------------------------------------------------------------------
# prepare: text -> prepared-data directory
# ---------------------------------------------------------------------------------------------------


def _input(*paths: str | Path | None) -> tuple[Path, ...]:
    out = tuple(Path(p) for p in paths if p is not None)
    for p in out:
        if not p.is_file():
            raise DataError(f"no such file: {p}")
    return out


def _stamp(path: Path) -> list[Any]:
    st = path.stat()
    return [str(path.resolve()), st.st_size, st.st_mtime_ns]


def _check_split(split: str, paths: tuple[Path, ...], max_len: float, max_ratio: float) -> bytearray:
    """First pass: validate every line and decide which pairs to keep (one verdict byte per pair)."""
    verdicts = bytearray()
    with Progress(f"check {split}", None, "pairs") as bar:
        for src, tgt in _read_pairs(paths):
            verdicts.append(_verdict(src, tgt, max_len, max_ratio))
            if len(verdicts) % 10_000 == 0:
                bar.update(10_000)
    if not verdicts:
        raise DataError(f"{split} input {', '.join(map(str, paths))} is empty")
    if verdicts.count(KEEP) == 0:
        raise DataError(f"no {split} pair is left after filtering; check the input or --max-len/--max-ratio")
    return verdicts


def _vocab_sentences(paths: tuple[Path, ...], verdicts: bytearray, n_sentences: int, seed: int
                     ) -> Iterator[str]:
    """Second pass: both sides of a seeded random sample of kept training pairs (all of them if few)."""
    kept = np.flatnonzero(np.frombuffer(verdicts, np.uint8) == KEEP)
    n_pairs = max(1, n_sentences // 2)
    if len(kept) > n_pairs:
        kept = np.sort(np.random.default_rng(seed).choice(kept, n_pairs, replace=False))
    wanted = iter(kept.tolist())
    want = next(wanted)
    for i, (src, tgt) in enumerate(_read_pairs(paths)):
        if i == want:
            yield src
            yield tgt
            want = next(wanted, None)
            if want is None:
                return


def _write_ids(texts: list[str], vocab: Vocab, dtype: np.dtype, f) -> tuple[np.ndarray, int]:
    """Append the ids of `texts` to the open file `f`; returns (lengths, number of UNK ids)."""
    ids = vocab.encode_batch(texts)
    lengths = np.fromiter(map(len, ids), np.int64, count=len(ids))
    flat = np.fromiter(itertools.chain.from_iterable(ids), dtype, count=int(lengths.sum()))
    flat.tofile(f)
    return lengths, int(np.count_nonzero(flat == UNK_ID))


def _encode_split(
    split: str, paths: tuple[Path, ...], verdicts: bytearray, vocab: Vocab, dtype: np.dtype, out: Path
) -> dict[str, Any]:
    """Third pass: tokenize the kept pairs into {split}.src.bin/.tgt.bin and {split}.idx.npy."""
    keep_text = split != "train"  # untouched references for BLEU
    lengths: dict[str, list[np.ndarray]] = {"src": [], "tgt": []}
    unk = {"src": 0, "tgt": 0}
    bins = {side: open(out / f"{split}.{side}.bin", "wb") for side in ("src", "tgt")}
    texts = {}
    if keep_text:
        texts = {side: open(out / f"{split}.{side}.txt", "w", encoding="utf-8") for side in ("src", "tgt")}
    bar = Progress(f"tokenize {split}", verdicts.count(KEEP), "pairs")

    def flush(chunk: list[tuple[str, str]]) -> None:
        for side, column in zip(("src", "tgt"), zip(*chunk)):
            n, n_unk = _write_ids(list(column), vocab if side == "src" else vocab.target, dtype, bins[side])
            lengths[side].append(n)
            unk[side] += n_unk
            if keep_text:
                texts[side].writelines(line + "\n" for line in column)
        bar.update(len(chunk))

    try:
        chunk: list[tuple[str, str]] = []
        for pair, verdict in zip(_read_pairs(paths), verdicts):
            if verdict == KEEP:
                chunk.append(pair)
                if len(chunk) == CHUNK:
                    flush(chunk)
                    chunk = []
        if chunk:
            flush(chunk)
    finally:
        bar.close()
        for f in (*bins.values(), *texts.values()):
            f.close()

    src_len, tgt_len = np.concatenate(lengths["src"]), np.concatenate(lengths["tgt"])
    offsets = np.zeros((2, len(src_len) + 1), np.int64)  # row 0: source, row 1: target
    np.cumsum(src_len, out=offsets[0, 1:])
    np.cumsum(tgt_len, out=offsets[1, 1:])
    np.save(out / f"{split}.idx.npy", offsets)

    codes = np.frombuffer(verdicts, np.uint8)
    src_tokens, tgt_tokens = int(offsets[0, -1]), int(offsets[1, -1])
    return {
        "read": len(verdicts),
        "kept": len(src_len),
        "dropped": {name: int(np.count_nonzero(codes == code)) for code, name in DROP_NAMES.items()},
        "dropped_lines": {  # the first few (1-based) input lines of each kind, so a drop can be checked
            name: (np.flatnonzero(codes == code)[:5] + 1).tolist() for code, name in DROP_NAMES.items()
        },
        "src_tokens": src_tokens,
        "tgt_tokens": tgt_tokens,
        "src_unk": unk["src"] / max(1, src_tokens),
        "tgt_unk": unk["tgt"] / max(1, tgt_tokens),
    }


def _existing(out: Path, fingerprint: dict[str, Any]) -> dict[str, Any] | None:
    """The meta of `out` if it already holds exactly these inputs prepared the same way; None if empty."""
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        return None
    if not (out / META_FILE).is_file():
        raise DataError(f"{out} exists and is not a prepared-data directory (no {META_FILE}); "
                        "choose another --out or empty it")
    meta = read_meta(out)
    old = copy.deepcopy(meta.get("fingerprint", {}))
    old.get("options", {}).setdefault("byte_fallback", False)  # prepared before the option: prepared without it
    if old == fingerprint:
        return meta
    differ = [f"{k}.{kk}" for k in fingerprint for kk in {**old.get(k, {}), **fingerprint[k]}
              if old.get(k, {}).get(kk) != fingerprint[k].get(kk)]
    raise DataError(f"{out} holds data prepared from other inputs or options (differs in: "
                    f"{', '.join(differ)}); choose another --out, or delete it to prepare again")


def _print_summary(meta: dict[str, Any], out: Path) -> None:
    for split, s in meta["splits"].items():
        dropped = s["dropped"]
        labels = {"empty": "empty", "too_long": f"longer than {meta['options']['max_len']} words",
                  "ratio": f"with length ratio > {meta['options']['max_ratio']}"}
        why = ", ".join(f"{dropped[name]:,} {label} (e.g. lines {str(s['dropped_lines'][name])[1:-1]})"
                        for name, label in labels.items() if dropped[name])
        print(f"{split}: {s['read']:,} pairs read, {s['kept']:,} kept, {s['read'] - s['kept']:,} dropped"
              + (f": {why}" if why else ""))
        print(f"{split}: {s['src_tokens']:,} source tokens (unk {100 * s['src_unk']:.3f}%), "
              f"{s['tgt_tokens']:,} target tokens (unk {100 * s['tgt_unk']:.3f}%)")
    pair = meta.get("languages")
    print(f"languages: {pair['source']} -> {pair['target']}" if pair else
          "languages: not recorded (give --source-lang and --target-lang, or name the files train.en/train.de)")
    took = ", ".join(f"{name} {sec:.1f} s" for name, sec in meta["seconds"].items())
    fallback = ", byte fallback" if meta["options"].get("byte_fallback") else ""
    print(f"vocabulary: {meta['vocab_size']:,} pieces{fallback}; prepared data in {out} ({took})")


def _build(part: Path, inputs: dict[str, tuple[Path, ...]], vocab: Vocab | None, options: dict[str, Any]
           ) -> dict[str, Any]:
    """The three passes of `prepare`, writing into `part`; returns the meta without the fingerprint."""
    seconds, start = {}, time.perf_counter()
    limits = {"max_len": options["max_len"], "max_ratio": options["max_ratio"]}
    no_limits = {"max_len": float("inf"), "max_ratio": float("inf")}
    verdicts = {split: _check_split(split, paths, **(limits if split == "train" else no_limits))
                for split, paths in inputs.items()}
    seconds["check"], start = time.perf_counter() - start, time.perf_counter()
    if vocab is None:
        n_sentences = options["vocab_sample"]
        print(f"prepare: training a {options['vocab_size']:,}-piece BPE vocabulary on both sides of "
              f"{min(n_sentences // 2, verdicts['train'].count(KEEP)):,} training pairs")
        sample = _vocab_sentences(inputs["train"], verdicts["train"], n_sentences, options["seed"])
        vocab = Vocab.train(sample, part, options["vocab_size"], byte_fallback=options["byte_fallback"])
    else:
        vocab.copy_to(part)
    seconds["vocab"], start = time.perf_counter() - start, time.perf_counter()
    dtype = np.dtype(np.uint16 if len(vocab) <= 2**16 else np.int32)
    splits = {split: _encode_split(split, paths, verdicts[split], vocab, dtype, part)
              for split, paths in inputs.items()}
    seconds["tokenize"] = time.perf_counter() - start
    return {"vocab_size": len(vocab), "dtype": dtype.name, "options": options, "splits": splits,
            "seconds": {k: round(v, 2) for k, v in seconds.items()}}


def prepare(
    src_path: str | Path | None,
    tgt_path: str | Path | None,
    out_dir: str | Path,
    vocab_size: int = PAPER_VOCAB,
    valid: tuple[str | Path, str | Path] | None = None,
    test: tuple[str | Path, str | Path] | None = None,
    max_len: int = 250,
    max_ratio: float = 9.0,
    seed: int = 1,
    tsv: str | Path | None = None,
    vocab: Vocab | str | Path | None = None,
    vocab_sample: int = 1_000_000,
    byte_fallback: bool = False,
    languages: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """Clean, build the shared vocabulary and cache token ids; returns the summary (also in meta.json).

    Training pairs come from line-aligned `src_path`/`tgt_path` or from `tsv` (source TAB target).
    Training pairs are dropped when a side is empty, longer than `max_len` words, or one side has more
    than `max_ratio` times the words of the other; valid/test pairs only when a side is empty, so
    references stay as published. The vocabulary is trained on both sides of `vocab_sample` sentences
    drawn with `seed` from the kept training pairs, unless `vocab` (a Vocab, model file or directory)
    is given; with `byte_fallback`, characters outside it are spelled as UTF-8 bytes, not UNK. `languages`:
    (source, target) ISO 639 codes, else read from two-letter suffixes of src_path/tgt_path (train.en, train.es);
    recorded in meta.json ("languages") for serve and export (aiayn.languages). Writes into out_dir:

        meta.json                       options, input fingerprint, counts, the summary, and the size and
                                        SHA-256 of every file below (checked when the data are opened)
        vocab.model, vocab.vocab        the shared SentencePiece BPE (ids 0-3: pad, unk, bos, eos)
        {split}.src.bin, .tgt.bin       token ids of the kept pairs, concatenated (dtype in meta.json)
        {split}.idx.npy                 int64 (2, n + 1): pair i spans [i]:[i + 1] of .src.bin (row 0)
                                        and .tgt.bin (row 1)
        {valid,test}.src.txt, .tgt.txt  the kept lines, untouched, for scoring

    If out_dir already holds the same inputs (path, size, mtime) prepared with the same options, it is
    reused as it is.
    """
    given = (src_path is not None, tgt_path is not None, tsv is not None)
    if given not in ((True, True, False), (False, False, True)):
        raise DataError("give the training pairs either as --src and --tgt files or as one --tsv file")
    inputs = {"train": _input(tsv) if tsv is not None else _input(src_path, tgt_path)}
    for split, pair in (("valid", valid), ("test", test)):
        if pair is not None:
            if len(pair) != 2 or None in pair:
                raise DataError(f"{split} must be a (source file, target file) pair, got {pair!r}")
            inputs[split] = _input(*pair)
    if vocab is not None and not isinstance(vocab, Vocab):
        vocab = Vocab.load(vocab)
    try:
        pair = pair_record(*(languages or (None, None)), src_path, tgt_path)
    except ValueError as e:
        raise DataError(str(e)) from None
    options = {"vocab_size": vocab_size if vocab is None else len(vocab), "max_len": max_len,
               "max_ratio": max_ratio, "seed": seed, "vocab_sample": vocab_sample,
               "byte_fallback": byte_fallback and vocab is None}
    fingerprint = {
        "inputs": {split: [_stamp(p) for p in paths] for split, paths in inputs.items()},
        "options": {**options, "vocab": None if vocab is None else sha256_file(vocab.model_path)},
    }
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    # Two processes preparing one folder at once (two quickstarts into one --out) take turns; the second reuses it.
    with waiting_lock(out.with_name(out.name + ".lock"), f"prepare: another process is preparing {out}"):
        return _prepare_locked(out, inputs, vocab, options, fingerprint, pair)


def _prepare_locked(out: Path, inputs: dict, vocab: Vocab | None, options: dict, fingerprint: dict,
                    languages: dict[str, str] | None) -> dict:
    meta = _existing(out, fingerprint)
    if meta is not None:
        print(f"prepare: {out} already holds these inputs prepared with these options; reusing it")
        if languages is not None and meta.get("languages") != languages:  # a label, not content: no new digest
            meta = {**meta, "languages": languages}
            write_json(out / META_FILE, meta)
        _print_summary(meta, out)
        return {**meta, "reused": True}

    part = out.with_name(out.name + ".partial")  # built here, renamed into place when complete
    if part.exists():
        if not (part / PARTIAL_MARK).exists():
            raise DataError(f"{part} exists and was not made by aiayn; move it away")
        shutil.rmtree(part)
    part.mkdir(parents=True)
    (part / PARTIAL_MARK).touch()
    try:
        # Every file hashed once here, into meta.json; opening the data checks sizes always, hashes where cheap.
        meta = write_meta(part, {**_build(part, inputs, vocab, options), "fingerprint": fingerprint,
                                 "languages": languages})
    except BaseException:
        shutil.rmtree(part)
        raise
    (part / PARTIAL_MARK).unlink()
    if out.exists():
        out.rmdir()  # empty, checked by _existing
    commit_folder(part, out)
    _print_summary(meta, out)
    return {**meta, "reused": False}
