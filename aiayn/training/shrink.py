"""A student cut out of its teacher ("shrink and fine-tune", Shleifer & Rush 2020): the teacher's own model with fewer
encoder and decoder layers, each kept layer starting from a teacher layer's weights, the embeddings the teacher's.
`aiayn distill --student teacher-E-D` trains it on the teacher's translations; it starts where the teacher is, so it
reaches the teacher's BLEU in a fraction of the time a student trained from random weights needs.

    SPEC                               "teacher-E-D": E encoder layers, D decoder layers ("all": the teacher's),
                                       the teacher's widths
    parse_spec(name) -> (E, D) | None  None for any other preset name
    kept_layers(n, k) -> [i, ...]      which of the teacher's n layers the student's k start from
    shrunk_config(teacher, E, D)       the student's ModelConfig: the teacher's with E and D layers
    write_shrunk(teacher_ckpt, cfg, path)  the student's first weights, saved as a checkpoint
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from aiayn.config import ModelConfig
from aiayn.errors import UsageError

SPEC = "teacher-E-D"
_SPEC = re.compile(r"teacher-(\d+|all)-(\d+|all)")
# What --set may change in a student cut from its teacher: the training's regularization, not the weights' shapes.
TRAINING_FIELDS = ("dropout", "label_smoothing")
_LAYER = re.compile(r"(encoder|decoder)\.layers\.(\d+)\.(.+)")


def parse_spec(name: str) -> tuple[int | None, int | None] | None:
    """(E, D) of a "teacher-E-D" student name, each a number or None for "all" (all the teacher's layers of that
    stack: "teacher-all-1"); None when `name` is not of that form."""
    match = _SPEC.fullmatch(name)
    return tuple(None if n == "all" else int(n) for n in match.groups()) if match else None


def kept_layers(n: int, k: int) -> list[int]:
    """The teacher layers (of n) that k student layers start from: the first alone for k = 1 (Shleifer & Rush's
    choice), else k spread evenly from the first to the last."""
    if not 1 <= k <= n:
        raise UsageError(f"a student cut from a {n}-layer stack keeps 1..{n} layers, not {k}")
    if k == 1:
        return [0]
    return [(2 * i * (n - 1) + k - 1) // (2 * (k - 1)) for i in range(k)]  # i (n-1)/(k-1), halves rounded up


def shrunk_config(teacher: ModelConfig, n_enc: int | None, n_dec: int | None, overrides: dict[str, Any]
                  ) -> ModelConfig:
    """The student's model: the teacher's, with n_enc encoder and n_dec decoder layers (None: all the teacher's) and
    `overrides` (only TRAINING_FIELDS: every other field fixes a weight's shape or meaning, which the teacher's
    weights must keep)."""
    n_enc = teacher.n_enc_layers if n_enc is None else n_enc
    n_dec = teacher.n_dec_layers if n_dec is None else n_dec
    refused = sorted(set(overrides) - set(TRAINING_FIELDS))
    if refused:
        raise UsageError(f"a {SPEC} student keeps its teacher's model; --set may change only "
                         f"{', '.join(TRAINING_FIELDS)}, not {', '.join(refused)}")
    for side, n, k in (("encoder", teacher.n_enc_layers, n_enc), ("decoder", teacher.n_dec_layers, n_dec)):
        if not 1 <= k <= n:
            most = f"teacher-all-{n}" if side == "decoder" else f"teacher-{n}-all"
            layers = "1 layer" if n == 1 else f"{n} layers"
            raise UsageError(f"the teacher's {side} has {layers}: a {SPEC} student keeps 1..{n} of them, not {k} "
                             f"(at most --student {most})")
    return teacher.replace(n_enc_layers=n_enc, n_dec_layers=n_dec, **overrides)


def shrunk_state(teacher_state: dict[str, Any], teacher: ModelConfig, student: ModelConfig) -> dict[str, Any]:
    """The student's state dict: every tensor outside the layer stacks as the teacher's, and student layer j of each
    stack the teacher's layer kept_layers(...)[j]."""
    keep = {"encoder": kept_layers(teacher.n_enc_layers, student.n_enc_layers),
            "decoder": kept_layers(teacher.n_dec_layers, student.n_dec_layers)}
    state = {}
    for name, tensor in teacher_state.items():
        match = _LAYER.fullmatch(name)
        if match is None:
            state[name] = tensor
            continue
        stack, layer, rest = match[1], int(match[2]), match[3]
        for j, source in enumerate(keep[stack]):
            if source == layer:
                state[f"{stack}.layers.{j}.{rest}"] = tensor
    return state


def write_shrunk(teacher_checkpoint: Path, student: ModelConfig, path: Path) -> Path:
    """The student's first weights (shrunk_state of the teacher checkpoint's), saved at `path` as an aiayn
    checkpoint of the student's config."""
    from aiayn.training import checkpoint as ckpt

    state, teacher, _ = ckpt.load_weights(teacher_checkpoint)
    ckpt.save_weights(path, shrunk_state(state, teacher, student), student)
    return path
