#!/usr/bin/env bash
# What benchmarks/gpu/lease.sh reads, made here (the GPU machine has no network and no ../shared): .lease/multi30k,
# Multi30k EN->DE prepared as configs/multi30k.yaml's header says, and .lease/qs, a quickstart run (its averaged
# weights, config and vocabulary: what `aiayn translate --checkpoint` and `aiayn export` read) with its prepared data.
# Carry .lease with the call (about 40 MB). From the repository root:
#
#   bash benchmarks/gpu/lease_inputs.sh [QUICKSTART_OUT]      (default runs/quickstart: `aiayn quickstart`'s --out)
set -eu -o pipefail
M=${MULTI30K:-../shared/data/multi30k}; Q=${1:-runs/quickstart}; L=${LEASE_INPUTS:-.lease}
PY=${PY:-python}
mkdir -p "$L"
grep -qx "/$L/" .git/info/exclude 2>/dev/null || echo "/$L/" >> .git/info/exclude  # inputs, not sources
if [ ! -f "$L/multi30k/vocab.model" ]; then
    $PY -m aiayn prepare --src "$M/train.en" --tgt "$M/train.de" --valid-src "$M/val.en" --valid-tgt "$M/val.de" \
        --test-src "$M/test_2016_flickr.en" --test-tgt "$M/test_2016_flickr.de" --vocab-size 8000 --out "$L/multi30k"
fi
mkdir -p "$L/qs/run" "$L/qs/data"
cp "$Q/run/config.json" "$Q/run/vocab.model" "$Q/run/averaged.safetensors" "$L/qs/run/"
cp -r "$Q/data/." "$L/qs/data/"  # prepared: all.sh distill reads its training split
du -sh "$L"
