"""`aiayn shortlist`: build the lexical shortlist of a run (aiayn.shortlist) from the training pairs it learned
from, for `translate --shortlist`, `serve --shortlist` and the CTranslate2 export's vocabulary map."""

from __future__ import annotations

import argparse
from pathlib import Path

from aiayn import rundir
from aiayn.cli.common import non_negative_int
from aiayn.data.folder import read_meta
from aiayn.errors import DataError, UsageError
from aiayn.files import check_output_path, sha256_file
from aiayn.shortlist import FREQUENT, PER_SOURCE, build_from_prepared


def run(args: argparse.Namespace) -> int:
    out, data = Path(args.out), args.data
    if out.is_dir():
        saved = rundir.read_config(out)  # a folder must be a run (the error says what else it is)
        if data is None:
            data = rundir.check_same_data(out, saved)  # the run's data, as it was when the run started
        elif read_meta(data) and sha256_file(Path(data) / rundir.VOCAB) != saved["vocab_sha256"]:
            raise DataError(f"{data} has another vocabulary than {out} was trained with; give the data the run "
                            f"was trained on ({saved['data']}), or leave --data out")
        out = out / rundir.SHORTLIST
    elif data is None:
        raise UsageError(f"{out} is not a run directory: give --data (the prepared data to count) to write a file")
    else:
        check_output_path(out)
    shortlist = build_from_prepared(data, args.per_source, args.frequent)
    shortlist.save(out)
    print(f"wrote {out}: per source piece the {args.per_source} target pieces of best Dice coefficient, and the "
          f"{shortlist.frequent.numel()} most frequent target pieces (from {data})")
    return 0


def register(sub) -> None:
    p = sub.add_parser("shortlist", help="build a run's lexical shortlist (faster decoding: translate --shortlist)",
                       description="Count which target pieces co-occur with each source piece in the training "
                                   "pairs and keep, per source piece, the --per-source best by Dice coefficient, "
                                   "plus the --frequent most frequent target pieces. `translate --shortlist` and "
                                   "`serve --shortlist` then compute the output projection for a batch's pieces "
                                   "only; `export --to ct2` writes it as CTranslate2's vocabulary map. "
                                   "docs/decoding.md.")
    p.add_argument("--out", required=True,
                   help=f"run directory (writes RUN/{rundir.SHORTLIST}, where translate and serve look) or a file")
    p.add_argument("--data", help="prepared-data directory whose train split is counted (default, for a run: the "
                                  "data it was trained on)")
    p.add_argument("--per-source", type=non_negative_int, default=PER_SOURCE,
                   help=f"target pieces kept per source piece (default {PER_SOURCE})")
    p.add_argument("--frequent", type=non_negative_int, default=FREQUENT,
                   help=f"most frequent target pieces always allowed (default {FREQUENT})")
    p.set_defaults(func=run)
