"""The shared source-target vocabulary: SentencePiece BPE with the fixed special ids of aiayn.config.

The paper (section 5.1) uses one byte-pair vocabulary of ~37,000 tokens for both languages. Ids 0-3 are
always PAD, UNK, BOS, EOS; a model file trained with other ids is refused, so ids mean the same
thing in every prepared-data directory, run directory and checkpoint.
"""

from __future__ import annotations

import os
import shutil
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
    def load(cls, path: str | Path) -> Vocab:
        """Load from a prepared-data directory, a run directory, or the .model file itself."""
        path = Path(path)
        model = path / MODEL_FILE if path.is_dir() else path
        if not model.is_file():
            raise DataError(
                f"no vocabulary at {path}: give a prepared-data or run directory holding {MODEL_FILE}, "
                "or a SentencePiece .model file (make one with `aiayn prepare`)"
            )
        return cls(model)

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
