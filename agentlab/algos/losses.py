"""Loss pieces shared by PPO and GRPO. Every tensor is per token, ``(B, L-1)``, and every
mean is over action tokens only (``mask``), so prompts and observations carry no loss.

The clipped surrogate (Schulman et al., 2017), per action token:

    ratio = π_θ(a) / π_old(a) = exp(logp − old_logp)
    loss  = −min(ratio · A, clip(ratio, 1 − ε, 1 + ε) · A)

A sampler that is not the trainer (another dtype, a quantised copy, another engine) gives
tokens logprobs ``old_logp`` that the trainer would not give them. With ``is_correction`` the
update also scores the batch with the trainer before it moves (``prox_logp``, no gradient) and
takes the decoupled loss (Hilton et al., 2022; "truncated importance sampling", Yao et al., 2025):

    ratio = exp(logp − prox_logp)                      the trust region is around the trainer
    w     = exp(prox_logp − old_logp)                  per token, or its product over the episode
    loss  = −w̄ · min(ratio · A, clip(ratio, 1 − ε, 1 + ε) · A)
    w̄     = min(w, cap) ("truncated") or w · [w ≤ cap] ("masked")

The weight carries no gradient. With sampler = trainer, w = 1 and the loss is the plain one.

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
                      clip_coef: float, weight: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
    """Mean clipped policy loss over action tokens, plus ratio statistics for logging.

    ``weight`` (B, L-1), no gradient: each token's importance weight (`is_weights`); ``old_logp`` is
    then the trainer's own logprobs before the update (``prox_logp``), not the sampler's."""
    log_ratio = logp - old_logp  # (B, L-1)
    ratio = log_ratio.exp()
    unclipped = ratio * adv
    clipped = ratio.clamp(1 - clip_coef, 1 + clip_coef) * adv
    per_token = -torch.min(unclipped, clipped)  # (B, L-1)
    loss = masked_mean(per_token if weight is None else weight * per_token, mask)
    with torch.no_grad():
        stats = {
            "clip_frac": float(clip_fraction(ratio, clip_coef, mask)),
            "approx_kl": float(approx_kl(logp, old_logp, mask)),  # KL to the sampling policy
        }
    return loss, stats


def kl_to_reference(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean k3 estimate of KL(π_θ ‖ π_ref) over action tokens: `approx_kl` against the reference."""
    return approx_kl(logp, ref_logp, mask)


# ---------------------------------------------------------------------------- sampler ≠ trainer

IS_CORRECTIONS = ("token_truncated", "token_masked", "sequence_truncated", "sequence_masked")


def is_weights(prox_logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor, mode: str,
               cap: float) -> torch.Tensor:
    """Importance weights (B, L-1) of the trainer against the sampler, 0 off the action tokens.

    w = exp(prox_logp − old_logp) per action token (``"token_*"``), or for ``"sequence_*"`` one
    weight per episode, the product over all its action tokens (every turn), on each of them.
    ``"*_truncated"`` caps it, min(w, cap); ``"*_masked"`` drops what passes the cap, w > cap → 0.
    (TRL's ``vllm_importance_sampling_mode`` spells these ``token_truncate``, ``sequence_mask``, ...)
    """
    if mode not in IS_CORRECTIONS:
        raise ValueError(f"is_correction must be None or one of {IS_CORRECTIONS}, got {mode!r}")
    on = mask.bool()
    log_w = torch.where(on, prox_logp - old_logp, torch.zeros_like(prox_logp))  # (B, L-1), 0 off actions
    if mode.startswith("sequence"):
        log_w = log_w.sum(-1, keepdim=True).expand_as(log_w)  # (B, L-1) the episode's log-weight everywhere
    w = log_w.exp()  # may overflow to inf on a long episode: the cap or the mask handles it
    w = w.clamp(max=cap) if mode.endswith("truncated") else torch.where(w > cap, torch.zeros_like(w), w)
    return torch.where(on, w, torch.zeros_like(w))


def sampler_mismatch(prox_logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor, clip_coef: float,
                     mode: str | None = None, cap: float = float("inf")) -> dict[str, float]:
    """How far the sampler is from the trainer on the sampled tokens, before any step.

    ``sampler_kl``: mean k3 of KL(π_sampler ‖ π_trainer) per action token, r = exp(prox_logp − old_logp);
    unbiased, since the tokens came from the sampler. ``sampler_clip_frac``: share of action tokens
    whose r already lies outside [1 − ε, 1 + ε], i.e. that the uncorrected loss would clip at the
    first step. With an `is_weights` ``mode``: ``is_weight_mean``, the mean weight after the cap, and
    ``is_capped_frac``, the share of action tokens whose weight passed ``cap`` (truncated or masked)."""
    r = (prox_logp - old_logp).exp()  # (B, L-1)
    stats = {"sampler_kl": float(approx_kl(old_logp, prox_logp, mask)),
             "sampler_clip_frac": float(clip_fraction(r, clip_coef, mask))}
    if mode is not None:
        raw = is_weights(prox_logp, old_logp, mask, mode, float("inf"))  # (B, L-1) before the cap
        stats["is_weight_mean"] = float(masked_mean(is_weights(prox_logp, old_logp, mask, mode, cap), mask))
        stats["is_capped_frac"] = float(masked_mean((raw > cap).float(), mask))
    return stats


def correct_for_sampler(policy, batch: dict[str, torch.Tensor], mode: str, cap: float, clip_coef: float,
                        temperature: float, max_tokens: int | None) -> dict[str, float]:
    """Prepare ``batch`` for the decoupled loss: add ``prox_logp`` (the trainer's logprobs before the
    update, one no-grad pass) and ``is_weight`` (`is_weights`), both (B, L-1); return `sampler_mismatch`."""
    batch["prox_logp"] = policy_logp(policy, batch, temperature, max_tokens)  # (B, L-1)
    batch["is_weight"] = is_weights(batch["prox_logp"], batch["old_logp"], batch["loss_mask"], mode, cap)
    return sampler_mismatch(batch["prox_logp"], batch["old_logp"], batch["loss_mask"], clip_coef, mode, cap)


def measure_sampler(policy, batch: dict[str, torch.Tensor], clip_coef: float, temperature: float,
                    max_tokens: int | None) -> dict[str, float]:
    """`sampler_mismatch` without the correction: ``sampler_kl`` and ``sampler_clip_frac`` of a batch from a
    sampler that is not the trainer, from one no-grad pass; the batch and so the loss stay as they are."""
    prox_logp = policy_logp(policy, batch, temperature, max_tokens)  # (B, L-1)
    return sampler_mismatch(prox_logp, batch["old_logp"], batch["loss_mask"], clip_coef)


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
    with policy.reference():
        return policy_logp(policy, batch, temperature, max_tokens)


@torch.no_grad()
def policy_logp(policy, batch: dict[str, torch.Tensor], temperature: float, max_tokens: int | None) -> torch.Tensor:
    """log π of every action token (B, L-1) under ``policy`` as it is now, in the training dtype, no
    gradient, micro-batch by micro-batch: the reference inside ``policy.reference()``, else ``prox_logp``."""
    ids = batch["ids"]
    logp = torch.zeros(ids.shape[0], ids.shape[1] - 1, device=ids.device)  # (B, L-1)
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
