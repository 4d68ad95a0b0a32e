"""benchmarks/e2e/serve_vs_libretranslate.py without LibreTranslate: the search it gives `aiayn serve` is
argostranslate's (aiayn.export.argos.ARGOS_DECODING), so that the answers of the two servers compare."""

from aiayn.cli import build_parser
from aiayn.cli.common import search_config
from aiayn.export.argos import ARGOS_DECODING
from benchmarks.e2e.serve_vs_libretranslate import ARGOS_SEARCH


def test_aiayn_serve_searches_as_argostranslate():
    args = build_parser().parse_args(["serve", "--checkpoint", "RUN", *ARGOS_SEARCH])
    cfg = search_config(args)
    assert (cfg.beam, cfg.lp, cfg.alpha, cfg.beam_patience, cfg.max_len_a, cfg.max_len_b, cfg.min_len) == (
        ARGOS_DECODING["beam_size"], "power", ARGOS_DECODING["length_penalty"], ARGOS_DECODING["patience"], 0,
        ARGOS_DECODING["max_decoding_length"], ARGOS_DECODING["min_decoding_length"])
