#!/bin/bash
# docs/export.md's LibreTranslate recipe, end to end and offline, beside `aiayn serve` (not run in CI): an Argos
# package exported from a run is installed into a fresh argostranslate home, LibreTranslate serves it with the
# package's spaCy splitter, and the same requests (a sentence, two lines, an HTML fragment, a form body as its
# Python client sends) go to LibreTranslate and to `aiayn serve` of the same run.
#   LT_PYTHON=/tmp/ltvenv/bin/python RUN=runs/quickstart/run bash benchmarks/e2e/libretranslate_offline.sh
# LT_PYTHON: a Python with `pip install libretranslate spacy` (torch==2.13.0 installed first keeps pip from pulling
# a CUDA build); RUN: an English->Spanish run (its prepared data records the pair); OUT (default a temporary folder)
# holds the package, the argostranslate home and both servers' logs.
set -euo pipefail
LT_PYTHON=${LT_PYTHON:?a Python with libretranslate and spacy installed}; RUN=${RUN:?an en->es run directory}
OUT=${OUT:-$(mktemp -d)}; LT_PORT=${LT_PORT:-5055}; AIAYN_PORT=${AIAYN_PORT:-5056}
LT_BIN=$(dirname "$LT_PYTHON")
mkdir -p "$OUT/home"
echo "== versions"
"$LT_PYTHON" -m pip list 2>/dev/null | grep -iE "^(libretranslate|argos-translate-lt|ctranslate2|spacy|torch) "
aiayn export --checkpoint "$RUN" --to argos "$OUT/translate-en_es-1_0.argosmodel"
export HOME=$OUT/home  # a fresh argostranslate: packages, cache and config under OUT
"$LT_PYTHON" -c "import argostranslate.package as p; p.install_from_path('$OUT/translate-en_es-1_0.argosmodel')" \
    2>/dev/null
start=$(date +%s)
ARGOS_CHUNK_TYPE=SPACY "$LT_BIN/libretranslate" --load-only en,es --port "$LT_PORT" > "$OUT/libretranslate.log" 2>&1 &
LT_PID=$!
aiayn serve --checkpoint "$RUN" --port "$AIAYN_PORT" > "$OUT/aiayn-serve.log" 2>&1 &
AIAYN_PID=$!
trap 'kill $LT_PID $AIAYN_PID 2>/dev/null' EXIT
for port in "$LT_PORT" "$AIAYN_PORT"; do
  until curl -sf "localhost:$port/languages" > /dev/null; do sleep 2; done
done
echo "== LibreTranslate answered after $(( $(date +%s) - start )) s; its log says:"
grep -E "Cannot update models|Running on" "$OUT/libretranslate.log" | sort -u
for server in "LibreTranslate:$LT_PORT" "aiayn serve:$AIAYN_PORT"; do
  name=${server%:*}; port=${server##*:}
  echo "== $name"
  echo "GET /languages: $(curl -s localhost:$port/languages)"
  for body in '{"q": "In the beginning was the Word.", "source": "en", "target": "es"}' \
              '{"q": "In the beginning was the Word.\nGod is love.", "source": "en", "target": "es"}' \
              '{"q": "<p>God is <b>love</b>.</p>", "source": "en", "target": "es", "format": "html"}'; do
    echo "POST /translate $body -> $(curl -s localhost:$port/translate -H 'Content-Type: application/json' -d "$body")"
  done
  echo "POST /translate (form) q=God is love. -> $(curl -s localhost:$port/translate -d 'q=God is love.&source=en&target=es')"
done
