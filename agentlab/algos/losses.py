"""Loss pieces shared by PPO and GRPO. Every tensor is per token, ``(B, L-1)``, and every
mean is over action tokens only (``mask``), so prompts and observations carry no loss.

The clipped surrogate (Schulman et al., 2017), per action token:

    ratio = π_θ(a) / π_old(a) = exp(logp − old_logp)
    loss  = −min(ratio · A, clip(ratio, 1 − ε, 1 + ε) · A)
"""

from __future__ import annotations

import torch

from agentlab.metrics import approx_kl, clip_fraction, masked_mean


def clipped_surrogate(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
                      clip_coef: float) -> tuple[torch.Tensor, dict]:
    """Mean clipped policy loss over action tokens, plus ratio statistics for logging."""
    log_ratio = logp - old_logp  # (B, L-1)
    ratio = log_ratio.exp()
    unclipped = ratio * adv
    clipped = ratio.clamp(1 - clip_coef, 1 + clip_coef) * adv
    loss = masked_mean(-torch.min(unclipped, clipped), mask)
    with torch.no_grad():
        stats = {
            "clip_frac": float(clip_fraction(ratio, clip_coef, mask)),
            "approx_kl": float(approx_kl(logp, old_logp, mask)),  # KL to the sampling policy
        }
    return loss, stats


def kl_to_reference(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean k3 estimate of KL(π_θ ‖ π_ref) over action tokens: `approx_kl` against the reference."""
    return approx_kl(logp, ref_logp, mask)


def minibatches(n: int, size: int, generator: torch.Generator | None = None):
    """Shuffled index tensors covering range(n) in chunks of ``size``."""
    order = torch.randperm(n, generator=generator)
    for start in range(0, n, size):
        yield order[start:start + size]


def backward_step(loss: torch.Tensor, params: list, optimizer, max_grad_norm: float) -> tuple[bool, float]:
    """Backpropagate and step unless the loss or the gradient is NaN/inf. Returns (stepped, grad_norm)."""
    optimizer.zero_grad(set_to_none=True)
    if not torch.isfinite(loss):
        return False, float("nan")
    loss.backward()
    norm = float(torch.nn.utils.clip_grad_norm_(params, max_grad_norm))
    if not (norm == norm and norm != float("inf")):
        optimizer.zero_grad(set_to_none=True)
        return False, norm
    optimizer.step()
    return True, norm
