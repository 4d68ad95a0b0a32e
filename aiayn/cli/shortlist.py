"""`aiayn shortlist`: build the lexical shortlist of a run (aiayn.decoding.shortlist) from the training pairs it learned
from, for `translate --shortlist`, `serve --shortlist` and the CTranslate2 export's vocabulary map."""

from __future__ import annotations

import argparse
from pathlib import Path

from aiayn import rundir
from aiayn.cli.common import non_negative_int
from aiayn.data.folder import read_meta
from aiayn.decoding.shortlist import FREQUENT, PER_SOURCE, build_from_prepared
from aiayn.errors import DataError, UsageError
from aiayn.files import check_output_path, sha256_file
from aiayn.rundir import RunDir


def shortlist_command(args: argparse.Namespace) -> int:
    data, output = args.data, args.output
    if args.out is not None and not Path(args.out).is_dir():
        raise UsageError(f"--out {args.out} is not a run directory; to write the shortlist to a file, give --output "
                         "FILE and --data (the prepared data to count)")
    if output is not None:
        if args.aligner:
            raise UsageError("--aligner writes RUN/aligner.safetensors: give --out RUN")
        if data is None:
            raise UsageError("--output FILE needs --data (the prepared data to count)")
        out = Path(output)
        check_output_path(out)
    else:
        run_dir = Path(args.out)
        saved = RunDir(run_dir).config  # a folder must be a run (the error says what else it is)
        if data is None:
            data = RunDir(run_dir).same_data(saved)  # the run's data, as it was when the run started
        elif read_meta(data) and sha256_file(Path(data) / rundir.VOCAB) != saved["vocab_sha256"]:
            raise DataError(f"{data} has another vocabulary than {run_dir} was trained with; give the data the run "
                            f"was trained on ({saved['data']}), or leave --data out")
        out = RunDir(run_dir).shortlist
    shortlist = build_from_prepared(data, args.per_source, args.frequent)
    shortlist.save(out)
    print(f"wrote {out}: per source piece the {args.per_source} target pieces of best Dice coefficient, and the "
          f"{shortlist.frequent.numel()} most frequent target pieces (from {data})")
    if args.aligner:
        from aiayn.decoding.aligner import FILE
        from aiayn.decoding.aligner import build_from_prepared as build_aligner

        path = build_aligner(data).save(out.parent / FILE)
        print(f"wrote {path}: a lexical word aligner (fast_align's model, both directions) that `translate "
              "--print-alignment` and the markup layer use instead of the attention")
    return 0


def register(sub) -> None:
    p = sub.add_parser("shortlist", help="build a run's lexical shortlist (faster decoding: translate --shortlist)",
                       description="Count which target pieces co-occur with each source piece in the training "
                                   "pairs and keep, per source piece, the --per-source best by Dice coefficient, "
                                   "plus the --frequent most frequent target pieces. `translate --shortlist` and "
                                   "`serve --shortlist` then compute the output projection for a batch's pieces "
                                   "only; `export --to ct2` writes it as CTranslate2's vocabulary map. "
                                   "docs/decoding.md.")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", metavar="RUN",
                       help=f"run directory: writes RUN/{rundir.SHORTLIST}, where translate and serve look")
    where.add_argument("--output", metavar="FILE", help="output file elsewhere instead (needs --data)")
    p.add_argument("--data", help="prepared-data directory whose train split is counted (default, with --out: the "
                                  "data the run was trained on)")
    p.add_argument("--per-source", type=non_negative_int, default=PER_SOURCE,
                   help=f"target pieces kept per source piece (default {PER_SOURCE})")
    p.add_argument("--frequent", type=non_negative_int, default=FREQUENT,
                   help=f"most frequent target pieces always allowed (default {FREQUENT})")
    p.add_argument("--aligner", action="store_true",
                   help="also train the run's lexical word aligner on the same pairs (RUN/aligner.safetensors; "
                        "fast_align's model, about 30 s per 30,000 pairs): what aligns words for "
                        "--print-alignment and inline tags instead of the attention; docs/attention.md")
    p.set_defaults(func=shortlist_command)
