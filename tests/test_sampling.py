"""Sampling's draws (aiayn.decoding.sampling): sample_from's rules on log-probs given directly, and the per-line
generators. What the draws give through sample_search (the distribution, top-k, top-p, temperature, scores, batches) is
tested in tests/test_search.py with a scripted model."""

import torch

from aiayn.decoding.sampling import sample_from, sentence_generator


def close(freqs, expect, tol=0.03):  # 3000 draws: a frequency's standard deviation is at most 0.009
    return all(abs(f - e) <= tol for f, e in zip(freqs, expect))


def test_a_temperature_past_float32_keeps_banned_tokens_banned():
    """Found by the server's fuzzing: temperature 3.4028235677973366e38 is inf in float32, and -inf / inf is NaN; a
    banned token (PAD, BOS, -inf) must stay banned and the others be drawn about evenly, with a top-k wider than V."""
    lprobs = torch.tensor([[float("-inf"), float("-inf"), -0.1, -2.0, -5.0]]).repeat(3000, 1)
    drawn = sample_from(lprobs, torch.rand(3000, generator=torch.Generator().manual_seed(0)), top_k=416,
                        temperature=3.4028235677973366e38)
    counts = torch.bincount(drawn, minlength=5).float() / 3000
    assert counts[:2].sum() == 0 and close(counts[2:].tolist(), [1 / 3] * 3)


def test_sample_from_by_inverse_cdf():
    """Uniforms in [0, 1) pick tokens by the cumulative probabilities, most probable first, ties by lower id."""
    lprobs = torch.tensor([0.1, 0.6, 0.3]).log()[None].repeat(4, 1)  # sorted: 1 (.6), 2 (.3), 0 (.1)
    assert sample_from(lprobs, torch.tensor([0.0, 0.59, 0.61, 0.95])).tolist() == [1, 1, 2, 0]
    assert sample_from(lprobs, torch.tensor([0.7, 0.95, 0.2, 0.5]), top_k=1).tolist() == [1, 1, 1, 1]
    assert sample_from(lprobs, torch.tensor([0.7, 0.95, 0.2, 0.5]), top_p=0.8).tolist() == [2, 2, 1, 1]


def test_a_line_draws_from_its_own_generator():
    """sentence_generator(seed, line) depends on the seed and the line's number alone."""
    draw = [torch.rand(4, generator=sentence_generator(seed, line)) for seed, line in ((1, 5), (1, 5), (1, 6), (2, 5))]
    assert torch.equal(draw[0], draw[1]) and not torch.equal(draw[0], draw[2]) and not torch.equal(draw[0], draw[3])
