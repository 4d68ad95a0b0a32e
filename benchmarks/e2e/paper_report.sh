#!/bin/bash
# The example report of `aiayn paper` (docs/paper-report.md), from committed results and one translation run: Table 1
# (TABLE1), Table 3 at scale 1/8 (TABLE3: 20 rows, base at 3 seeds) and the parser's runs (PARSER) reused; the
# translation model and the attention figures from TRANSLATION, a run directory or a quickstart folder (without it the
# cpu budget trains a 60-minute model on the built-in corpus). Result folders are arguments, not paths baked into the
# package; give yours:
#   TRANSLATION=runs/finetune/scratch OUT=report bash benchmarks/e2e/paper_report.sh
# TABLE1= (empty) measures Table 1 again at the paper's width. Running it again skips the parts already in OUT (an
# interrupted report picks up where it stopped).
set -euo pipefail
TABLE1=${TABLE1-benchmarks/results/table1-xeon}
TABLE3=${TABLE3:-benchmarks/results/table3-xeon}
PARSER=${PARSER:-benchmarks/results/parsing-xeon}
OUT=${OUT:-report}
exec aiayn paper --budget cpu --out "$OUT" ${TABLE1:+--from "$TABLE1"} --from "$TABLE3" --from "$PARSER" \
    ${TRANSLATION:+--from "$TRANSLATION"} "$@"
