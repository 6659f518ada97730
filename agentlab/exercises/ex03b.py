"""Exercises of notebook 03b (the policy gradient and KL): REINFORCE's estimate for a softmax
policy, and the k3 estimate of KL(π ‖ π_ref) per sample."""

from __future__ import annotations

import torch

from agentlab.exercises import Feedback, all_close, exercise, first_mismatch, floats
from agentlab.tensors import kl_k3 as _k3

# ---------------------------------------------------------------------------- REINFORCE


def _gradient_cases() -> list[tuple]:
    """(logits (K,), actions (N,), rewards (N,), baseline): softmax policies over 3 to 5 actions."""
    gen = torch.Generator().manual_seed(3)
    cases = []
    for k, n, baseline in [(3, 4, 0.0), (4, 6, 0.5), (5, 8, -0.3), (4, 5, 2.0)]:
        logits = torch.randn(k, generator=gen, dtype=torch.float64)
        actions = torch.randint(0, k, (n,), generator=gen)
        rewards = torch.rand(n, generator=gen, dtype=torch.float64) * 2 + 0.5  # all positive, so the sign shows
        cases.append((logits, actions, rewards, baseline))
    return cases


GRADIENT_CASES = _gradient_cases()


def _score(logits, actions):
    """∇_θ log π_θ(a_i) for a softmax over ``logits``: one-hot(a_i) − π, shape (N, K)."""
    probs = torch.softmax(logits, dim=-1)  # (K,)
    onehot = torch.nn.functional.one_hot(actions, logits.shape[-1]).to(logits.dtype)  # (N, K)
    return onehot - probs


def _reference_gradient(logits, actions, rewards, baseline=0.0):
    return ((rewards - baseline)[:, None] * _score(logits, actions)).mean(0)  # (K,)


# -- wrong answers (each is a mistake learners make; the check must name it)
def _gradient_no_baseline(logits, actions, rewards, baseline=0.0):
    return _reference_gradient(logits, actions, rewards, 0.0)


def _gradient_of_loss(logits, actions, rewards, baseline=0.0):
    return -_reference_gradient(logits, actions, rewards, baseline)  # the gradient of −J, the loss


def _gradient_sum(logits, actions, rewards, baseline=0.0):
    return _reference_gradient(logits, actions, rewards, baseline) * len(actions)


def _gradient_onehot_only(logits, actions, rewards, baseline=0.0):
    onehot = torch.nn.functional.one_hot(actions, logits.shape[-1]).to(logits.dtype)  # ∇ of the logit, not of log π
    return ((rewards - baseline)[:, None] * onehot).mean(0)


def _gradient_of_prob(logits, actions, rewards, baseline=0.0):
    p_a = torch.softmax(logits, dim=-1)[actions]  # (N,) ∇π(a) = π(a)·∇log π(a): the 1/π of the trick is missing
    return ((rewards - baseline)[:, None] * p_a[:, None] * _score(logits, actions)).mean(0)


def _call(fn, case) -> list[float]:
    logits, actions, rewards, baseline = case
    out = fn(logits.clone(), actions.clone(), rewards.clone(), baseline)
    got = floats(out)
    if len(got) != logits.shape[-1]:
        raise Feedback(f"return one number per action: {logits.shape[-1]} for logits of shape "
                       f"{tuple(logits.shape)}, you returned {len(got)}")
    return got


def _close(a, b) -> bool:
    return all_close(a, b, rel_tol=1e-5, abs_tol=1e-8)


@exercise("03b.reinforce_gradient",
          wrong=[_gradient_no_baseline, _gradient_of_loss, _gradient_sum, _gradient_onehot_only, _gradient_of_prob])
def check_reinforce_gradient(fn) -> str | None:
    """write reinforce_gradient(logits, actions, rewards, baseline=0.0) -> the (K,) score-function estimate
    (1/N) Σ_i (r_i − b) ∇_θ log π_θ(a_i) for π_θ = softmax(logits)"""
    return first_mismatch(GRADIENT_CASES, lambda case: _call(fn, case),
                          lambda case: floats(_reference_gradient(*case)), _close, _explain_gradient)


def _explain_gradient(case, got, expected) -> str:
    logits, actions, rewards, baseline = case
    candidates = [
        (_gradient_no_baseline, f"the baseline b = {baseline} is missing: weigh each sample by r_i − b, not r_i"),
        (_gradient_of_loss, ("your signs are flipped: that is the gradient of the loss −J; return ∇J, the direction "
                             "that raises the expected reward")),
        (_gradient_sum, f"you summed over the {len(actions)} samples: average them (divide by N)"),
        (_gradient_onehot_only, ("∇_θ log softmax(θ)[a] is one-hot(a) − π, not one-hot(a): the log-normaliser "
                                 "log Σ exp θ has a gradient too")),
        (_gradient_of_prob, ("you used ∇π(a) = π(a)·∇log π(a): the log-derivative trick divides by π(a), so each "
                             "sample carries ∇log π(a) alone")),
    ]
    for wrong, why in candidates:
        if baseline == 0.0 and wrong is _gradient_no_baseline:
            continue
        if _close(got, floats(wrong(*case))):
            return why
    return (f"for logits={[round(x, 3) for x in logits.tolist()]}, actions={actions.tolist()}, "
            f"rewards={[round(x, 3) for x in rewards.tolist()]}, baseline={baseline} the estimate is "
            f"{[round(x, 4) for x in expected]}; you returned {[round(x, 4) for x in got]}")


# ---------------------------------------------------------------------------- k3

def _kl_cases() -> list[tuple]:
    """(logp, ref_logp): log-probabilities of N sampled tokens under π and under π_ref."""
    gen = torch.Generator().manual_seed(5)
    cases = []
    for n, spread in [(5, 0.3), (8, 1.0), (6, 2.0), (1, 0.5)]:
        logp = -torch.rand(n, generator=gen, dtype=torch.float64) * 3 - 0.05
        ref_logp = logp + spread * torch.randn(n, generator=gen, dtype=torch.float64)
        cases.append((logp, ref_logp))
    return cases


KL_CASES = _kl_cases()


def _reference_k3(logp, ref_logp):
    return _k3(logp, ref_logp)


def _k1(logp, ref_logp):
    return logp - ref_logp


def _k2(logp, ref_logp):
    return 0.5 * (logp - ref_logp) ** 2


def _k3_flipped(logp, ref_logp):
    return _k3(ref_logp, logp)  # r = π/π_ref: the k3 of the other direction


def _k3_mean(logp, ref_logp):
    return _k3(logp, ref_logp).mean()


@exercise("03b.kl_k3", wrong=[_k1, _k2, _k3_flipped, _k3_mean])
def check_kl_k3(fn) -> str | None:
    """write kl_k3(logp, ref_logp) -> per-sample k3 = (r − 1) − log r with r = π_ref(x)/π(x), for samples x drawn
    from π (log-probabilities as 1-D tensors; one estimate per sample)"""
    return first_mismatch(KL_CASES, lambda case: floats(fn(case[0].clone(), case[1].clone())),
                          lambda case: floats(_reference_k3(*case)), _close, _explain_kl)


def _explain_kl(case, got, expected) -> str:
    logp, ref_logp = case
    if len(got) != len(expected):
        return (f"return one estimate per sample ({len(expected)} here), not their mean: the loss averages them "
                f"over action tokens with a mask, so it needs each one")
    if _close(got, floats(_k1(*case))):
        return "that is k1 = log π − log π_ref: unbiased but it goes negative; k3 adds r − 1, which has mean 0"
    if _close(got, floats(_k2(*case))):
        return "that is k2 = ½(log r)²: low variance but biased; k3 is (r − 1) − log r"
    if _close(got, floats(_k3_flipped(*case))):
        return ("your ratio is upside down: r = π_ref(x)/π(x) = exp(ref_logp − logp); with π/π_ref the mean "
                "of k3 is not KL(π ‖ π_ref) for samples from π")
    if any(x < -1e-12 for x in got):
        return f"k3 is never negative, you returned {min(got):.4f}: check the sign of each term"
    return (f"for logp={[round(x, 3) for x in logp.tolist()]}, ref_logp={[round(x, 3) for x in ref_logp.tolist()]} "
            f"k3 is {[round(x, 4) for x in expected]}; you returned {[round(x, 4) for x in got]}")
