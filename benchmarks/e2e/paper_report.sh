#!/bin/bash
# The example report of `aiayn paper` (docs/paper-report.md), from the committed results: Table 3 at scale 1/8 (20
# rows, base at 3 seeds) and the parser's runs reused, everything else run here on the cpu budget: Table 1 at the
# paper's width, a 60-minute translation model on the built-in corpus and the attention figures from it (or, with
# QUICKSTART=runs/quickstart, that quickstart's model reused: `aiayn quickstart --out runs/quickstart` first).
# Result folders are arguments, not paths baked into the package; give yours:
#   TABLE3=benchmarks/results/table3-xeon PARSER=benchmarks/results/parsing-xeon OUT=report \
#       bash benchmarks/e2e/paper_report.sh
# Running it again skips the parts already in OUT (an interrupted report picks up where it stopped).
set -euo pipefail
TABLE3=${TABLE3:-benchmarks/results/table3-xeon}
PARSER=${PARSER:-benchmarks/results/parsing-xeon}
OUT=${OUT:-report}
exec aiayn paper --budget cpu --out "$OUT" --from "$TABLE3" --from "$PARSER" ${QUICKSTART:+--from "$QUICKSTART"} "$@"
