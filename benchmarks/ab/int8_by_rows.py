"""int8 decoding with each row of a layer's input quantized over its own range (aiayn.fast.int8_by_rows, the
default) against the whole input over one range (torch's dynamic int8 linear as it is), interleaved in one process
on real text, and each beside the model's fp32 translations:

    python -m benchmarks.ab.int8_by_rows --run RUN --src test.src.txt --ref test.tgt.txt [--beam 4] [--rounds 4]
        [--threads 1] [--more RUN ...]

One int8 engine is loaded (and the fp32 one, once, for its translations); each round translates the whole file with
each side, CPU seconds of translate_nbest (`time.process_time`), so the machine's drift hits both alike. Prints each
side's minimum and median and the one over the other, then for each side its test BLEU, how many lines are fp32's
to the word, and its BLEU against fp32's translations (how near int8 stays to the model it quantizes). --more: other
runs on the same source and reference, translated once with each side (no timing). Search: --beam, |Y|^0.6
(power), patience 1, no scores asked (as `aiayn translate`), aiayn's default batches. Not a test.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import sacrebleu
import torch

import aiayn.decoding.inference as inference
from aiayn.decoding.engine import EngineOptions, open_engine
from aiayn.decoding.search import PAPER_SEARCH
from aiayn.fast import int8_by_rows
from benchmarks.ab import interleave, print_interleaved, real_text_options


def over_one_range(op, x, packed, bias):
    return op(x, packed, True)


SIDES = {"by rows": lambda: setattr(inference, "int8_by_rows", int8_by_rows),
         "one range": lambda: setattr(inference, "int8_by_rows", over_one_range)}


def near_fp32(run: str, search, lines: list[str], refs: list[str], texts: dict[str, list[str]] | None = None) -> None:
    """For each side: test BLEU, lines equal to fp32's, BLEU against fp32's translations (texts: the sides' own,
    else translated here once each)."""
    fp32 = [h[0].text for h in open_engine(run, EngineOptions(engine="aiayn", search=search, precision="fp32",
                                                              device="cpu")).translate_nbest(lines)]
    if texts is None:
        engine = open_engine(run, EngineOptions(engine="aiayn", search=search, precision="int8", device="cpu"))
        texts = {}
        for side, setup in SIDES.items():
            setup()
            texts[side] = [h[0].text for h in engine.translate_nbest(lines)]
        SIDES["by rows"]()
    print(f"{run}: fp32 BLEU {sacrebleu.corpus_bleu(fp32, [refs]).score:.2f}")
    for side, out in texts.items():
        print(f"  {side:9s} BLEU {sacrebleu.corpus_bleu(out, [refs]).score:.2f}, "
              f"{sum(a == b for a, b in zip(out, fp32))} of {len(lines)} lines fp32's, "
              f"BLEU against fp32's {sacrebleu.corpus_bleu(out, [fp32]).score:.1f}")


def main() -> None:
    def more(ap):
        ap.add_argument("--ref", required=True)
        ap.add_argument("--more", nargs="*", default=[], help="other runs: BLEU and nearness to fp32 only")

    args = real_text_options(__doc__, rounds=4, threads=1, more=more)
    torch.set_num_threads(args.threads)
    search = dataclasses.replace(PAPER_SEARCH, beam=args.beam, lp="power", beam_patience=1.0, scores=False)
    lines = Path(args.src).read_text(encoding="utf-8").splitlines()
    refs = Path(args.ref).read_text(encoding="utf-8").splitlines()
    engine = open_engine(args.run, EngineOptions(engine="aiayn", search=search, precision="int8", device="cpu"))
    seconds, _ = interleave(engine, lines, SIDES, args.rounds)
    texts = {}
    for side, setup in SIDES.items():
        setup()
        texts[side] = [h[0].text for h in engine.translate_nbest(lines)]
    SIDES["by rows"]()
    print(f"{args.run}: {len(lines)} lines, int8, beam {args.beam}, {args.threads} thread(s), {args.rounds} rounds; "
          f"CPU seconds of translate_nbest")
    print_interleaved(seconds, {side: [t.split() for t in out] for side, out in texts.items()})
    near_fp32(args.run, search, lines, refs, texts)
    for run in args.more:
        near_fp32(run, search, lines, refs)


if __name__ == "__main__":
    main()
