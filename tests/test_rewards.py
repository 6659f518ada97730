"""Reward shaping against plain-Python references and hand-worked cases."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agentlab.metrics import sentence_bleu
from agentlab.rewards import (
    RewardShaping,
    diversity_penalty,
    floor_reward,
    shape_group_rewards,
    three_layer,
    zscore,
)


# ---------------------------------------------------------------------------------------------
# z-score
# ---------------------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-5, 5), min_size=1, max_size=30))
def test_zscore_matches_naive(rewards):
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
    expected = [(r - mean) / (std + 1e-6) for r in rewards]
    got = zscore(torch.tensor(rewards, dtype=torch.float64))
    assert torch.allclose(got, torch.tensor(expected, dtype=torch.float64), atol=1e-9)


def test_zscore_properties():
    z = zscore(torch.tensor([0.0, 1.0, 1.0, 0.2, -0.2]))
    assert abs(z.mean().item()) < 1e-6 and abs(z.std(unbiased=False).item() - 1) < 1e-4
    assert torch.equal(zscore(torch.ones(4)), torch.zeros(4))  # equal rewards: no signal
    assert zscore([1, 2, 3]).dtype == torch.float32
    assert zscore(torch.tensor([])).numel() == 0


# ---------------------------------------------------------------------------------------------
# Floor reward
# ---------------------------------------------------------------------------------------------
def naive_floor(rewards, completeness, G, floor, fail_threshold=0.0):
    out = list(rewards)
    lo, hi = min(rewards), max(rewards)
    for start in range(0, len(rewards), G):
        grp = rewards[start : start + G]
        comp = completeness[start : start + G]
        failed = all(r <= fail_threshold for r in grp) or (all(r == lo for r in grp) and hi > lo)
        best = max(comp)
        if failed and any(c < best for c in comp):
            for i in range(G):
                if comp[i] == best:
                    out[start + i] += floor
    return out


def test_floor_reward_by_hand():
    rewards = torch.tensor([0.0, 0.0, 0.0, 0.0,   # all failed: the two most complete get +0.1
                            0.0, 1.0, 0.0, 0.0,   # one success: untouched
                            -0.2, -0.4, -0.2, -0.3,  # all <= 0: most complete gets +0.1
                            0.0, 0.0, 0.0, 0.0])  # failed, but all equally complete: untouched
    completeness = torch.tensor([0.1, 0.5, 0.5, 0.2,
                                 0.9, 1.0, 0.0, 0.0,
                                 0.2, 0.9, 0.3, 0.1,
                                 0.4, 0.4, 0.4, 0.4])
    got = floor_reward(rewards, completeness, 4, 0.1)
    expected = rewards.clone()
    expected[[1, 2, 9]] += 0.1
    assert torch.allclose(got, expected)
    assert torch.equal(rewards[:4], torch.zeros(4))  # input not modified


def test_floor_reward_positive_failure_value():
    # Failure still earns a format reward of 0.1: a group all at the batch minimum has failed.
    rewards = torch.tensor([0.1, 0.1, 0.1, 1.1])
    got = floor_reward(rewards, torch.tensor([0.2, 0.7, 0.5, 1.0]), 2, 0.05)
    assert torch.allclose(got, torch.tensor([0.1, 0.15, 0.1, 1.1]))
    # But a batch where everyone got the same positive reward is left alone …
    same = torch.full((4,), 0.1)
    assert torch.equal(floor_reward(same, torch.tensor([0.2, 0.7, 0.5, 1.0]), 2, 0.05), same)
    # … unless fail_threshold says 0.1 is a failure.
    assert torch.allclose(
        floor_reward(same, torch.tensor([0.2, 0.7, 0.5, 1.0]), 2, 0.05, fail_threshold=0.1),
        torch.tensor([0.1, 0.15, 0.1, 0.15]),
    )


def test_floor_reward_matches_naive():
    rng = random.Random(0)
    for _ in range(300):
        G, n_groups = rng.randint(1, 5), rng.randint(1, 5)
        rewards = [rng.choice([0.0, 0.0, 1.0, -0.2, 0.1]) for _ in range(G * n_groups)]
        completeness = [rng.choice([0.0, 0.25, 0.5, 1.0]) for _ in range(G * n_groups)]
        floor, thr = rng.choice([0.05, 0.1, 0.0]), rng.choice([0.0, 0.1])
        got = floor_reward(torch.tensor(rewards), torch.tensor(completeness), G, floor, thr)
        ref = naive_floor(rewards, completeness, G, floor, thr)
        assert torch.allclose(got, torch.tensor(ref), atol=1e-6)


def test_floor_reward_errors():
    with pytest.raises(ValueError):
        floor_reward(torch.zeros(6), torch.zeros(6), 4, 0.1)


# ---------------------------------------------------------------------------------------------
# Diversity penalty
# ---------------------------------------------------------------------------------------------
def naive_diversity(texts, G, threshold, penalty):
    out = [0.0] * len(texts)
    for i in range(len(texts)):
        start = (i // G) * G
        for j in range(start, start + G):
            if j == i:
                continue
            sim = max(sentence_bleu(texts[i], [texts[j]]), sentence_bleu(texts[j], [texts[i]]))
            if sim >= threshold:
                out[i] = penalty
    return out


def test_diversity_penalty_by_hand():
    texts = [
        "search(capital of France)", "search(capital of France)", "guess(8)", "answer(Paris)",
        "guess(8)", "guess(9)", "read(doc 1)", "search(x)",  # "guess(8)" only repeats across groups
    ]
    got = diversity_penalty(texts, 4, threshold=0.8, penalty=0.2)
    assert got.tolist() == pytest.approx([0.2, 0.2, 0, 0, 0, 0, 0, 0])
    assert torch.equal(diversity_penalty(texts, 4, 0.8, 0.0), torch.zeros(8))


def test_diversity_penalty_matches_naive():
    rng = random.Random(1)
    words = ["guess", "(", "8", ")", "search", "the", "capital", "answer"]
    for _ in range(40):
        G, n_groups = rng.randint(1, 4), rng.randint(1, 3)
        pool = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 6))) for _ in range(3)]
        texts = [rng.choice(pool) if rng.random() < 0.5 else " ".join(rng.choice(words) for _ in range(5))
                 for _ in range(G * n_groups)]
        thr = rng.choice([0.3, 0.6, 0.8, 1.0])
        got = diversity_penalty(texts, G, thr, 0.1)
        assert torch.allclose(got, torch.tensor(naive_diversity(texts, G, thr, 0.1)))


def test_diversity_penalty_errors():
    with pytest.raises(ValueError):
        diversity_penalty(["a", "b", "c"], 2, 0.8, 0.1)


# ---------------------------------------------------------------------------------------------
# Three-layer reward
# ---------------------------------------------------------------------------------------------
def test_three_layer():
    assert three_layer(1.0, 0.5, 1.0) == pytest.approx(0.6 + 0.15 + 0.1)
    assert three_layer(0.0, 1.0, 1.0) < three_layer(1.0, 0.0, 0.0)  # the outcome dominates
    got = three_layer(torch.tensor([1.0, 0.0]), torch.tensor([0.5, 1.0]), torch.tensor([1.0, 0.0]), (0.5, 0.5, 0.0))
    assert torch.allclose(got, torch.tensor([0.75, 0.5]))
    with pytest.raises(ValueError):
        three_layer(1.0, 1.0, 1.0, (0.5, 0.5))


# ---------------------------------------------------------------------------------------------
# The whole shaping step
# ---------------------------------------------------------------------------------------------
def test_shape_group_rewards_all_off_is_identity():
    rewards = torch.tensor([1, 0, 0, 1])
    shaped, info = shape_group_rewards(rewards, None, 2, RewardShaping())
    assert torch.equal(shaped, torch.tensor([1.0, 0.0, 0.0, 1.0]))
    assert info["floor_groups"] == 0 and info["near_duplicates"] == 0
    assert info["reward_raw_mean"] == 0.5


def test_shape_group_rewards_combined_matches_steps():
    rewards = torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0])
    completeness = torch.tensor([0.2, 0.8, 0.4, 0.4, 1.0, 0.3, 1.0, 0.1])
    texts = ["guess(1)", "guess(2)", "guess(3)", "guess(4)", "guess(5)", "guess(6)", "guess(5)", "guess(7)"]
    cfg = RewardShaping(zscore=True, floor_reward=0.1, diversity_penalty=0.05, diversity_threshold=1.0)
    shaped, info = shape_group_rewards(rewards, texts, 4, cfg, completeness=completeness)
    step = floor_reward(rewards, completeness, 4, 0.1)
    step = step - diversity_penalty(texts, 4, 1.0, 0.05)
    assert torch.allclose(shaped, zscore(step))
    assert info["floor_groups"] == 1 and info["near_duplicates"] == 2
    assert abs(shaped.mean().item()) < 1e-6
    # each switch alone, via dataclasses.replace as the notebooks do
    only_floor = dataclasses.replace(cfg, zscore=False, diversity_penalty=0.0)
    shaped, _ = shape_group_rewards(rewards, texts, 4, only_floor, completeness=completeness)
    assert torch.allclose(shaped, floor_reward(rewards, completeness, 4, 0.1))


def test_shape_group_rewards_missing_inputs_are_clear_errors():
    with pytest.raises(ValueError, match="completeness"):
        shape_group_rewards(torch.zeros(4), None, 2, RewardShaping(floor_reward=0.1))
    with pytest.raises(ValueError, match="texts"):
        shape_group_rewards(torch.zeros(4), None, 2, RewardShaping(diversity_penalty=0.1))
    with pytest.raises(ValueError, match="groups"):
        shape_group_rewards(torch.zeros(5), None, 2, RewardShaping())
