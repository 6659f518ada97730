"""Exercises of notebook 10 (failure modes lab): the entropy a collapse alarm watches, and the
floor reward that turns an all-failed group into a learning signal."""

from __future__ import annotations

import math

import torch

from agentlab.exercises import all_close, exercise, first_mismatch, floats
from agentlab.rewards import floor_reward
from agentlab.tensors import entropy_from_logits

# ---------------------------------------------------------------------------- 10.token_entropy


def _logit_cases() -> list[tuple[str, torch.Tensor]]:
    """(what, logits): each (..., V); the entropy is taken over the last dim (the vocabulary)."""
    gen = torch.Generator().manual_seed(10)
    masked = torch.randn(2, 5, generator=gen)
    masked[:, 3:] = -math.inf  # tokens removed by top-k / top-p: probability exactly 0
    return [
        ("a batch of 2 × 3 positions over a vocabulary of 7", torch.randn(2, 3, 7, generator=gen) * 2),
        ("4 positions over a vocabulary of 5, all logits equal", torch.zeros(4, 5)),
        ("3 positions, each sure of one token (logit 1000)", torch.eye(3) * 1000.0),
        ("2 positions over 5 tokens, the last two masked out with -inf", masked),
    ]


def _entropy_bits(logits):
    p = torch.softmax(logits, dim=-1)
    return -torch.where(p > 0, p * torch.log2(p), torch.zeros_like(p)).sum(-1)


def _entropy_no_softmax(logits):
    p = logits
    return -(p * torch.log(p)).sum(-1)


def _entropy_mean_over_vocab(logits):
    logp = torch.log_softmax(logits, dim=-1)
    return -torch.where(logp.exp() > 0, logp.exp() * logp, torch.zeros_like(logp)).mean(-1)


def _entropy_naive(logits):
    p = torch.softmax(logits, dim=-1)
    return -(p * torch.log(p)).sum(-1)  # 0 · log 0 = NaN where a token has probability 0


def _entropy_no_minus(logits):
    return -_entropy_naive(torch.where(torch.isinf(logits), torch.full_like(logits, -1e4), logits))


@exercise("10.token_entropy",
          wrong=[_entropy_bits, _entropy_no_softmax, _entropy_mean_over_vocab, _entropy_naive, _entropy_no_minus])
def check_token_entropy(token_entropy) -> str | None:
    """write token_entropy(logits) -> tensor: the entropy in nats of softmax(logits) over the last dim, one
    value per position (shape logits.shape[:-1])"""
    def answer(case):
        _, logits = case
        return torch.as_tensor(token_entropy(logits.clone()), dtype=logits.dtype)

    return first_mismatch(_logit_cases(), answer, lambda case: entropy_from_logits(case[1]), _same_entropies,
                          _explain_entropy)


def _same_entropies(got, want) -> bool:
    return got.shape == want.shape and torch.allclose(got, want, atol=1e-4)


def _explain_entropy(case, got, want) -> str:
    what, logits = case
    if got.shape != want.shape:
        return (f"on {what} (logits of shape {tuple(logits.shape)}) return one entropy per position, shape "
                f"{tuple(want.shape)}; you returned shape {tuple(got.shape)}. Sum over the last dim only.")
    if not torch.isfinite(got).all():
        if torch.isinf(logits).any():
            return (f"on {what} you returned {got.tolist()}: a token with logit -inf has p = 0, and p·log p is "
                    "0·(−inf) = NaN in floating point. Count those terms as 0 (the limit of p·log p as p → 0), "
                    "e.g. with torch.where(p > 0, p * logp, 0).")
        return (f"on {what} you returned {got.tolist()}: log of a negative number or of 0. Turn the logits into "
                "probabilities with a softmax first (torch.log_softmax gives log p directly).")
    if torch.allclose(got, -want, atol=1e-4):
        return f"on {what} your entropies are negative ({got.tolist()}): H = −Σ p·log p, mind the minus sign."
    if torch.allclose(got * math.log(2), want, atol=1e-4):
        return f"on {what} you returned bits (log base 2); the kit logs entropy in nats (natural log)."
    vocab = logits.shape[-1]
    if torch.allclose(got * vocab, want, atol=1e-4):
        return (f"on {what} you averaged p·log p over the {vocab} tokens; entropy is their sum, "
                f"so equal logits give log V = {math.log(vocab):.4f}.")
    return (f"on {what} the entropies are {[round(x, 4) for x in want.flatten().tolist()]}, you returned "
            f"{[round(x, 4) for x in got.flatten().tolist()]}.")


# ---------------------------------------------------------------------------- 10.floor_rewards

# (rewards, completeness, group_size, floor): every batch holds a reward <= 0, where the
# library's `floor_reward(..., fail_threshold=0.0)` is exactly the rule the prompt states.
FLOOR_CASES = [
    ([0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0], [0.2, 0.8, 0.5, 0.1, 1.0, 0.3, 1.0, 0.6], 4, 0.1),
    ([0.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.5, 0.5], 4, 0.1),  # nothing to prefer: unchanged
    ([-0.1, -0.1, -0.2, 0.0, 0.0, 0.0], [0.4, 0.9, 0.9, 0.3, 0.7, 0.7], 3, 0.2),  # ties share the floor
    ([1.0, 1.0, 0.0, 0.0, 0.0, 0.0], [1.0, 0.9, 0.3, 0.6, 0.3, 0.6], 2, 0.05),
]


def _reference_floor(rewards, completeness, group_size, floor):
    return floor_reward(torch.tensor(rewards, dtype=torch.float64), torch.tensor(completeness, dtype=torch.float64),
                        group_size, floor, 0.0).tolist()


def _floor_everyone(rewards, completeness, group_size, floor):
    out = list(rewards)
    for s in range(0, len(out), group_size):
        if max(out[s:s + group_size]) <= 0:
            for i in range(s, s + group_size):
                out[i] += floor
    return out


def _floor_every_group(rewards, completeness, group_size, floor):
    out = list(rewards)
    for s in range(0, len(out), group_size):
        best = max(completeness[s:s + group_size])
        if min(completeness[s:s + group_size]) < best:
            for i in range(s, s + group_size):
                out[i] += floor if completeness[i] == best else 0.0
    return out


def _floor_first_best_only(rewards, completeness, group_size, floor):
    out = list(rewards)
    for s in range(0, len(out), group_size):
        c = completeness[s:s + group_size]
        if max(out[s:s + group_size]) <= 0 and min(c) < max(c):
            out[s + c.index(max(c))] += floor
    return out


def _floor_ignores_ties(rewards, completeness, group_size, floor):
    out = list(rewards)
    for s in range(0, len(out), group_size):
        c = completeness[s:s + group_size]
        if max(out[s:s + group_size]) <= 0:
            for i in range(s, s + group_size):
                out[i] += floor if completeness[i] == max(c) else 0.0
    return out


def _floor_least_complete(rewards, completeness, group_size, floor):
    return _floor_first_best_only(rewards, [-c for c in completeness], group_size, floor)


def _show(case) -> str:
    rewards, completeness, group_size, floor = case
    return f"rewards={rewards}, completeness={completeness}, group_size={group_size}, floor={floor}"


@exercise("10.floor_rewards",
          wrong=[_floor_everyone, _floor_every_group, _floor_first_best_only, _floor_ignores_ties, _floor_least_complete])
def check_floor_rewards(floor_rewards) -> str | None:
    """write floor_rewards(rewards, completeness, group_size, floor) -> list: in every group with no reward
    above 0, add floor to the most complete sample(s), unless all of the group are equally complete"""
    return first_mismatch(FLOOR_CASES, lambda case: floats(floor_rewards(*map(list, case[:2]), *case[2:])),
                          lambda case: _reference_floor(*case), lambda got, want: all_close(got, want, abs_tol=1e-9),
                          _explain_floor)


def _explain_floor(case, got, want) -> str:
    if len(got) != len(want):
        return f"return one reward per sample: {len(want)} for {_show(case)}, you returned {len(got)}"
    if got == floats(_floor_ignores_ties(*case)):
        return (f"for {_show(case)} every sample of a failed group was equally complete, and you raised them all "
                "by the floor: that changes nothing for the advantages. Leave such a group unchanged.")
    if got == floats(_floor_everyone(*case)):
        return ("you added the floor to every sample of a failed group: their rewards are still all equal, so "
                "the group's advantages stay 0. Only the most complete sample(s) get it.")
    if got == floats(_floor_every_group(*case)):
        return ("you added the floor in a group that has a success: its rewards already differ, so it already "
                "teaches something. Only groups with no reward above 0 get a floor.")
    if got == floats(_floor_least_complete(*case)):
        return "you rewarded the least complete sample: the floor goes to the one that got furthest."
    if got == floats(_floor_first_best_only(*case)):
        return (f"for {_show(case)} two samples tie for the most complete and only the first got the floor; "
                "ties share it (the expected rewards are {}).".format([round(x, 3) for x in want]))
    return f"for {_show(case)} the rewards should be {[round(x, 3) for x in want]}, you returned {got}"
