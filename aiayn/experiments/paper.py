"""The paper's published numbers, as its tables print them: the columns our measurements are set beside.

    TABLE1       per layer type: complexity per layer, sequential operations, maximum path length
    TABLE2       per model: training cost in FLOPs, and the time x GPUs x TFLOPS it was computed from
    TABLE3       per row (the presets of aiayn.config with the same names): parameters, dev PPL, dev BLEU

The rows' hyper-parameters are model presets and stay in aiayn.config; only the published results live here.
"""

from __future__ import annotations

from typing import NamedTuple

# Table 1: complexity per layer, sequential operations, maximum path length (n: length, d: width, k: kernel,
# r: neighbourhood of restricted self-attention).
TABLE1: dict[str, tuple[str, str, str]] = {
    "self-attention": ("O(n^2 d)", "O(1)", "O(1)"),
    "recurrent": ("O(n d^2)", "O(n)", "O(n)"),
    "convolutional": ("O(k n d^2)", "O(1)", "O(log_k n)"),
    "restricted": ("O(r n d)", "O(1)", "O(n/r)"),
}

# Table 2: training cost = training time x number of GPUs x sustained single-precision FLOPS per GPU (section 6.1).
P100_TFLOPS = 9.5  # the paper's figure for the P100; K80 2.8, K40 3.7, M40 6.0
TABLE2_GPUS = 8  # P100s (section 5.2)
TABLE2_HOURS = {"base": 12.0, "big": 3.5 * 24}  # 100K steps and 300K steps (section 5.2)
TABLE2_COST = {"base": 3.3e18, "big": 2.3e19}  # FLOPs, as Table 2 prints them


class Table3Row(NamedTuple):
    """One row of Table 3: parameters (millions; None where the paper leaves the cell blank), dev PPL, dev BLEU."""

    params_M: float | None
    ppl: float
    bleu: float


# Table 3 in the paper's order (EN-DE newstest2013, per subword token PPL, beam search BLEU, no averaging).
TABLE3: dict[str, Table3Row] = {name: Table3Row(*cells) for name, cells in {
    "base": (65, 4.92, 25.8), "A1": (None, 5.29, 24.9), "A2": (None, 5.00, 25.5), "A3": (None, 4.91, 25.8),
    "A4": (None, 5.01, 25.4), "B1": (58, 5.16, 25.1), "B2": (60, 5.01, 25.4), "C1": (36, 6.11, 23.7),
    "C2": (50, 5.19, 25.3), "C3": (80, 4.88, 25.5), "C4": (28, 5.75, 24.5), "C5": (168, 4.66, 26.0),
    "C6": (53, 5.12, 25.4), "C7": (90, 4.75, 26.2), "D1": (None, 5.77, 24.6), "D2": (None, 4.95, 25.5),
    "D3": (None, 4.67, 25.3), "D4": (None, 5.47, 25.7), "E": (None, 4.92, 25.7), "big": (213, 4.33, 26.4),
}.items()}
TABLE3_STEPS = {"big": "300K"}  # training steps of each row as the paper trained it; every other row: 100K
