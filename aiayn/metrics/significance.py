"""Is one system's score really different from another's on the same test set? Paired significance tests, run by
sacreBLEU's own `sacrebleu.significance.PairedTest`: paired bootstrap resampling (Koehn 2004, as Moses'
bootstrap-hypothesis-difference-significance.pl) or paired approximate randomization (as MultEval).

What this module adds around sacreBLEU's test:
    * the metrics as `aiayn.metrics.bleu` defines them (sacreBLEU, chrF, the paper's tokenized BLEU);
    * the seed as an argument (PairedTest reads it from the SACREBLEU_SEED environment variable);
    * p = 1 for a system whose sentence statistics equal the baseline's: every resampled difference is then 0, and
      sacreBLEU, which counts only resampled differences strictly larger than the observed one, returns its floor
      1 / (n + 1), which reads as "significant" for a copy of the baseline;
    * plain data out (`Comparison`), and the text table `aiayn evaluate --paired-bs` prints.

Reading the result: per metric and system, the corpus score, the mean of the resampled scores with the half-width
of their 95 % interval (mean ± ci), and p: the chance of an absolute difference to the baseline at least as large
as the observed one if the system and the baseline came from the same process. p < 0.05 (marked "*"): the
difference is unlikely to be chance. p says that the systems differ, not which is better; the scores say that.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest

from aiayn.metrics.bleu import paper_bleu_metric, paper_tokens

TESTS = {"bs": "paired bootstrap resampling", "ar": "paired approximate randomization"}
DEFAULT_SAMPLES = {"bs": 1000, "ar": 10000}  # sacreBLEU's defaults
METRICS = {"bleu": "sacreBLEU", "chrf": "chrF", "tokenized_bleu": "tokenized BLEU"}
SIGNIFICANT = 0.05


@dataclass(frozen=True)
class MetricResult:
    """One system's score under one metric."""

    score: float  # the corpus score
    mean: float  # mean of the bootstrap-resampled scores
    ci: float  # half-width of their 95 % interval: mean ± ci
    p_value: float | None  # against the baseline; None for the baseline itself

    @property
    def significant(self) -> bool:
        return self.p_value is not None and self.p_value < SIGNIFICANT


@dataclass(frozen=True)
class Comparison:
    """Every system against the baseline (the first system), per metric. `dataclasses.asdict` gives plain JSON."""

    test: str  # "bs" or "ar" (TESTS)
    samples: int  # bootstrap resamples (bs) or randomization trials (ar)
    ci_samples: int  # bootstrap resamples behind the intervals (= samples for bs)
    seed: int
    baseline: str
    scores: dict[str, dict[str, MetricResult]]  # metric (METRICS key) -> system name -> result, in the given order
    signatures: dict[str, str]  # metric -> sacreBLEU's signature, with the test's samples and seed
    tokenization: str = ""  # how tokenized_bleu's input was made ("Moses-tokenized, compound-split, lang de")


@contextmanager
def _sacrebleu_seed(seed: int) -> Iterator[None]:
    """PairedTest seeds both the baseline's interval and each system's test from SACREBLEU_SEED."""
    before = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    try:
        yield
    finally:
        if before is None:
            del os.environ["SACREBLEU_SEED"]
        else:
            os.environ["SACREBLEU_SEED"] = before


def _metric(key: str, lang: str, compound_split: bool | None) -> tuple[Callable, Callable]:
    """(sacreBLEU metric class, how lines are prepared for it)."""
    if key == "tokenized_bleu":
        return paper_bleu_metric, lambda lines: paper_tokens(lines, lang, compound_split)
    return {"bleu": BLEU, "chrf": CHRF}[key], list


def _same_statistics(metric, hyps: list[str], baseline: list[str]) -> bool:
    """Equal per-sentence statistics, so every resample scores both the same (the private method is the one
    PairedTest itself calls to get them)."""
    return hyps == baseline or (metric._extract_corpus_statistics(hyps, None)
                                == metric._extract_corpus_statistics(baseline, None))


def _check(systems: Mapping[str, Sequence[str]], refs: Sequence[str], test: str, metrics: Sequence[str],
           seed: int) -> None:
    if len(systems) < 2:
        raise ValueError(f"a paired test compares two or more systems (the first is the baseline); got {len(systems)}")
    if test not in TESTS:
        raise ValueError(f"test must be one of {sorted(TESTS)}, got {test!r}")
    unknown = [m for m in metrics if m not in METRICS]
    if unknown or not metrics:
        raise ValueError(f"metrics must be some of {list(METRICS)}, got {list(metrics)}")
    if seed < 1:  # PairedTest leaves the systems' tests unseeded for seed 0
        raise ValueError(f"seed must be an integer >= 1, got {seed}")
    for name, hyps in systems.items():
        if len(hyps) != len(refs):
            raise ValueError(f"system {name!r} has {len(hyps)} lines but the references have {len(refs)}; they "
                             "must be line-aligned")


def paired_significance(systems: Mapping[str, Sequence[str]], refs: Sequence[str], n: int | None = None,
                        seed: int = 12345, metrics: Sequence[str] = ("bleu", "chrf"), test: str = "bs",
                        ci_n: int = 1000, lang: str = "en", compound_split: bool | None = None) -> Comparison:
    """Each system against the first (the baseline) on the same references, by sacreBLEU's PairedTest.

    systems: name -> detokenized lines, the baseline first; refs: one reference per line. n: resamples (bs) or
    trials (ar), default sacreBLEU's (1000, 10000); ci_n: bootstrap resamples for the intervals under ar. metrics:
    keys of METRICS; lang and compound_split are tokenized_bleu's (as `tokenized_bleu`)."""
    _check(systems, refs, test, metrics, seed)
    n = n or DEFAULT_SAMPLES[test]
    names = list(systems)
    scores, signatures = {}, {}
    for key in metrics:
        metric_class, prepare = _metric(key, lang, compound_split)
        hyps = {name: prepare(lines) for name, lines in systems.items()}
        metric = metric_class(references=[prepare(refs)])
        with _sacrebleu_seed(seed):
            paired = PairedTest(list(hyps.items()), {key: metric}, references=None, test_type=test,
                                n_samples=n, n_ar_confidence=ci_n if test == "ar" else -1)
            sigs, table = paired()
        (sacre_name,) = sigs  # sacreBLEU's name for the metric: BLEU, chrF2
        scores[key] = {}
        for name, result in zip(names, table[sacre_name]):
            p = result.p_value
            if p is not None and result.score == table[sacre_name][0].score and _same_statistics(
                    metric, hyps[name], hyps[names[0]]):
                p = 1.0
            scores[key][name] = MetricResult(float(result.score), float(result.mean), float(result.ci),
                                             None if p is None else float(p))
        signatures[key] = sigs[sacre_name].format()
    split = lang == "de" if compound_split is None else compound_split
    tokenization = f"Moses-tokenized{', compound-split' if split else ''}, lang {lang}"
    return Comparison(test, n, n if test == "bs" else ci_n, seed, names[0], scores, signatures,
                      tokenization if "tokenized_bleu" in metrics else "")


def format_comparison(comparison: Comparison) -> str:
    """The text table: a block per metric, a row per system (the baseline first), and how to read it."""
    c = comparison
    width = max(len("system"), *(len(name) for name in c.scores[next(iter(c.scores))]))
    samples = (f"{c.samples} resamples" if c.test == "bs"
               else f"{c.samples} trials, intervals from {c.ci_samples} bootstrap resamples")
    lines = [f"{TESTS[c.test]}, {samples}, seed {c.seed}; each system against the baseline {c.baseline}", ""]
    for key, systems in c.scores.items():
        kind = f"{c.tokenization}; " if key == "tokenized_bleu" else ""
        lines += [f"{METRICS[key]}  ({kind}signature {c.signatures[key]})",
                  f"  {'system':<{width}}   score    mean ± 95% CI    p"]
        for name, r in systems.items():
            p = "baseline" if r.p_value is None else f"{r.p_value:.4f}" + (" *" if r.significant else "")
            lines.append(f"  {name:<{width}}  {r.score:6.2f}  {r.mean:6.2f} ± {r.ci:5.2f}     {p}")
        lines.append("")
    lines += ["p: the chance of a score difference to the baseline at least this large if both systems came from "
              "the same process.",
              f"* p < {SIGNIFICANT}: the difference is unlikely to be chance. p says the systems differ, not which is "
              "better: compare the scores."]
    return "\n".join(lines)
