"""Reference solutions of notebook 03b's exercises (checked by tests/test_exercises.py)."""

import torch


def reinforce_gradient(logits, actions, rewards, baseline=0.0):
    """The score-function estimate (1/N) Σ_i (r_i − b) ∇_θ log π_θ(a_i) for π_θ = softmax(logits).

    logits (K,), actions (N,) integers, rewards (N,); returns (K,). For a softmax,
    ∇_θ log π_θ(a) = one-hot(a) − π_θ, so the estimate needs no autograd.
    """
    probs = torch.softmax(logits, dim=-1)  # (K,)
    onehot = torch.nn.functional.one_hot(actions, logits.shape[-1]).to(probs.dtype)  # (N, K)
    weights = (rewards - baseline).to(probs.dtype)  # (N,)
    return (weights[:, None] * (onehot - probs)).mean(0)


def kl_k3(logp, ref_logp):
    """Per-sample k3 = (r − 1) − log r, r = π_ref(x)/π(x), for x drawn from π: its mean estimates KL(π ‖ π_ref)."""
    log_r = ref_logp - logp
    return torch.exp(log_r) - 1 - log_r
