"""Sampling: greedy, temperature, top-k, top-p, per-request seeds."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from engine.core.request import SamplingParams  # noqa: E402
from engine.sampler import Sampler, filter_logits, inverse_cdf_sample  # noqa: E402

GREEDY = SamplingParams(temperature=0.0)


def test_greedy_takes_the_argmax_of_each_row() -> None:
    logits = torch.tensor([[0.1, 2.0, -1.0], [3.0, 0.0, 2.9]])
    assert Sampler(seed=0).sample(logits, ["a", "b"], [GREEDY, GREEDY]) == [1, 0]


def test_top_k_keeps_the_k_largest() -> None:
    out = filter_logits(torch.tensor([1.0, 4.0, 3.0, 2.0]), top_k=2, top_p=1.0)
    assert torch.isinf(out).tolist() == [True, False, False, True]


def test_top_p_keeps_the_smallest_nucleus_reaching_p() -> None:
    # probabilities 0.5, 0.3, 0.2: p = 0.7 needs the first two, p = 0.45 only the first
    logits = torch.tensor([0.5, 0.3, 0.2]).log()
    assert torch.isinf(filter_logits(logits, top_k=0, top_p=0.7)).tolist() == [False, False, True]
    assert torch.isinf(filter_logits(logits, top_k=0, top_p=0.45)).tolist() == [False, True, True]


def test_a_seeded_request_draws_the_same_tokens_whatever_its_batch() -> None:
    params = SamplingParams(temperature=1.0, seed=11)
    logits = torch.zeros(3, 50)  # uniform: every draw is up to the generator
    alone = [Sampler(seed=0).sample(logits[:1], ["r"], [params])[0]]
    sampler = Sampler(seed=5)
    crowded = sampler.sample(logits, ["x", "r", "y"], [SamplingParams(temperature=1.0), params, GREEDY])
    assert crowded[1] == alone[0]
    assert crowded[2] == 0


def test_unseeded_draws_follow_the_engine_seed() -> None:
    logits = torch.zeros(4, 1000)
    params = [SamplingParams(temperature=0.7, top_k=500, top_p=0.9)] * 4
    ids = ["a", "b", "c", "d"]
    assert Sampler(seed=1).sample(logits, ids, params) == Sampler(seed=1).sample(logits, ids, params)
    assert Sampler(seed=1).sample(logits, ids, params) != Sampler(seed=2).sample(logits, ids, params)


def test_sampling_respects_top_k() -> None:
    logits = torch.arange(100, dtype=torch.float32).repeat(64, 1)
    tokens = Sampler(seed=0).sample(logits, [str(i) for i in range(64)], [SamplingParams(top_k=3)] * 64)
    assert set(tokens) <= {97, 98, 99}


def test_inverse_cdf_draws_follow_the_probabilities_and_skip_zeros() -> None:
    probs = torch.tensor([0.5, 0.0, 0.3, 0.2, 0.0]).repeat(20000, 1)
    uniforms = torch.rand(20000, 1, generator=torch.Generator().manual_seed(3))
    counts = torch.bincount(inverse_cdf_sample(probs, uniforms), minlength=5) / 20000
    assert counts[1] == 0 and counts[4] == 0
    # 20,000 draws: a frequency's standard error is at most 0.0036; allow about 4 of them
    assert torch.allclose(counts, probs[0], atol=0.015)


def test_inverse_cdf_edges_pick_the_first_and_last_possible_tokens() -> None:
    probs = torch.tensor([[0.0, 0.25, 0.75, 0.0]] * 2)
    assert inverse_cdf_sample(probs, torch.tensor([[0.0], [0.999999]])).tolist() == [1, 2]
