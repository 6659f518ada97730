"""Vectorised advantages against plain-Python references, plus cases worked by hand."""

from __future__ import annotations

import math
import random
from typing import NamedTuple

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agentlab.advantages import (
    _discounted_cumsum_loop,
    discounted_cumsum,
    discounted_returns,
    gae,
    group_advantages,
    spread_to_tokens,
    zero_variance_fraction,
    zero_variance_mask,
)


# ---------------------------------------------------------------------------------------------
# Naive references: one episode at a time, Python floats, the formulas as written
# ---------------------------------------------------------------------------------------------
def naive_gae(rewards, values, lengths, gamma, lam, last_values=None):
    """A_t = Σ_k (γλ)^k δ_{t+k} by a direct double sum (not the recursion)."""
    B, T = len(rewards), len(rewards[0]) if rewards else 0
    adv = [[0.0] * T for _ in range(B)]
    ret = [[0.0] * T for _ in range(B)]
    for b in range(B):
        n = lengths[b]
        boot = 0.0 if last_values is None else last_values[b]
        v_next = [values[b][t + 1] if t + 1 < n else boot for t in range(n)]
        deltas = [rewards[b][t] + gamma * v_next[t] - values[b][t] for t in range(n)]
        for t in range(n):
            adv[b][t] = sum((gamma * lam) ** k * deltas[t + k] for k in range(n - t))
            ret[b][t] = adv[b][t] + values[b][t]
    return adv, ret


def naive_returns(rewards, lengths, gamma, last_values=None):
    B, T = len(rewards), len(rewards[0]) if rewards else 0
    out = [[0.0] * T for _ in range(B)]
    for b in range(B):
        n = lengths[b]
        g = 0.0 if last_values is None else last_values[b]
        for t in reversed(range(n)):
            g = rewards[b][t] + gamma * g
            out[b][t] = g
    return out


def random_batch(rng: random.Random, B: int, T: int, dtype=torch.float64):
    """Random rewards/values with garbage (even NaN) in padding, prefix masks of all lengths."""
    lengths = [rng.randint(0, T) for _ in range(B)]
    if B and T:
        lengths[0] = T  # always include one full row
    mask = torch.tensor([[1.0 if t < n else 0.0 for t in range(T)] for n in lengths], dtype=dtype).reshape(B, T)
    rewards = torch.tensor([[rng.uniform(-2, 2) for _ in range(T)] for _ in range(B)], dtype=dtype).reshape(B, T)
    values = torch.tensor([[rng.uniform(-2, 2) for _ in range(T)] for _ in range(B)], dtype=dtype).reshape(B, T)
    rewards = torch.where(mask.bool(), rewards, torch.full_like(rewards, float("nan")))
    values = torch.where(mask.bool(), values, torch.full_like(values, 99.0))
    return rewards, values, mask, lengths


def random_last_values(rng, B, dtype=torch.float64):
    """Truncated rows get a random V(s_T); terminated rows get 0 — or None (all terminated)."""
    if rng.random() < 0.3:
        return None
    return torch.tensor([rng.uniform(-2, 2) if rng.random() < 0.5 else 0.0 for _ in range(B)], dtype=dtype)


def clean(x: torch.Tensor, lengths) -> list[list[float]]:
    """Tensor to lists with padding replaced by 0 (the references leave padding at 0)."""
    return [[v if t < n else 0.0 for t, v in enumerate(row)] for row, n in zip(x.tolist(), lengths)]


GAMMAS = [0.0, 1.0, 0.9, 0.99]
LAMBDAS = [0.0, 1.0, 0.8, 0.95]


class Batch(NamedTuple):
    rewards: torch.Tensor
    values: torch.Tensor
    mask: torch.Tensor
    lengths: list[int]
    last_values: torch.Tensor | None
    gamma: float
    lam: float


def random_batches(seed: int, count: int, dtypes=(torch.float64,)):
    """``count`` random batches (`random_batch`, `random_last_values`) with a γ and a λ each, the
    edges 0 and 1 among them; the dtype cycles through ``dtypes``."""
    rng = random.Random(seed)
    for case in range(count):
        B, T, dtype = rng.randint(1, 6), rng.randint(0, 12), dtypes[case % len(dtypes)]
        rewards, values, mask, lengths = random_batch(rng, B, T, dtype)
        last = random_last_values(rng, B, dtype)
        yield Batch(rewards, values, mask, lengths, last, rng.choice(GAMMAS + [rng.random()]),
                    rng.choice(LAMBDAS + [rng.random()]))


def naive_gae_of(rewards, values, lengths, gamma, lam, last_values=None):
    """`naive_gae` on a padded batch of tensors: (advantages, returns) of the batch's shape and dtype."""
    adv, ret = naive_gae(clean(rewards, lengths), clean(values, lengths), lengths, gamma, lam,
                         None if last_values is None else last_values.tolist())
    return tuple(torch.tensor(x, dtype=rewards.dtype).reshape(rewards.shape) for x in (adv, ret))


# ---------------------------------------------------------------------------------------------
# GAE and returns
# ---------------------------------------------------------------------------------------------
def test_gae_worked_by_hand():
    # 3 turns, terminated after the last. rewards [0, 0, 1], values [.5, .6, .7], γ=0.9, λ=0.8
    #   δ2 = 1 + 0.9·0     − 0.7 = 0.30
    #   δ1 = 0 + 0.9·0.7   − 0.6 = 0.03
    #   δ0 = 0 + 0.9·0.6   − 0.5 = 0.04
    #   γλ = 0.72
    #   A2 = 0.30
    #   A1 = 0.03 + 0.72·0.30  = 0.246
    #   A0 = 0.04 + 0.72·0.246 = 0.21712
    #   R  = A + V = [0.71712, 0.846, 1.0]
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.6, 0.7]])
    adv, ret = gae(rewards, values, torch.ones(1, 3), gamma=0.9, gae_lambda=0.8)
    assert torch.allclose(adv, torch.tensor([[0.21712, 0.246, 0.30]]), atol=1e-6)
    assert torch.allclose(ret, torch.tensor([[0.71712, 0.846, 1.0]]), atol=1e-6)


def test_gae_truncated_by_hand():
    # Same episode, but truncated after turn 2 with V(s_3) = 0.5 bootstrapped:
    #   δ2 = 1 + 0.9·0.5 − 0.7 = 0.75
    #   A1 = 0.03 + 0.72·0.75 = 0.57
    #   A0 = 0.04 + 0.72·0.57 = 0.4504
    # A second row, terminated after 2 real turns of 3 (last_values 0 there):
    #   rewards [1, 1, pad], values [0, 0, pad], γ=0.9: δ1 = 1, δ0 = 1 + 0 − 0 = 1
    #   A1 = 1, A0 = 1 + 0.72·1 = 1.72
    rewards = torch.tensor([[0.0, 0.0, 1.0], [1.0, 1.0, 5.0]])
    values = torch.tensor([[0.5, 0.6, 0.7], [0.0, 0.0, 5.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    adv, ret = gae(rewards, values, mask, 0.9, 0.8, last_values=torch.tensor([0.5, 0.0]))
    assert torch.allclose(adv, torch.tensor([[0.4504, 0.57, 0.75], [1.72, 1.0, 0.0]]), atol=1e-6)
    assert torch.allclose(ret, torch.tensor([[0.9504, 1.17, 1.45], [1.72, 1.0, 0.0]]), atol=1e-6)


def test_gae_matches_naive_on_many_random_batches():
    for case, b in enumerate(random_batches(0, 300, dtypes=(torch.float32, torch.float64))):
        adv, ret = gae(b.rewards, b.values, b.mask, b.gamma, b.lam, last_values=b.last_values)
        ref_adv, ref_ret = naive_gae_of(b.rewards, b.values, b.lengths, b.gamma, b.lam, b.last_values)
        atol = 1e-9 if b.rewards.dtype == torch.float64 else 1e-4
        assert adv.dtype == b.rewards.dtype and adv.shape == ret.shape == b.rewards.shape
        assert torch.allclose(adv, ref_adv, atol=atol), case
        assert torch.allclose(ret, ref_ret, atol=atol), case
        assert not adv.isnan().any() and not ret.isnan().any()


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 8), min_size=1, max_size=5),
    gamma=st.floats(0, 1),
    lam=st.floats(0, 1),
    seed=st.integers(0, 10_000),
    truncated=st.booleans(),
)
def test_gae_matches_naive_hypothesis(lengths, gamma, lam, seed, truncated):
    g = torch.Generator().manual_seed(seed)
    B, T = len(lengths), max(lengths)
    mask = torch.tensor([[t < n for t in range(T)] for n in lengths]).reshape(B, T)
    rewards = torch.randn(B, T, generator=g, dtype=torch.float64)
    values = torch.randn(B, T, generator=g, dtype=torch.float64)
    last = torch.randn(B, generator=g, dtype=torch.float64) if truncated else None
    adv, ret = gae(rewards, values, mask, gamma, lam, last_values=last)
    ref_adv, ref_ret = naive_gae_of(rewards, values, lengths, gamma, lam, last)
    assert torch.allclose(adv, ref_adv, atol=1e-9)
    assert torch.allclose(ret, ref_ret, atol=1e-9)


def test_discounted_returns_match_naive():
    for case, b in enumerate(random_batches(1, 200)):
        got = discounted_returns(b.rewards, b.mask, b.gamma, last_values=b.last_values)
        last = None if b.last_values is None else b.last_values.tolist()
        ref = naive_returns(clean(b.rewards, b.lengths), b.lengths, b.gamma, last)
        assert torch.allclose(got, torch.tensor(ref, dtype=torch.float64).reshape(b.rewards.shape), atol=1e-9), case


def test_discounted_returns_by_hand():
    # rewards [1, 0, 2], γ = 0.5: G2 = 2, G1 = 0 + 0.5·2 = 1, G0 = 1 + 0.5·1 = 1.5
    # truncated with V = 4: G2 = 2 + 0.5·4 = 4, G1 = 2, G0 = 2
    r = torch.tensor([[1.0, 0.0, 2.0]])
    m = torch.ones(1, 3)
    assert torch.allclose(discounted_returns(r, m, 0.5), torch.tensor([[1.5, 1.0, 2.0]]))
    assert torch.allclose(discounted_returns(r, m, 0.5, torch.tensor([4.0])), torch.tensor([[2.0, 2.0, 4.0]]))


def test_gae_lambda_one_is_returns_minus_values():
    for b in random_batches(2, 50):
        adv, ret = gae(b.rewards, b.values, b.mask, b.gamma, 1.0, last_values=b.last_values)
        G = discounted_returns(b.rewards, b.mask, b.gamma, last_values=b.last_values)
        v = torch.where(b.mask.bool(), b.values, torch.zeros_like(b.values))
        assert torch.allclose(adv, G - v, atol=1e-9)
        assert torch.allclose(ret, G, atol=1e-9)


def test_gae_lambda_zero_is_one_step_td():
    for b in random_batches(3, 50):
        adv, _ = gae(b.rewards, b.values, b.mask, b.gamma, 0.0, last_values=b.last_values)
        r, v = clean(b.rewards, b.lengths), clean(b.values, b.lengths)
        for row, n in enumerate(b.lengths):
            boot = 0.0 if b.last_values is None else b.last_values[row].item()
            for t in range(n):
                expected = r[row][t] + b.gamma * (v[row][t + 1] if t + 1 < n else boot) - v[row][t]
                assert math.isclose(adv[row, t].item(), expected, abs_tol=1e-9)
            assert not adv[row, n:].any()  # padding


def test_gae_gamma_zero_ignores_the_future():
    # γ = 0: A_t = r_t − V(s_t) whatever λ and the bootstrap
    rewards, values = torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([[0.5, 0.5, 0.5]])
    adv, _ = gae(rewards, values, torch.ones(1, 3), 0.0, 0.95, last_values=torch.tensor([10.0]))
    assert torch.allclose(adv, torch.tensor([[0.5, 1.5, 2.5]]))


def test_terminated_equals_truncated_with_zero_value():
    rng = random.Random(4)
    rewards, values, mask, _ = random_batch(rng, 4, 6)
    a1, r1 = gae(rewards, values, mask, 0.9, 0.9)
    a2, r2 = gae(rewards, values, mask, 0.9, 0.9, last_values=torch.zeros(4, dtype=torch.float64))
    assert torch.equal(a1, a2) and torch.equal(r1, r2)


def test_padding_is_zero_and_inputs_untouched():
    rewards = torch.tensor([[1.0, float("nan"), float("inf")]])
    values = torch.tensor([[0.2, float("nan"), 7.0]])
    before = (rewards.clone(), values.clone())
    adv, ret = gae(rewards, values, torch.tensor([[1, 0, 0]]), 0.99, 0.95)
    assert torch.allclose(adv, torch.tensor([[0.8, 0.0, 0.0]]))
    assert torch.allclose(ret, torch.tensor([[1.0, 0.0, 0.0]]))
    assert torch.equal(rewards.isnan(), before[0].isnan()) and torch.equal(values[:, 2], before[1][:, 2])


def test_errors_are_clear():
    r = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="prefix"):
        gae(r, r, torch.tensor([[1, 0, 1], [1, 1, 1]]), 0.9, 0.9)
    with pytest.raises(ValueError, match="mask shape"):
        gae(r, r, torch.ones(2, 4), 0.9, 0.9)
    with pytest.raises(ValueError, match="last_values"):
        gae(r, r, torch.ones(2, 3), 0.9, 0.9, last_values=torch.zeros(3))
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        discounted_returns(torch.zeros(3), torch.ones(3), 0.9)


def test_discounted_cumsum_in_blocks_equals_the_loop():
    """Every length around the block size and its powers (1 block, padding, nested blocks)."""
    g = torch.Generator().manual_seed(5)
    for T in [1, 2, 15, 16, 17, 31, 33, 255, 256, 257, 300, 1100]:
        for d in [0.0, 0.3, 0.95, 1.0]:
            x = torch.randn(3, T, generator=g, dtype=torch.float64)
            y = discounted_cumsum(x, d)
            assert y.shape == x.shape and y.dtype == x.dtype
            assert torch.allclose(y, _discounted_cumsum_loop(x, d), atol=1e-9), (T, d)
    x = torch.randn(2, 1100, generator=g, dtype=torch.float64)
    ref = naive_returns(x.tolist(), [1100, 1100], 0.99)
    assert torch.allclose(discounted_cumsum(x, 0.99), torch.tensor(ref, dtype=torch.float64), atol=1e-8)
    x32 = torch.randn(4, 256, generator=g)
    assert torch.allclose(discounted_cumsum(x32, 0.94), _discounted_cumsum_loop(x32.double(), 0.94).float(), atol=1e-4)


def test_benchmark_shape_matches_reference_rows():
    # the benchmark's size (1024 × 256) runs and agrees with the reference on a few rows
    g = torch.Generator().manual_seed(6)
    B, T = 1024, 256
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = torch.arange(T)[None, :] < lengths[:, None]
    rewards, values = torch.randn(B, T, generator=g), torch.randn(B, T, generator=g)
    last = torch.randn(B, generator=g) * (torch.rand(B, generator=g) < 0.5)
    adv, ret = gae(rewards, values, mask, 0.99, 0.95, last_values=last)
    rows = [0, 1, 511, 1023]
    ref_adv, _ = naive_gae_of(rewards[rows], values[rows], [int(lengths[i]) for i in rows], 0.99, 0.95, last[rows])
    assert torch.allclose(adv[rows], ref_adv, atol=1e-3)


def naive_group_advantages(rewards, G, scale, eps=1e-6):
    n = len(rewards)
    batch_mean = sum(rewards) / n
    batch_std = math.sqrt(sum((r - batch_mean) ** 2 for r in rewards) / n)
    out = []
    for start in range(0, n, G):
        grp = rewards[start : start + G]
        mean = sum(grp) / G
        std = math.sqrt(sum((r - mean) ** 2 for r in grp) / G)
        for r in grp:
            a = r - mean
            if scale == "group":
                a /= std + eps
            elif scale == "batch":
                a /= batch_std + eps
            out.append(a)
    return out


@settings(max_examples=80, deadline=None)
@given(
    G=st.integers(1, 8),
    n_groups=st.integers(1, 6),
    scale=st.sampled_from(["group", "batch", "none"]),
    data=st.data(),
)
def test_group_advantages_match_naive(G, n_groups, scale, data):
    rewards = data.draw(
        st.lists(st.sampled_from([0.0, 1.0, -0.2, 0.5]) | st.floats(-3, 3), min_size=G * n_groups, max_size=G * n_groups)
    )
    got = group_advantages(torch.tensor(rewards, dtype=torch.float64), G, scale=scale)
    ref = naive_group_advantages(rewards, G, scale)
    assert torch.allclose(got, torch.tensor(ref, dtype=torch.float64), atol=1e-6)


def test_group_advantages_mean_zero_unit_std():
    g = torch.Generator().manual_seed(7)
    rewards = torch.rand(64, generator=g, dtype=torch.float64)
    adv = group_advantages(rewards, 8, scale="group").view(8, 8)
    assert torch.allclose(adv.mean(dim=1), torch.zeros(8, dtype=torch.float64), atol=1e-9)
    assert torch.allclose(adv.std(dim=1, unbiased=False), torch.ones(8, dtype=torch.float64), atol=1e-4)
    for scale in ["batch", "none"]:
        adv = group_advantages(rewards, 8, scale=scale).view(8, 8)
        assert torch.allclose(adv.mean(dim=1), torch.zeros(8, dtype=torch.float64), atol=1e-9)
    none = group_advantages(rewards, 8, scale="none")
    batch = group_advantages(rewards, 8, scale="batch")
    assert torch.allclose(batch * (rewards.std(unbiased=False) + 1e-6), none)


def test_group_advantages_by_hand_and_zero_variance():
    # group [1, 0, 0, 0]: mean 0.25, std sqrt(3)/4 = 0.4330 → [1.7320, −0.5774 ×3]
    # group [1, 1, 1, 1]: all equal → advantage 0 (no gradient)
    adv = group_advantages([1.0, 0, 0, 0, 1, 1, 1, 1], 4)
    s = math.sqrt(3) / 4
    expected = torch.tensor([0.75 / s, -0.25 / s, -0.25 / s, -0.25 / s, 0, 0, 0, 0])
    assert torch.allclose(adv, expected, atol=1e-4)
    assert adv.dtype == torch.float32  # ints and lists become float


def test_group_advantages_errors():
    with pytest.raises(ValueError, match="multiple|whole number"):
        group_advantages(torch.zeros(10), 4)
    with pytest.raises(ValueError, match="scale"):
        group_advantages(torch.zeros(8), 4, scale="global")
    with pytest.raises(ValueError, match="1-D"):
        group_advantages(torch.zeros(2, 4), 4)


def test_zero_variance_fraction_and_mask():
    rng = random.Random(8)
    for _ in range(100):
        G, n_groups = rng.randint(1, 6), rng.randint(1, 6)
        rewards = [rng.choice([0.0, 1.0]) for _ in range(G * n_groups)]
        groups = [rewards[i : i + G] for i in range(0, len(rewards), G)]
        flags = [len(set(grp)) == 1 for grp in groups]
        assert math.isclose(zero_variance_fraction(rewards, G), sum(flags) / len(flags))
        mask = zero_variance_mask(torch.tensor(rewards), G)
        assert mask.tolist() == [f for f in flags for _ in range(G)]
    assert zero_variance_fraction([0.0, 1e-9, 1.0, 1.0], 2) == 0.5
    assert zero_variance_fraction([0.0, 1e-9, 1.0, 1.0], 2, atol=1e-6) == 1.0
    with pytest.raises(ValueError):
        zero_variance_fraction([0.0, 1.0, 1.0], 2)


# ---------------------------------------------------------------------------------------------
# Turns to tokens
# ---------------------------------------------------------------------------------------------
def test_spread_to_tokens_by_hand():
    turn_values = torch.tensor([[0.5, -1.0], [2.0, 3.0]])
    turn_index = torch.tensor([[-1, -1, 0, 0, -1, 1], [-1, 0, -1, 1, 1, -1]])
    got = spread_to_tokens(turn_values, turn_index)
    assert torch.equal(got, torch.tensor([[0, 0, 0.5, 0.5, 0, -1.0], [0, 2.0, 0, 3.0, 3.0, 0]]))
    assert torch.equal(spread_to_tokens(turn_values, turn_index, fill=-7.0)[0, :2], torch.tensor([-7.0, -7.0]))


def test_spread_to_tokens_matches_naive():
    rng = random.Random(9)
    for _ in range(100):
        B, T, L = rng.randint(1, 4), rng.randint(0, 5), rng.randint(0, 20)
        vals = [[rng.uniform(-1, 1) for _ in range(T)] for _ in range(B)]
        idx = [[rng.randint(-1, T - 1) for _ in range(L)] for _ in range(B)]
        got = spread_to_tokens(torch.tensor(vals).reshape(B, T), torch.tensor(idx, dtype=torch.long).reshape(B, L), fill=0.25)
        ref = [[vals[b][i] if i >= 0 else 0.25 for i in idx[b]] for b in range(B)]
        assert torch.allclose(got, torch.tensor(ref).reshape(B, L))


def test_spread_to_tokens_errors():
    with pytest.raises(ValueError, match="turn_index"):
        spread_to_tokens(torch.zeros(1, 2), torch.tensor([[0, 2]]))
    with pytest.raises(ValueError, match="expected"):
        spread_to_tokens(torch.zeros(2, 2), torch.tensor([[0, 1]]))
