"""The paper's published numbers, as its tables print them: the columns our measurements are set beside.

    TABLE1       per layer type: complexity per layer, sequential operations, maximum path length
    TABLE2       per model: training cost in FLOPs, the time x GPUs x TFLOPS it was computed from, and test BLEU
    TABLE3       per row (the presets of aiayn.config with the same names): parameters, dev PPL, dev BLEU
    TABLE4       English constituency parsing, WSJ section 23 F1: the Transformer's two rows and the references
    FIGURES      what the appendix's attention figures show, in words

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
TABLE2_STEPS = {"base": 100_000, "big": 300_000}  # training steps (section 5.2)
TABLE2_TOKENS_PER_STEP = 25_000  # target tokens per batch (section 5.1)
TABLE2_BLEU = {"base": {"EN-DE": 27.3, "EN-FR": 38.1}, "big": {"EN-DE": 28.4, "EN-FR": 41.8}}  # newstest2014


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

# Table 4: English constituency parsing, F1 on WSJ section 23 (section 6.3): parser, training data, F1.
TABLE4: list[tuple[str, str, float]] = [
    ("Vinyals & Kaiser et al. (2014)", "WSJ only, discriminative", 88.3),
    ("Petrov et al. (2006)", "WSJ only, discriminative", 90.4),
    ("Zhu et al. (2013)", "WSJ only, discriminative", 90.4),
    ("Dyer et al. (2016)", "WSJ only, discriminative", 91.7),
    ("Transformer (4 layers)", "WSJ only, discriminative", 91.3),
    ("Transformer (4 layers)", "semi-supervised", 92.7),
]
TABLE4_TRAIN_SENTENCES = {"WSJ only, discriminative": 40_000, "semi-supervised": 17_000_000}  # ~, section 6.3

# The appendix's attention figures, with the sentences they show: encoder self-attention in layer 5 of 6.
FIGURES_LAYER = (5, 6)
FIGURES: dict[str, tuple[str, str, str]] = {  # name: (sentence, word whose attention is drawn, what the paper shows)
    "figure3": ("It is in this spirit that a majority of American governments have passed new laws since 2009 making "
                "the registration or voting process more difficult .", "making",
                "many heads attend from 'making' to the distant 'more difficult', completing the phrase"),
    "figure4": ("The Law will never be perfect , but its application should be just - this is what we are missing , "
                "in my opinion .", "its",
                "two heads apparently involved in anaphora resolution: sharp attention from 'its' to 'Law'"),
    "figure5": ("The Law will never be perfect , but its application should be just - this is what we are missing , "
                "in my opinion .", "",
                "different heads learn different tasks, related to the structure of the sentence"),
}
