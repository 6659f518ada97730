"""Tensor maths shared by the losses, the policy's scoring and the diagnostics: masked means,
entropies, KL estimates, the clip fraction and the critic's explained variance.

They return tensors (except `explained_variance`, a float), so they can sit inside a loss or be
logged with ``.item()``. Means over an empty mask are 0, not NaN, so logging never breaks. What
each number says about a run, and its healthy range, is the table in `agentlab.metrics`.
"""

from __future__ import annotations

import torch


# ---------------------------------------------------------------------------------------------
# Masked reductions
# ---------------------------------------------------------------------------------------------
def masked_mean(x: torch.Tensor, mask: torch.Tensor | None = None, dim: int | None = None) -> torch.Tensor:
    """Mean of ``x`` over positions where ``mask`` is 1 (e.g. action tokens).

    Args:
        x: any shape, e.g. ``(B, L)`` per-token values.
        mask: same shape as ``x``, 1/True where the entry counts; None counts everything.
        dim: reduce along this dim only; None reduces everything to a scalar.

    Returns:
        A tensor; where the mask is empty the mean is 0 (not NaN), so logging never breaks.
    """
    if mask is None:
        return x.mean() if dim is None else x.mean(dim=dim)
    mask = mask.to(x.dtype)
    # where() rather than x * mask so that NaN/inf in masked-out positions cannot leak in
    masked = torch.where(mask.bool(), x, torch.zeros((), dtype=x.dtype, device=x.device))
    if dim is None:
        return masked.sum() / mask.sum().clamp(min=1)
    return masked.sum(dim=dim) / mask.sum(dim=dim).clamp(min=1)


def _masked_var(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Population variance of ``x`` over the masked positions (scalar)."""
    mean = masked_mean(x, mask)
    return masked_mean((x - mean) ** 2, mask)


# ---------------------------------------------------------------------------------------------
# Entropy, KL and the update's statistics
# ---------------------------------------------------------------------------------------------
def entropy_from_logp(logp_all: torch.Tensor) -> torch.Tensor:
    """Entropy of a distribution given by its log-probabilities, at every position, in nats.

    Args:
        logp_all: ``(..., V)`` log-probabilities over the vocabulary (a ``log_softmax``).

    Returns:
        ``(...)``: ``H = −Σ_v p_v log p_v``. Uniform over V gives ``log V``; one-hot gives 0.
    """
    p = logp_all.exp()
    # 0 * log 0 = 0: where p underflows to 0, logp is -inf; p * logp would be NaN there.
    return -torch.where(p > 0, p * logp_all, torch.zeros_like(p)).sum(dim=-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the softmax distribution at every position, in nats (see `entropy_from_logp`).

    Args:
        logits: ``(..., V)`` unnormalised scores over the vocabulary.
    """
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()  # half precision loses too much in Σ p log p
    return entropy_from_logp(torch.log_softmax(logits, dim=-1))  # (..., V) -> (...)


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(π ‖ π_ref) (Schulman, "Approximating KL divergence", 2020).

        r = π_ref(a) / π(a) = exp(ref_logp − logp)
        k3 = (r − 1) − log r          ≥ 0 for every token

    For tokens sampled from π (logp), the mean of k3 is an unbiased, low-variance estimate of
    KL(π ‖ π_ref). This is the per-token KL of the GRPO loss, with π_ref the reference model.
    Shapes: any, e.g. ``(B, L)``; returns the same shape.
    """
    log_r = ref_logp - logp
    return torch.expm1(log_r) - log_r  # expm1(x) = e^x - 1, exact for small x


def approx_kl(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean k3 KL over action tokens, with ``r = exp(old_logp − logp)``.

    Direction: this estimates KL(π_θ ‖ π_old) — unbiased when the tokens were sampled from
    π_θ. In PPO the tokens come from π_old, so it is a second-order-accurate estimate (exact
    to O((logp − old_logp)³)); CleanRL uses ``r = exp(logp − old_logp)``, which estimates
    KL(π_old ‖ π_θ). The two agree closely for the small steps PPO takes. Pass the reference
    policy's logprobs as ``old_logp`` for GRPO's KL to the reference.

    Args:
        logp: ``(B, L)`` log π_θ of the taken tokens; old_logp: ``(B, L)``; mask: ``(B, L)``.

    Returns:
        Scalar tensor.
    """
    return masked_mean(kl_k3(logp, old_logp), mask)


def clip_fraction(ratio: torch.Tensor, clip_coef: float, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Share of tokens whose probability ratio left ``[1 − clip_coef, 1 + clip_coef]``.

    Args:
        ratio: ``(B, L)`` π_θ / π_old per token; clip_coef: ε (e.g. 0.2); mask: ``(B, L)``.

    Returns:
        Scalar tensor in [0, 1].
    """
    return masked_mean(((ratio - 1.0).abs() > clip_coef).to(ratio.dtype), mask)


def explained_variance(
    values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor | None = None
) -> float:
    """``1 − Var[returns − values] / Var[returns]`` over the masked entries.

    1: the critic predicts returns perfectly; 0: no better than predicting the mean;
    negative: worse than that. NaN when the returns have no variance.

    Args:
        values: ``(B, T)`` critic predictions; returns: ``(B, T)`` targets; mask: ``(B, T)``.
    """
    var_returns = _masked_var(returns.float(), mask)
    if var_returns.item() == 0.0:
        return float("nan")
    return (1.0 - _masked_var((returns - values).float(), mask) / var_returns).item()
