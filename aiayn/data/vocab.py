"""The shared source-target vocabulary: SentencePiece BPE with the fixed special ids of aiayn.config.

The paper (section 5.1) uses one byte-pair vocabulary of ~37,000 tokens for both languages. Ids 0-3 are
always PAD, UNK, BOS, EOS; a model file trained with other ids is refused, so ids mean the same
thing in every prepared-data directory, run directory and checkpoint.

An imported OPUS-MT model (aiayn import, aiayn.export.marian) brings another kind: two SentencePiece models, one per
language, and one joint list of pieces (its vocab.json). `MarianVocab` holds them, its ids renumbered so that 0-3
are aiayn's PAD, UNK, BOS, EOS all the same; its vocab.model is a zip of the three files (PAIRED_FILES), so that
everything that copies, hashes or finds a run's vocab.model handles it as one file. `Vocab.load` opens either kind.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import sentencepiece as spm

from aiayn.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from aiayn.errors import DataError

MODEL_FILE = "vocab.model"  # the SentencePiece model; the name inside prepared-data and run directories
PIECES_FILE = "vocab.vocab"  # the same pieces as text (piece TAB score), for people


def num_threads() -> int:
    """CPU cores this process may use (the affinity mask, not the machine's total)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class Vocab:
    """A SentencePiece model whose special ids are PAD_ID, UNK_ID, BOS_ID, EOS_ID."""

    pad_id, unk_id, bos_id, eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID

    def __init__(self, model_path: str | Path) -> None:
        self.model_path = Path(model_path)
        self.sp = spm.SentencePieceProcessor(model_file=str(self.model_path))
        found = (self.sp.pad_id(), self.sp.unk_id(), self.sp.bos_id(), self.sp.eos_id())
        if found != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
            raise DataError(
                f"{self.model_path}: special ids (pad, unk, bos, eos) are {found}, aiayn needs "
                f"{(PAD_ID, UNK_ID, BOS_ID, EOS_ID)}; train the vocabulary with `aiayn prepare`"
            )

    @classmethod
    def load(cls, path: str | Path) -> Vocab | MarianVocab:
        """Load from a prepared-data directory, a run directory, or the .model file itself (a MarianVocab where
        the file is one: a zip)."""
        path = Path(path)
        model = path / MODEL_FILE if path.is_dir() else path
        if not model.is_file():
            raise DataError(
                f"no vocabulary at {path}: give a prepared-data or run directory holding {MODEL_FILE}, "
                "or a SentencePiece .model file (make one with `aiayn prepare`)"
            )
        return MarianVocab(model) if zipfile.is_zipfile(model) else cls(model)

    @property
    def target(self) -> Vocab:
        """The vocabulary that encodes target-language text: this one (one model for both languages)."""
        return self

    @classmethod
    def train(cls, sentences: Iterable[str], out_dir: str | Path, vocab_size: int,
              symbols: Sequence[str] = (), byte_fallback: bool = False) -> Vocab:
        """Train BPE on `sentences` (both languages mixed) and write vocab.model/.vocab into out_dir.

        BPE training reads no random numbers, so equal sentences give equal vocabularies; the sample
        of sentences is drawn (with a seed) by the caller. `symbols` become single pieces, matched longest first
        wherever they occur, and no word-boundary piece is put before a sentence (parsing's structure tokens).
        byte_fallback: a character outside the vocabulary is spelled as its UTF-8 bytes (256 pieces <0x00>..<0xFF>)
        instead of becoming UNK, so a model can copy it through unchanged (SentencePiece's byte_fallback).
        """
        extra = {"user_defined_symbols": list(symbols), "add_dummy_prefix": False} if symbols else {}
        out_dir = Path(out_dir)
        with open(out_dir / MODEL_FILE, "wb") as writer:
            try:
                spm.SentencePieceTrainer.train(
                    sentence_iterator=iter(sentences),
                    model_writer=writer,
                    model_type="bpe",
                    vocab_size=vocab_size,
                    character_coverage=0.9999,  # rare characters (noise in web-crawled WMT) become UNK
                    pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
                    pad_piece="<pad>", unk_piece="<unk>", bos_piece="<s>", eos_piece="</s>",
                    num_threads=num_threads(),
                    minloglevel=2,
                    byte_fallback=byte_fallback,
                    **extra,
                )
            except RuntimeError as e:  # e.g. "Vocabulary size is too high (37000). Please set it to <= 5123."
                raise DataError(
                    f"SentencePiece could not train a {vocab_size:,}-piece vocabulary: {str(e).rstrip('.')}. "
                    "Small corpora need a smaller --vocab-size."
                ) from None
        vocab = cls(out_dir / MODEL_FILE)
        vocab._write_pieces(out_dir / PIECES_FILE)
        return vocab

    def __len__(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        """Subword ids of one sentence, without BOS/EOS."""
        return self.sp.encode(text)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Subword ids of many sentences at once, on all cores."""
        return self.sp.encode(texts, num_threads=num_threads())

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids` (list, numpy array or tensor): stops at the first EOS, skips PAD and BOS."""
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        if EOS_ID in ids:
            ids = ids[: ids.index(EOS_ID)]
        return self.sp.decode([i for i in ids if i != PAD_ID and i != BOS_ID])

    def piece(self, i: int) -> str:
        return self.sp.id_to_piece(i)

    def piece_id(self, piece: str) -> int:
        return self.sp.piece_to_id(piece)

    def copy_to(self, dest_dir: str | Path) -> Path:
        """Copy the model (and its .vocab listing) into dest_dir, e.g. a run directory; returns the copy."""
        dest_dir = Path(dest_dir)
        dest_dir.mkdir(parents=True, exist_ok=True)
        dest = dest_dir / MODEL_FILE
        if dest.resolve() != self.model_path.resolve():
            shutil.copyfile(self.model_path, dest)
            self._write_pieces(dest_dir / PIECES_FILE)
        return dest

    def _write_pieces(self, path: Path) -> None:
        with open(path, "w", encoding="utf-8") as f:
            for i in range(len(self)):
                f.write(f"{self.sp.id_to_piece(i)}\t{self.sp.get_score(i):g}\n")


# The members of a MarianVocab's file: OPUS-MT's two SentencePiece models as they came, and the pieces in aiayn's id
# order as {piece: id} (OPUS-MT's vocab.json renumbered).
PAIRED_FILES = ("source.spm", "target.spm", "vocab.json")
SPECIAL_PIECES = {PAD_ID: "<pad>", UNK_ID: "<unk>", BOS_ID: "<s>", EOS_ID: "</s>"}
_LANGUAGE_CODE = re.compile(">>.+<<")  # a multilingual OPUS-MT model's target-language token, as MarianTokenizer's


class MarianVocab:
    """OPUS-MT's vocabulary: source text -> pieces by the source SentencePiece model, pieces -> target text by the
    target one, and one joint list of pieces for ids (aiayn's special ids: SPECIAL_PIECES). Text is tokenized as
    transformers' MarianTokenizer does it (a leading ">>xx<<" stays one piece; a piece outside the list is UNK)."""

    pad_id, unk_id, bos_id, eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID

    def __init__(self, model_path: str | Path) -> None:
        self.model_path = Path(model_path)
        try:
            with zipfile.ZipFile(self.model_path) as zf:
                source, target, ids = (zf.read(name) for name in PAIRED_FILES)
            self.spm_bytes = source, target
            self.sp = spm.SentencePieceProcessor(model_proto=source)
            self.target_sp = spm.SentencePieceProcessor(model_proto=target)
            ids = json.loads(ids.decode("utf-8"))
        except (KeyError, zipfile.BadZipFile, RuntimeError, ValueError) as e:
            raise DataError(f"{self.model_path} is not a paired vocabulary (a zip of {', '.join(PAIRED_FILES)} "
                            f"written by `aiayn import`): {e}") from None
        self.pieces = sorted(ids, key=ids.get)
        if sorted(ids.values()) != list(range(len(ids))) or any(
                ids.get(p) != i for i, p in SPECIAL_PIECES.items()):
            raise DataError(f"{self.model_path}: its pieces do not have the ids 0..{len(ids) - 1}, or not the "
                            f"special ids {SPECIAL_PIECES}; it was not written by `aiayn import`")
        self.ids = ids
        self.target = _TargetSide(self)

    def piece_id(self, piece: str) -> int:
        return self.ids.get(piece, UNK_ID)

    @staticmethod
    def write(path: Path, source_spm: bytes, target_spm: bytes, pieces: Sequence[str]) -> MarianVocab:
        """Write the paired vocabulary file `path` of the two SentencePiece models and the pieces in id order."""
        buffer = io.BytesIO()
        ids = json.dumps({p: i for i, p in enumerate(pieces)}, ensure_ascii=False, indent=0)
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, data in zip(PAIRED_FILES, (source_spm, target_spm, ids.encode("utf-8"))):
                zf.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)  # equal files, equal bytes
        Path(path).write_bytes(buffer.getvalue())
        return MarianVocab(path)

    def __len__(self) -> int:
        return len(self.pieces)

    def encode(self, text: str) -> list[int]:
        """Ids of one source sentence, without BOS/EOS."""
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: list[str], sp: spm.SentencePieceProcessor | None = None) -> list[list[int]]:
        """Ids of many source sentences (`sp`: another SentencePiece model's pieces), on all cores."""
        codes = [_LANGUAGE_CODE.match(text) for text in texts]
        pieces = (sp or self.sp).encode([_LANGUAGE_CODE.sub("", text) for text in texts], out_type=str,
                                        num_threads=num_threads())
        return [[self.ids.get(p, UNK_ID) for p in ([code.group(0)] if code else []) + ps]
                for code, ps in zip(codes, pieces)]

    def decode(self, ids: Sequence[int]) -> str:
        """Target text of `ids`: stops at the first EOS, skips PAD and BOS (UNK reads " ⁇ ", as in Vocab)."""
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        if EOS_ID in ids:
            ids = ids[: ids.index(EOS_ID)]
        pieces = [self.pieces[i] for i in ids if i != PAD_ID and i != BOS_ID]
        # A piece the target model lacks (the list is joint) comes back verbatim: its word boundary made a space here
        return self.target_sp.decode_pieces(pieces).replace("\u2581", " ").strip()

    def piece(self, i: int) -> str:
        return self.pieces[i]

    def copy_to(self, dest_dir: str | Path) -> Path:
        """Copy the file (and its pieces listing) into dest_dir; returns the copy."""
        dest = Path(dest_dir) / MODEL_FILE
        Path(dest_dir).mkdir(parents=True, exist_ok=True)
        if dest.resolve() != self.model_path.resolve():
            shutil.copyfile(self.model_path, dest)
            (Path(dest_dir) / PIECES_FILE).write_text("".join(p + "\n" for p in self.pieces), encoding="utf-8")
        return dest


class _TargetSide:
    """A MarianVocab encoding with its target SentencePiece model (prepared targets: aiayn prepare)."""

    def __init__(self, vocab: MarianVocab) -> None:
        self.vocab = vocab

    def encode(self, text: str) -> list[int]:
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self.vocab.encode_batch(texts, self.vocab.target_sp)
