"""Export a trained aiayn model to HF transformers (MarianMTModel), CTranslate2 and Argos Translate, proven equal
(docs/export.md).

Reading guide:
    names.py   ONE table: each aiayn parameter's name in MarianMTModel and in a CTranslate2 spec, with the meaning
               of its axes (d_model, heads, ...). Neither exporter spells a layer name of its own.
    hf.py      aiayn <-> MarianMTModel: the sinusoid permutation, the Marian config, the tokenizer files, what
               Marian cannot represent (pre-norm, learned positions, h*d_k != d_model), and the exact import back.
    ct2.py     aiayn -> CTranslate2 through its spec API (every preset, Table 3 rows A/B/E and pre-norm
               included), quantization, the languages recorded in aiayn.json.
    (decoding through an exported folder, CTranslate2's engine, lives in aiayn/decoding/ct2.py: open_engine)
    marian.py  OPUS-MT (an HF MarianMTModel folder) -> an aiayn run: the config's options (swish, output bias), the
               special ids renumbered to aiayn's, the two SentencePiece models as a MarianVocab (`aiayn import`).
    argos.py   aiayn -> an Argos Translate package (.argosmodel: the CTranslate2 model with PAD/BOS made impossible, the
               SentencePiece model, a spaCy sentence splitter), which argostranslate and LibreTranslate install.
    card.py    provenance (checkpoint, step, data) and the README model card; the all-or-nothing output folder.

`aiayn export --checkpoint RUN --to hf|ct2|argos OUT` (aiayn/cli/export.py) runs these; `aiayn translate --engine
ct2` decodes through an exported CTranslate2 folder. transformers, ctranslate2 and spacy are imported only inside
this subpackage and CTranslate2's engine (aiayn/decoding/ct2.py) (the `export` extra).

Equality, as tests/test_export.py checks it: HF logits within 1e-5 of aiayn's (fp32, also after save/load), HF
greedy and beam outputs identical with aiayn's `lp="power"`; CTranslate2 per-token log-probs within 1e-4, its
greedy and beam outputs identical; the exported tokenizer gives aiayn's ids; HF -> aiayn is exact. And
(tests/test_export_argos.py) argostranslate, installing the package in a Python without aiayn, translates every line
as the CTranslate2 export does with argostranslate's decoding settings.
"""

from __future__ import annotations

import importlib

__all__ = ["Param", "Provenance", "parameter_map"]
_HOMES = {"Provenance": "card", "Param": "names", "parameter_map": "names"}  # imported when first asked for: importing
# one exporter loads no other


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'aiayn.export' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"aiayn.export.{_HOMES[name]}"), name)
    globals()[name] = value
    return value
