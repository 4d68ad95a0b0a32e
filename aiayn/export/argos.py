"""aiayn -> an Argos Translate package (.argosmodel): what argostranslate installs and LibreTranslate serves.

A package is a zip holding one folder (installing it unzips that folder into argostranslate's packages folder):

    NAME/metadata.json          the language pair (codes and names), type "translate", package and argos versions
    NAME/model/                 the CTranslate2 model (ct2.py's spec), PAD and BOS made impossible (below)
    NAME/sentencepiece.model    aiayn's shared SentencePiece model: argostranslate tokenizes with it by that name
    NAME/spacy/                 a blank spaCy pipeline of the source language: sentence splitting offline
    NAME/README.md              the model card (card.py)

NAME is the file name without .argosmodel. How argostranslate (1.11) then translates a text: it splits it into
lines, each line into sentences (the splitter: SENTENCE_SPLITTING below), encodes each sentence with
sentencepiece.model into pieces, and calls `translate_batch` with its own settings (ARGOS_DECODING), then joins the
decoded sentences of a line with spaces. It passes no `suppress_sequences`, so the exported projection gives PAD and
BOS the bias NEVER (-1e4): their probability is exactly 0 in float32, which is what `translate_ct2`'s suppression
does (masking before the log-softmax), so the package translates as `translate_ct2` with the same settings (but
for a generated <unk>, which argostranslate replaces by a source piece).
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import zipfile
from pathlib import Path

from aiayn.config import BOS_ID, PAD_ID
from aiayn.data.vocab import MODEL_FILE
from aiayn.decoding.ct2 import AIAYN_FILE
from aiayn.errors import UsageError, UserError
from aiayn.export.card import Provenance, write_card
from aiayn.export.ct2 import QUANTIZATIONS, ct2_spec
from aiayn.export.hf import spm_files
from aiayn.files import atomic_write
from aiayn.model import Transformer

SUFFIX = ".argosmodel"
ARGOS_VERSION = "1.11.0"  # the argostranslate release the package format was read from and is tested with
NEVER = -1e4  # projection bias of PAD and BOS: exp(-1e4 - max logit) is 0 in float32, float16 and bfloat16
LANGUAGE_CODE = re.compile(r"[a-z]{2,3}(-[a-z0-9]+)?")  # ISO 639-1/-3, optionally a variant: en, de, zh-hant

# What argostranslate 1.11 passes to CTranslate2's translate_batch (translate.apply_packaged_translation).
ARGOS_DECODING = dict(beam_size=4, length_penalty=0.2, patience=1, max_decoding_length=256, min_decoding_length=1)

SENTENCE_SPLITTING = """\
argostranslate splits each line into sentences before translating. Its splitter is chosen by ARGOS_CHUNK_TYPE:
unset (its default): MiniSBD, whose model for the source language it downloads on first use; SPACY: the `spacy/`
pipeline in this package (a blank pipeline plus spaCy's rule-based sentencizer: no download, no model). Offline, set
`ARGOS_CHUNK_TYPE=SPACY` (docs/export.md says what happens otherwise)."""

_USAGE = """\
```bash
pip install argostranslate=={argos}
python -c "import argostranslate.package as p; p.install_from_path('{file}')"
ARGOS_CHUNK_TYPE=SPACY argos-translate --from-lang {src} --to-lang {tgt} "A man is riding a bike."
```

The decoding settings are argostranslate's: beam {beam}, length penalty |Y|^{alpha} (ARGOS_BEAM_SIZE changes the
beam). {splitting}"""


def language_name(code: str) -> str:
    """The English name of a language code as spaCy knows it ("de" -> "German", "grc" -> "Ancient Greek"), else the
    code itself."""
    from spacy.util import get_lang_class

    try:
        name = get_lang_class(code.split("-")[0]).__name__
    except ImportError:
        return code
    return re.sub(r"(?<=[a-z])(?=[A-Z])", " ", name)  # class names are CamelCase


def sentence_splitter(code: str, folder: Path) -> None:
    """A blank spaCy pipeline of language `code` (its tokenizer and its exceptions, e.g. "Dr." stays one token;
    spaCy's multi-language one where it has none) into `folder`. argostranslate adds the rule-based sentencizer
    itself when it loads it, so the pipeline has none (a second one would be refused)."""
    import spacy

    try:
        nlp = spacy.blank(code.split("-")[0])
    except ImportError:  # a language spaCy lacks, or one whose tokenizer needs another package (ja, ko, th, vi)
        nlp = spacy.blank("xx")
    nlp.to_disk(folder)


def _write_model(model: Transformer, vocab, folder: Path, quantization: str | None, languages: tuple[str, str]
                 ) -> None:
    """The CTranslate2 model of `model` into `folder`, PAD and BOS given the projection bias NEVER; its aiayn.json
    records the pair, so that `aiayn serve` serves the package's model/ folder as it is."""
    from ctranslate2.converters.converter import Converter

    spec = ct2_spec(model, vocab)
    spec.decoder.projection.bias[[PAD_ID, BOS_ID]] = NEVER

    class _Given(Converter):  # CTranslate2's validate / de-duplicate / quantize / save steps, on our spec
        def _load(self):
            return spec

    _Given().convert(str(folder), quantization=quantization, force=True)
    shutil.copyfile(vocab.model_path, folder / MODEL_FILE)  # so that aiayn's CT2Translator opens it too
    pair = {"source": languages[0], "target": languages[1]}
    (folder / AIAYN_FILE).write_text(json.dumps({"model": model.cfg.to_dict(), "quantization": quantization,
                                                 "languages": pair}, indent=2) + "\n")


def metadata(source_lang: str, target_lang: str, package_version: str) -> dict:
    """metadata.json: the fields argostranslate's Package reads."""
    return {"package_version": package_version, "argos_version": ARGOS_VERSION, "type": "translate",
            "from_code": source_lang, "from_name": language_name(source_lang),
            "to_code": target_lang, "to_name": language_name(target_lang), "links": []}


def _check(out: Path, source_lang: str, target_lang: str, quantization: str | None) -> None:
    if out.suffix != SUFFIX or not out.stem:
        raise UsageError(f"an Argos Translate package is a {SUFFIX} file: name the output e.g. "
                         f"translate-{source_lang}_{target_lang}{SUFFIX}, not {out.name}")
    if out.exists():
        raise UserError(f"{out} already exists; remove it or choose another output file")
    for flag, code in (("--source-lang", source_lang), ("--target-lang", target_lang)):
        if not LANGUAGE_CODE.fullmatch(code or ""):
            raise UsageError(f"{flag} {code!r} is not a language code: give an ISO 639 code such as en, de, fr "
                             "(argostranslate and LibreTranslate know languages by it)")
    if source_lang == target_lang:
        raise UsageError(f"--source-lang and --target-lang are both {source_lang!r}")
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise UsageError(f"unknown quantization {quantization!r}; choose one of: {', '.join(QUANTIZATIONS)}")


def export_argos(model: Transformer, vocab, out: Path, source_lang: str, target_lang: str,
                 quantization: str | None = None, prov: Provenance | None = None,
                 package_version: str = "1.0") -> Path:
    """Write `out` (NAME.argosmodel): an Argos Translate package of `model` translating source_lang -> target_lang
    (ISO 639 codes), written whole or not at all. Returns `out`."""
    out = Path(out)
    _check(out, source_lang, target_lang, quantization)
    with tempfile.TemporaryDirectory(prefix="aiayn-argos.") as tmp:  # the folder to zip; only the zip goes to `out`
        folder = Path(tmp) / out.stem
        folder.mkdir()
        _write_model(model, vocab, folder / "model", quantization, (source_lang, target_lang))
        (folder / "sentencepiece.model").write_bytes(spm_files(vocab)[0])  # an OPUS-MT import's: its source model
        sentence_splitter(source_lang, folder / "spacy")
        (folder / "metadata.json").write_text(json.dumps(metadata(source_lang, target_lang, package_version),
                                                         indent=2) + "\n")
        usage = _USAGE.format(argos=ARGOS_VERSION, file=out.name, src=source_lang, tgt=target_lang,
                              beam=ARGOS_DECODING["beam_size"], alpha=ARGOS_DECODING["length_penalty"],
                              splitting=SENTENCE_SPLITTING)
        write_card(folder, model.cfg, prov or Provenance(), "argos", usage, ARGOS_NOTES, quantization or "float32")
        atomic_write(out, lambda path: _zip(folder, path))
    return out


def _zip(folder: Path, path: Path) -> None:
    """`folder` and everything in it into the zip file `path`, under the one top folder `folder.name`."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.write(folder, folder.name)
        for p in sorted(folder.rglob("*")):
            zf.write(p, p.relative_to(folder.parent).as_posix())


ARGOS_NOTES = """\
* argostranslate decodes with its own settings: beam 4 (ARGOS_BEAM_SIZE), length penalty |Y|^0.2 (aiayn's
  `--lp power --alpha 0.2`; the paper's GNMT penalty has no CTranslate2 equivalent), CTranslate2's patience 1 and
  at most 256 words. `aiayn translate --engine ct2 --beam 4 --lp power --alpha 0.2 --max-len-a 0 --max-len-b 256`
  on the same sentences gives the same translations (aiayn's tests/test_export_argos.py checks it).
* argostranslate runs the model with ARGOS_COMPUTE_TYPE, default "auto": argostranslate 1.11 then decodes in int8 on
  a CPU that has it, whatever the weights above, while argos-translate-lt 1.12 (LibreTranslate 1.9.6's) passes no
  compute type, so CTranslate2 keeps the stored float32; ARGOS_COMPUTE_TYPE=default keeps them in both.
* PAD and BOS have output bias -1e4 (argostranslate cannot suppress them): the log-probabilities are aiayn's
  renormalized over the other tokens, as when aiayn's CTranslate2 decoding suppresses them.
* A line is split into sentences (by ARGOS_CHUNK_TYPE's splitter), each translated alone; aiayn translates the
  whole line as one sentence.
* argostranslate replaces a generated `<unk>` by the source piece the model attends to most (aiayn writes " ⁇ "),
  turns every "_" of a translation into a space, and drops its leading space."""
