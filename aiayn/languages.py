"""The language pair of prepared data and of the models trained on them.

`aiayn prepare` records it in meta.json ("languages": {"source": "en", "target": "es"}: from
--source-lang/--target-lang, else from two-letter file suffixes such as train.en/train.es); a run's config.json names
the data folder it trains on, so `aiayn serve` and `aiayn export --to argos` find a checkpoint's languages there
without flags (aiayn.data.folder.run_languages). Codes are ISO 639 codes as LibreTranslate and Argos write them
("en", "pt-BR", "zh_Hant").
"""

from __future__ import annotations

import re
from pathlib import Path

# A language code as LibreTranslate and Argos write them: "en", "pt-BR", "zh_Hant"; "auto" is a request's word.
CODE = re.compile(r"[A-Za-z]{2,3}([-_][A-Za-z0-9]{2,8})*")
_SUFFIX = re.compile(r"\.([a-z]{2})")  # train.en: ISO 639-1 only (.src, .tgt, .txt are not languages)


def check_code(code: str, side: str) -> None:
    """ValueError unless `code` reads as a language code; side: "source" or "target"."""
    if code == "auto" or not CODE.fullmatch(code):
        raise ValueError(f"the {side} language {code!r} is not a language code: give an ISO 639 code such as en, de "
                         "or pt-BR")


def pair_record(source: str | None, target: str | None, src_path: str | Path | None = None,
                tgt_path: str | Path | None = None) -> dict[str, str] | None:
    """{"source", "target"} for meta.json: the codes given, else the two-letter suffixes of the two files
    (train.en, train.es) when they differ; None when neither says."""
    if (source is None) != (target is None):
        raise ValueError("give both --source-lang and --target-lang, or neither")
    if source is None and src_path is not None and tgt_path is not None:
        found = [_SUFFIX.fullmatch(Path(p).suffix) for p in (src_path, tgt_path)]
        if all(found) and found[0].group(1) != found[1].group(1):
            source, target = found[0].group(1), found[1].group(1)
    if source is None:
        return None
    check_code(source, "source")
    check_code(target, "target")
    if source == target:
        raise ValueError(f"the source and target languages are both {source!r}")
    return {"source": source, "target": target}
