"""Tests of agentlab.metrics: diagnostics against plain-Python references and hand-worked values."""

from __future__ import annotations

import math
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agentlab.metrics import (
    action_distribution,
    active_alarms,
    approx_kl,
    clip_fraction,
    diversity_collapse,
    entropy_collapse,
    entropy_from_logits,
    entropy_from_logp,
    episode_metrics,
    explained_variance,
    group_self_bleu,
    invalid_rate,
    kl_k3,
    kl_spike,
    masked_mean,
    mean_components,
    mean_return,
    mean_turns,
    pass_at_k,
    self_bleu,
    sentence_bleu,
    shortcut,
    step_level_rates,
    success_rate,
    tokenize,
    wilson_interval,
)
from agentlab.rollout import Trajectory


# ---------------------------------------------------------------------------------------------
# Reductions and episode metrics
# ---------------------------------------------------------------------------------------------
def test_masked_mean_matches_naive():
    rng = random.Random(0)
    for _ in range(100):
        B, L = rng.randint(1, 5), rng.randint(1, 9)
        x = [[rng.uniform(-3, 3) for _ in range(L)] for _ in range(B)]
        m = [[rng.random() < 0.5 for _ in range(L)] for _ in range(B)]
        kept = [x[b][i] for b in range(B) for i in range(L) if m[b][i]]
        got = masked_mean(torch.tensor(x, dtype=torch.float64), torch.tensor(m))
        assert math.isclose(got.item(), sum(kept) / len(kept) if kept else 0.0, abs_tol=1e-12)
        rows = masked_mean(torch.tensor(x, dtype=torch.float64), torch.tensor(m), dim=1)
        for b in range(B):
            kept_b = [x[b][i] for i in range(L) if m[b][i]]
            assert math.isclose(rows[b].item(), sum(kept_b) / len(kept_b) if kept_b else 0.0, abs_tol=1e-12)


def test_masked_mean_ignores_nan_in_masked_out_positions():
    x = torch.tensor([1.0, float("nan"), 3.0])
    assert masked_mean(x, torch.tensor([1, 0, 1])).item() == 2.0
    assert masked_mean(x, torch.tensor([0, 0, 0])).item() == 0.0
    assert masked_mean(torch.tensor([1.0, 2.0])).item() == 1.5


def test_episode_metrics():
    assert success_rate([True, False, True, True]) == 0.75
    assert math.isnan(success_rate([]))
    assert mean_return([1.0, [0.5, 0.5, -1.0], torch.tensor([2.0, 1.0])]) == pytest.approx(4.0 / 3)
    assert mean_turns([1, 2, 3, 6]) == 3.0
    assert invalid_rate([True, True, False, True]) == 0.25
    assert mean_components([{"correct": 1.0, "format": -0.1}, {"correct": 0.0}]) == pytest.approx(
        {"correct": 0.5, "format": -0.05}
    )


def test_action_distribution():
    dist = action_distribution(["guess", "guess", None, "search"])
    assert dist == {"guess": 0.5, "none": 0.25, "search": 0.25}
    assert list(dist) == ["guess", "none", "search"]  # most used first, ties alphabetical
    assert action_distribution([]) == {}
    rng = random.Random(1)
    tools = [rng.choice(["a", "b", "c", None]) for _ in range(500)]
    dist = action_distribution(tools)
    assert math.isclose(sum(dist.values()), 1.0)
    assert dist["a"] == tools.count("a") / 500


def test_step_level_rates():
    checks = [
        {"read_after_search": True, "query_relevant": False},
        {"read_after_search": None, "query_relevant": True},
        {"read_after_search": False},
        {},
    ]
    # read_after_search applied on steps 0 and 2 (1 of 2 passed); query_relevant on 0 and 1
    assert step_level_rates(checks) == {"query_relevant": 0.5, "read_after_search": 0.5}
    assert step_level_rates([]) == {}


def test_episode_metrics_of_a_batch_match_the_single_metrics():
    def episode(rewards, success, infos, actions):
        return Trajectory(env_id="agentlab/GuessNumber-v0", task_id="t", rewards=rewards, success=success,
                          infos=infos, actions=actions, components=[{"correct": r} for r in rewards])

    trajs = [
        episode([0.1, 1.0], True, [{"valid": True, "tool": "guess", "checks": {"consistent": True}},
                                   {"valid": True, "tool": "guess", "checks": {}}], ["guess(8)", "guess(4)"]),
        episode([-0.1], False, [{"valid": False, "tool": None, "checks": None}], ["hello"]),
        episode([0.5], False, [{"tool": "guess"}], ["guess(8)"]),  # hand-built: no "valid", no "checks"
        episode([0.0], False, [{"valid": True, "tool": "guess", "checks": {"consistent": False}}], ["guess(2)"]),
    ]
    m = episode_metrics(trajs, group_size=2)
    assert list(m)[:5] == ["success_rate", "mean_return", "mean_turns", "invalid_rate", "self_bleu"]
    assert m["success_rate"] == 0.25 and m["mean_turns"] == 1.25
    assert m["mean_return"] == pytest.approx((1.1 - 0.1 + 0.5 + 0.0) / 4)
    assert m["invalid_rate"] == 0.2  # the info without "valid" counts as valid
    assert m["self_bleu"] == group_self_bleu(["guess(8)\nguess(4)", "hello", "guess(8)", "guess(2)"], 2)
    assert m["reward/correct"] == m["mean_return"]
    assert m["action/guess"] == 0.8 and m["action/none"] == 0.2
    assert m["step/consistent"] == 0.5  # over the two steps that carried the check
    assert "self_bleu" not in episode_metrics(trajs)
    empty = episode_metrics([])
    assert math.isnan(empty["success_rate"]) and math.isnan(empty["invalid_rate"]) and len(empty) == 4


# ---------------------------------------------------------------------------------------------
# Entropy, KL, clipping, explained variance
# ---------------------------------------------------------------------------------------------
def naive_entropy(row):
    m = max(row)
    z = sum(math.exp(v - m) for v in row)
    ps = [math.exp(v - m) / z for v in row]
    return -sum(p * math.log(p) for p in ps if p > 0)


def test_entropy_matches_naive_and_limits():
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(3, 4, 11, generator=g, dtype=torch.float64) * 3
    ent = entropy_from_logits(logits)
    assert ent.shape == (3, 4)
    for i in range(3):
        for j in range(4):
            assert math.isclose(ent[i, j].item(), naive_entropy(logits[i, j].tolist()), abs_tol=1e-9)
    assert math.isclose(entropy_from_logits(torch.zeros(50)).item(), math.log(50), rel_tol=1e-6)
    peaked = torch.tensor([0.0, float("-inf"), float("-inf")])  # one-hot, with -inf logits
    assert entropy_from_logits(peaked).item() == 0.0
    logp = torch.log_softmax(logits, dim=-1)
    assert torch.equal(entropy_from_logp(logp), ent)
    assert entropy_from_logp(torch.log_softmax(peaked, dim=-1)).item() == 0.0  # 0 · log 0 = 0, not NaN


def test_k3_is_nonnegative_zero_at_equality_and_matches_naive():
    g = torch.Generator().manual_seed(3)
    logp = torch.randn(4, 7, generator=g, dtype=torch.float64) - 2
    old = logp + 0.3 * torch.randn(4, 7, generator=g, dtype=torch.float64)
    mask = torch.rand(4, 7, generator=g) < 0.6
    k3 = kl_k3(logp, old)
    assert (k3 >= 0).all()
    assert kl_k3(logp, logp).abs().max() == 0
    naive = [
        (math.exp(o - lp) - 1) - (o - lp)
        for lp_row, o_row, m_row in zip(logp.tolist(), old.tolist(), mask.tolist())
        for lp, o, m in zip(lp_row, o_row, m_row)
        if m
    ]
    assert math.isclose(approx_kl(logp, old, mask).item(), sum(naive) / len(naive), rel_tol=1e-9)


def test_k3_estimates_kl_pi_to_ref_from_samples_of_pi():
    # Sample tokens from π; the mean of k3 with r = π_ref/π is KL(π ‖ π_ref).
    g = torch.Generator().manual_seed(4)
    pi = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)
    ref = torch.tensor([0.25, 0.25, 0.25, 0.25], dtype=torch.float64)
    tokens = torch.multinomial(pi, 200_000, replacement=True, generator=g)
    estimate = approx_kl(pi.log()[tokens], ref.log()[tokens]).item()
    exact = (pi * (pi / ref).log()).sum().item()
    assert abs(estimate - exact) < 0.01


def test_clip_fraction_matches_naive():
    g = torch.Generator().manual_seed(5)
    ratio = torch.exp(0.3 * torch.randn(6, 9, generator=g))
    mask = torch.rand(6, 9, generator=g) < 0.7
    flags = [abs(r - 1) > 0.2 for r, m in zip(ratio.flatten().tolist(), mask.flatten().tolist()) if m]
    assert math.isclose(clip_fraction(ratio, 0.2, mask).item(), sum(flags) / len(flags), rel_tol=1e-6)
    assert clip_fraction(torch.ones(3, 3), 0.2).item() == 0.0


def test_explained_variance():
    g = torch.Generator().manual_seed(6)
    ret = torch.randn(5, 8, generator=g, dtype=torch.float64)
    mask = torch.rand(5, 8, generator=g) < 0.7
    assert explained_variance(ret, ret, mask) == pytest.approx(1.0)
    assert explained_variance(torch.full_like(ret, 3.0), ret) == pytest.approx(0.0, abs=1e-12)
    values = ret + 0.5 * torch.randn(5, 8, generator=g, dtype=torch.float64)
    r = [x for x, m in zip(ret.flatten().tolist(), mask.flatten().tolist()) if m]
    d = [x - v for x, v, m in zip(ret.flatten().tolist(), values.flatten().tolist(), mask.flatten().tolist()) if m]

    def var(xs):
        mu = sum(xs) / len(xs)
        return sum((x - mu) ** 2 for x in xs) / len(xs)

    assert explained_variance(values, ret, mask) == pytest.approx(1 - var(d) / var(r))
    assert math.isnan(explained_variance(torch.zeros(4), torch.ones(4)))


# ---------------------------------------------------------------------------------------------
# BLEU and Self-BLEU
# ---------------------------------------------------------------------------------------------
def naive_tokenize(text):
    tokens, word = [], ""
    for ch in text:
        if ch.isalnum() or ch == "_":
            word += ch
            continue
        if word:
            tokens.append(word)
            word = ""
        if not ch.isspace():
            tokens.append(ch)
    if word:
        tokens.append(word)
    return tokens


def naive_bleu(hyp, refs, max_n=4):
    hyp = naive_tokenize(hyp)
    refs = [naive_tokenize(r) for r in refs]
    if not hyp or not refs:
        return 0.0
    logs = 0.0
    for n in range(1, max_n + 1):
        hyp_grams = [hyp[i : i + n] for i in range(len(hyp) - n + 1)]
        matched = 0
        for gram in {tuple(x) for x in hyp_grams}:
            count = sum(1 for x in hyp_grams if tuple(x) == gram)
            best = 0
            for ref in refs:
                ref_count = sum(1 for i in range(len(ref) - n + 1) if tuple(ref[i : i + n]) == gram)
                best = max(best, ref_count)
            matched += min(count, best)
        total = len(hyp_grams)
        if n >= 2:
            matched, total = matched + 1, total + 1
        if matched == 0:
            return 0.0
        logs += math.log(matched / total) / max_n
    c = len(hyp)
    best_r = None
    for ref in refs:
        r = len(ref)
        if best_r is None or abs(r - c) < abs(best_r - c) or (abs(r - c) == abs(best_r - c) and r < best_r):
            best_r = r
    bp = 1.0 if c > best_r else math.exp(1 - best_r / c)
    return bp * math.exp(logs)


def naive_self_bleu(texts, max_n=4):
    scores = []
    for i in range(len(texts)):
        others = [texts[j] for j in range(len(texts)) if j != i]
        scores.append(naive_bleu(texts[i], others, max_n))
    return sum(scores) / len(scores)


def test_tokenize():
    assert tokenize("guess(8) now!") == ["guess", "(", "8", ")", "now", "!"]
    assert tokenize("  a_b  c\td\n") == ["a_b", "c", "d"]
    assert tokenize("") == []


def test_bleu_by_hand():
    # Clipping (Papineni et al.): 7 × "the" against a reference with two "the" → p1 = 2/7.
    # Every bigram "the the" is unmatched: p2..p4 = (0+1)/(6+1), (0+1)/(5+1), (0+1)/(4+1).
    # c = 7 > r = 6, so BP = 1.
    got = sentence_bleu("the the the the the the the", ["the cat is on the mat"])
    expected = math.exp((math.log(2 / 7) + math.log(1 / 7) + math.log(1 / 6) + math.log(1 / 5)) / 4)
    assert got == pytest.approx(expected)
    # brevity penalty: "a b" against "a b c d": all precisions 1, BP = exp(1 − 4/2) = e^−1
    assert sentence_bleu("a b", ["a b c d"]) == pytest.approx(math.exp(-1))
    # multiple references: the closest length (shorter on a tie) sets r; counts clip to the max
    assert sentence_bleu("a b c", ["a b", "x y z w"]) == pytest.approx(naive_bleu("a b c", ["a b", "x y z w"]))


def test_bleu_identical_disjoint_and_bounds():
    assert sentence_bleu("search(capital of France)", ["search(capital of France)"]) == pytest.approx(1.0)
    assert sentence_bleu("x", ["x"]) == pytest.approx(1.0)  # shorter than 4 tokens still scores 1
    assert sentence_bleu("alpha beta", ["gamma delta"]) == 0.0
    assert sentence_bleu("", ["a"]) == 0.0 and sentence_bleu("a", []) == 0.0


def test_bleu_matches_naive_on_random_texts():
    rng = random.Random(8)
    vocab = ["guess", "(", ")", "8", "search", "the", "a", "b", "!", "answer"]
    for _ in range(300):
        def text():
            return " ".join(rng.choice(vocab) for _ in range(rng.randint(0, 10)))

        hyp, refs = text(), [text() for _ in range(rng.randint(1, 4))]
        max_n = rng.randint(1, 4)
        got = sentence_bleu(hyp, refs, max_n)
        assert got == pytest.approx(naive_bleu(hyp, refs, max_n), abs=1e-12)
        assert 0.0 <= got <= 1.0 + 1e-12


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet="ab c(),", max_size=20), min_size=2, max_size=5))
def test_self_bleu_matches_naive_hypothesis(texts):
    assert self_bleu(texts) == pytest.approx(naive_self_bleu(texts), abs=1e-12)


def test_self_bleu_identical_disjoint_and_groups():
    same = ["think: halve the range\nguess(8)"] * 4
    assert self_bleu(same) == pytest.approx(1.0)
    disjoint = ["alpha beta gamma", "delta epsilon zeta", "eta theta iota"]
    assert self_bleu(disjoint) == pytest.approx(0.0)
    assert math.isnan(self_bleu(["only one"]))
    assert group_self_bleu(same + disjoint[:2] + ["lambda mu", "nu xi"], 4) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        group_self_bleu(["a", "b", "c"], 2)


# ---------------------------------------------------------------------------------------------
# Wilson interval and pass@k
# ---------------------------------------------------------------------------------------------
def test_wilson_interval():
    lo, hi = wilson_interval(5, 10)
    assert (lo, hi) == pytest.approx((0.2366, 0.7634), abs=1e-4)  # textbook value
    assert wilson_interval(0, 0) == (0.0, 1.0)
    lo, hi = wilson_interval(0, 20)
    assert lo == 0.0 and 0 < hi < 0.2
    lo, hi = wilson_interval(20, 20)
    assert hi == pytest.approx(1.0) and 0.8 < lo < 1
    rng = random.Random(9)
    for _ in range(200):
        n = rng.randint(1, 500)
        k = rng.randint(0, n)
        lo, hi = wilson_interval(k, n)
        assert 0.0 <= lo <= k / n <= hi <= 1.0
        lo2, hi2 = wilson_interval(4 * k, 4 * n)  # same rate, four times the data
        assert hi2 - lo2 < hi - lo
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def test_pass_at_k_matches_combinatorial_formula():
    for n in range(1, 25):
        for c in range(0, n + 1):
            for k in range(1, n + 1):
                exact = 1 - math.comb(n - c, k) / math.comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)
            assert pass_at_k(n, c, 1) == pytest.approx(c / n)
    assert pass_at_k(200, 0, 10) == 0.0
    assert pass_at_k(200, 1, 200) == 1.0
    assert pass_at_k(1000, 3, 100) == pytest.approx(1 - math.comb(997, 100) / math.comb(1000, 100))
    with pytest.raises(ValueError):
        pass_at_k(5, 6, 1)
    with pytest.raises(ValueError):
        pass_at_k(5, 2, 0)


# ---------------------------------------------------------------------------------------------
# Alarms over metric histories
# ---------------------------------------------------------------------------------------------
def test_alarm_functions_on_synthetic_histories():
    nan = math.nan
    assert entropy_collapse([1.2, 1.1, 1.2, 0.9, 0.3, 0.2, 0.1])
    assert not entropy_collapse([1.2, 1.1, 1.2, 1.0, 0.9, 1.0])
    assert entropy_collapse([0.01, 0.02, 0.01])  # under the floor from the start
    assert not entropy_collapse([nan, 1.0, nan])  # too little data
    assert diversity_collapse([0.2, 0.3, 0.7, 0.75, 0.8])
    assert not diversity_collapse([0.2, 0.8, 0.2, 0.3])
    turns_down = [5.0] * 5 + [4, 3.5, 3, 2.5] + [2.0] * 5
    assert shortcut(turns_down, [0.4] * 14)  # shorter, success flat: shortcut
    assert not shortcut(turns_down, [0.4] * 5 + [0.5, 0.6, 0.7, 0.8] + [0.9] * 5)  # got efficient
    assert not shortcut([5.0] * 14, [0.4] * 14)
    assert not shortcut(turns_down[:6], [0.4] * 6)
    assert active_alarms({"entropy": [1, 1, 1, 0.1, 0.1, 0.1], "self_bleu": [0.1] * 5}) == ["entropy_collapse"]
    assert active_alarms({}) == []
    assert kl_spike([0.002, 0.01, 2.5, 0.006]) and not kl_spike([0.002, 0.09, nan, 0.01])
    assert active_alarms({"approx_kl": [0.01, 0.87], "entropy": [0.2] * 6}) == ["kl_spike"]
