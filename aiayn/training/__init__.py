"""Training: the trainer and what only it needs.

Reading guide (lowest first):
    packed.py      packed batches (`train --packed`): sentences in a stream without padding, their attention
    losses.py      the label-smoothed loss: formula and its kernels; TrainingObjective
    checkpoint.py  the checkpoint files' format alone: weights, trainer state, headers, shape checks, averaging
    selection.py   which checkpoint is best: dev loss, BLEU, chrF; early stopping
    train.py       TrainConfig; train() / resume() around one loop

Nothing is imported here: each module is imported by name.
"""
