"""Loss pieces shared by PPO and GRPO. Every tensor is per token, ``(B, L-1)``, and every
mean is over action tokens only (``mask``), so prompts and observations carry no loss.

The clipped surrogate (Schulman et al., 2017), per action token:

    ratio = π_θ(a) / π_old(a) = exp(logp − old_logp)
    loss  = −min(ratio · A, clip(ratio, 1 − ε, 1 + ε) · A)

Memory-bounded steps: a minibatch too large for one pass runs as micro-batches of at most
``micro_batch_tokens`` tokens (rows × padded length), and their gradients add up to one
optimiser step. A loss that is a mean over the minibatch's action tokens is the sum over
micro-batches of each one's mean times its share of those tokens (`share`), so weighting each
micro-batch's loss by that share makes the accumulated gradient the minibatch's own.
"""

from __future__ import annotations

import torch

from agentlab.tensors import approx_kl, clip_fraction, masked_mean


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


# ---------------------------------------------------------------------------- micro-batches

def micro_batches(batch: dict[str, torch.Tensor], rows: torch.Tensor, max_tokens: int | None):
    """Split a minibatch's ``rows`` (CPU indices) of a padded ``batch`` into micro-batches of at most
    ``max_tokens`` tokens; yields (their rows, the batch's tensors cut to them).

    Every piece is padded only to its own longest row, not to the whole batch's (right padding and
    a causal model: cutting trailing pad columns changes nothing but the work). A minibatch that
    fits, or ``max_tokens=None``, comes back whole. Otherwise the rows go longest first and are cut
    into micro-batches; an episode longer than the budget runs alone.
    """
    lengths = batch["attn"].sum(1).cpu()  # (B,) tokens of each episode
    width = int(lengths[rows].max())
    if max_tokens is None or len(rows) * width <= max_tokens:
        yield rows, take(batch, rows, width)
        return
    rows = rows[lengths[rows].argsort(descending=True, stable=True)]
    start = 0
    while start < len(rows):
        longest = int(lengths[rows[start]])
        part = rows[start:start + max(1, max_tokens // longest)]
        yield part, take(batch, part, longest)
        start += len(part)


def take(batch: dict[str, torch.Tensor], rows: torch.Tensor, width: int) -> dict[str, torch.Tensor]:
    """``rows`` of a padded batch cut to ``width`` tokens: ids, attn (b, width); per-position tensors (b, width-1)."""
    return {k: v[rows, :width] if k in ("ids", "attn") else v[rows, :width - 1] for k, v in batch.items()}


def share(part_mask: torch.Tensor, mask: torch.Tensor) -> float:
    """A micro-batch's share of the minibatch's masked entries (action tokens or turns); 1.0 for the whole."""
    return float(part_mask.sum()) / max(float(mask.sum()), 1.0)


@torch.no_grad()
def reference_logp(policy, batch: dict[str, torch.Tensor], temperature: float, max_tokens: int | None) -> torch.Tensor:
    """log π_ref of every action token (B, L-1), the adapter switched off, micro-batch by micro-batch."""
    ids = batch["ids"]
    logp = torch.zeros(ids.shape[0], ids.shape[1] - 1, device=ids.device)  # (B, L-1)
    with policy.reference():
        for rows, part in micro_batches(batch, torch.arange(ids.shape[0]), max_tokens):
            out = policy.score(part["ids"], part["attn"], temperature, only=part["loss_mask"])
            logp[rows, :part["loss_mask"].shape[1]] = out["logp"]
    return logp


class AccumulatedStep:
    """One optimiser step from the losses of a minibatch's micro-batches (gradient accumulation).

    Each `add` backpropagates a micro-batch's loss, already weighted by its `share`, into the
    summed gradient and adds its weighted logs, so the step and the logs are the minibatch's.
    A minibatch in one piece (weight 1) is the plain backward-clip-step. A NaN or infinite loss
    or gradient skips the whole step: the weights stay as they were.
    """

    def __init__(self, params: list, optimizer, max_grad_norm: float):
        self.params, self.optimizer, self.max_grad_norm = params, optimizer, max_grad_norm
        self.logs: dict[str, float] = {}
        self.finite = True
        optimizer.zero_grad(set_to_none=True)

    def add(self, loss: torch.Tensor, logs: dict[str, float]) -> None:
        """Backpropagate one micro-batch's weighted loss into the summed gradient; add its weighted logs."""
        for k, v in logs.items():
            self.logs[k] = self.logs.get(k, 0.0) + v
        self.finite = self.finite and bool(torch.isfinite(loss))
        if self.finite:  # after a non-finite loss the step is lost anyway: skip the backward passes
            loss.backward()

    def step(self) -> dict[str, float]:
        """Clip the summed gradient and step; the minibatch's logs plus ``grad_norm`` and ``nonfinite``."""
        norm = float(torch.nn.utils.clip_grad_norm_(self.params, self.max_grad_norm)) if self.finite else float("nan")
        stepped = norm == norm and norm != float("inf")
        if stepped:
            self.optimizer.step()
        else:
            self.optimizer.zero_grad(set_to_none=True)
        return {**self.logs, "grad_norm": norm, "nonfinite": float(not stepped)}
