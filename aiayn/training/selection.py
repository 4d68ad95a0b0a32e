"""Which checkpoint is best: the dev evaluation at each checkpoint (loss, NLL, perplexity, and with --eval-bleu-lines
BLEU and chrF of the checkpoint's own translations), whether it beats every earlier one by --best-metric, and early
stopping (--patience). aiayn.training.train calls `judge` at each checkpoint and saves what it decides through its
training.run.Run; `tc` is its TrainConfig, `state` its TrainState (only read here, but for the early-stopping state
and the best dev loss)."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

from aiayn.data import PreparedSplit, Vocab
from aiayn.decoding.search import PAPER_SEARCH
from aiayn.decoding.translator import Translator
from aiayn.errors import DataError
from aiayn.files import read_lines
from aiayn.metrics import chrf, corpus_bleu
from aiayn.metrics.perplexity import perplexity
from aiayn.model import Transformer
from aiayn.runtime import Runtime

BEST_METRICS = ("loss", "bleu", "chrf")  # what checkpoint_best keeps: the lowest dev loss, or the highest BLEU/chrF


@dataclass
class EarlyStopping:
    """Which dev evaluation was best so far by `metric` (BEST_METRICS), and how many evaluations in a row have not
    beaten it: what checkpoint_best keeps and when `patience` stops the run. Saved in every step checkpoint, so a
    resumed run decides as the uninterrupted one."""

    metric: str = "loss"
    patience: int = 0  # 0: never stop
    best: float | None = None
    best_step: int = 0
    evals_since_best: int = 0

    def update(self, value: float, step: int) -> bool:
        """Count one evaluation; True if it is strictly better than every earlier one."""
        better = self.best is None or (value < self.best if self.metric == "loss" else value > self.best)
        if better:
            self.best, self.best_step, self.evals_since_best = value, step, 0
        else:
            self.evals_since_best += 1
        return better

    @property
    def stop(self) -> bool:
        return 0 < self.patience <= self.evals_since_best

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "best_step": self.best_step, "evals_since_best": self.evals_since_best}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.best, self.best_step, self.evals_since_best = d["best"], d["best_step"], d["evals_since_best"]


def dev_translation_scores(model: Transformer, valid: PreparedSplit, tc) -> dict[str, float]:
    """BLEU and chrF (sacreBLEU, on detokenized text, as `aiayn evaluate`) of the model's translations of the first
    tc.eval_bleu_lines dev sentences, searched with beam tc.eval_beam (1: greedy)."""
    if valid.text_paths is None:
        raise DataError(f"{valid.data_dir} has no dev text (valid.src.txt, valid.tgt.txt) to score translations "
                        "against; prepare it again with aiayn prepare")
    src, ref = (read_lines(p)[:tc.eval_bleu_lines] for p in valid.text_paths)
    device = next(model.parameters()).device
    search = dataclasses.replace(PAPER_SEARCH, beam=tc.eval_beam)
    hyps = Translator(model, Vocab.load(valid.data_dir), search, device=device).translate(src)
    return {"bleu": corpus_bleu(hyps, ref).score, "chrf": chrf(hyps, ref).score}


def evaluate(model: Transformer, valid: PreparedSplit, tc, rt: Runtime) -> dict[str, float]:
    """The dev figures of a checkpoint: loss, NLL and perplexity (every process scores its share), BLEU and chrF with
    --eval-bleu-lines (the main process translates; the others wait), and the seconds all that took."""
    t0 = time.time()
    dev = perplexity(model, valid, tc.max_tokens, model.cfg.label_smoothing, rt)
    scores = {"loss": dev.loss / dev.tokens, "nll": dev.nll / dev.tokens, "ppl": dev.ppl}
    if tc.eval_bleu_lines:
        found = dev_translation_scores(model, valid, tc) if rt.is_main else {"bleu": 0.0, "chrf": 0.0}
        scores["bleu"], scores["chrf"] = rt.all_reduce([found["bleu"], found["chrf"]])  # every process decides alike
    scores["eval_seconds"] = time.time() - t0
    return scores


def judge(state, tc, rt: Runtime, valid: PreparedSplit | None) -> tuple[dict[str, float] | None, bool]:
    """The dev evaluation of `state`'s model (None without a dev split or `valid`), and whether it beat every earlier
    one by --best-metric (it counts towards early stopping). The dev split needs no check against max_tokens:
    perplexity() raises its batch limit to the longest pair."""
    if not valid:
        return None, False
    scores = evaluate(state.model, valid, tc, rt)
    state.best_dev_loss = min(state.best_dev_loss, scores["loss"])
    return scores, state.early.update(scores[tc.best_metric], state.step)


def describe(scores: dict[str, float], improved: bool, early: EarlyStopping, tc, best_name: str) -> str:
    """The dev evaluation as the progress line tells it ("; dev loss ... ; best loss so far -> checkpoint_best...")."""
    msg = f"; dev loss {scores['loss']:.3f} nll {scores['nll']:.3f} ppl {scores['ppl']:.2f}"
    if "bleu" in scores:
        msg += f" BLEU {scores['bleu']:.2f} chrF {scores['chrf']:.2f}"
    msg += f" ({scores['eval_seconds']:.1f} s)"
    if improved:
        msg += f"; best {tc.best_metric} so far -> {best_name}"
    elif tc.patience:
        msg += f"; no better {tc.best_metric} for {early.evals_since_best}/{tc.patience} evaluations"
    return msg
