"""Exercises of notebook 02 (policies and rollouts): sampling temperature, and the loss mask."""

from __future__ import annotations

import operator

import torch

from agentlab.exercises import exercise, first_mismatch
from agentlab.rollout import ACTION, OBSERVATION, PROMPT

# ---------------------------------------------------------------------------- 02.temperature_probs

_LOGITS = [torch.tensor([2.0, 1.0, 0.0, -1.0]), torch.tensor([0.5, 3.0, 3.0 - 1e-3, -2.0])]


def _reference_probs(logits, temperature):
    logits = torch.as_tensor(logits, dtype=torch.float32)
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(), logits.numel()).float()
    return torch.softmax(logits / temperature, dim=-1)


def _multiply_by_temperature(logits, temperature):
    # greedy at 0 like the reference, but softmax(logits · t), i.e. the reference at 1 / t
    return _reference_probs(logits, 1 / temperature if temperature else 0)


def _ignore_temperature(logits, temperature):
    return torch.softmax(logits, dim=-1)


def _divide_by_zero(logits, temperature):
    return torch.softmax(logits / temperature, dim=-1)


@exercise("02.temperature_probs", wrong=[_multiply_by_temperature, _ignore_temperature, _divide_by_zero])
def check_temperature_probs(temperature_probs) -> str | None:
    """write temperature_probs(logits, temperature) -> probabilities: softmax(logits / temperature);
    temperature 0 means greedy (all mass on the argmax)"""
    def answer(case):
        logits, t = case
        try:
            return torch.as_tensor(temperature_probs(logits.clone(), t), dtype=torch.float32)
        except ZeroDivisionError:
            return torch.full_like(logits, float("nan"))

    cases = [(logits, t) for logits in _LOGITS for t in (1.0, 0.7, 2.0, 0.0)]
    return first_mismatch(cases, answer, lambda case: _reference_probs(*case), _same_probs, _explain_probs)


def _same_probs(got, want) -> bool:
    return got.shape == want.shape and abs(float(got.sum()) - 1) <= 1e-4 and torch.allclose(got, want, atol=1e-4)


def _explain_probs(case, got, want) -> str:
    logits, t = case
    if t == 0 and not torch.isfinite(got).all():
        return ("temperature 0 gave NaN: dividing by 0 is undefined. Treat 0 as greedy decoding: "
                "probability 1 on the argmax token, 0 elsewhere.")
    if got.shape != want.shape or abs(float(got.sum()) - 1) > 1e-4:
        return f"at temperature {t} the result should be {logits.numel()} probabilities summing to 1."
    hint = ("lower temperature must sharpen the distribution (divide the logits by it)"
            if t < 1 else "higher temperature must flatten the distribution (divide the logits by it)")
    return (f"at temperature {t} for logits {logits.tolist()} expected "
            f"{[round(x, 3) for x in want.tolist()]}, got {[round(x, 3) for x in got.tolist()]}: {hint}.")


# ---------------------------------------------------------------------------- 02.logp_mask

P, O, A = PROMPT, OBSERVATION, ACTION
_ROLES = [
    [P, P, P, A, A, A, O, O, A, A],
    [P, P, A, O, O, O, A, A, A, O, O, A],
    [P, A],
]


def _reference_logp_mask(roles):
    return [int(r == ACTION) for r in roles[1:]]


def _mask_not_shifted(roles):
    return [int(r == ACTION) for r in roles]


def _mask_shifted_wrong_way(roles):
    return [int(r == ACTION) for r in roles[:-1]]


def _mask_with_observations(roles):
    return [int(r != PROMPT) for r in roles[1:]]


@exercise("02.logp_mask", wrong=[_mask_not_shifted, _mask_shifted_wrong_way, _mask_with_observations])
def check_logp_mask(logp_mask) -> str | None:
    """write logp_mask(roles) -> list of 0/1 of length L-1, aligned with token_logprobs: position t scores
    token t+1, and only action tokens count"""
    return first_mismatch(_ROLES, lambda roles: [int(x) for x in logp_mask(list(roles))], _reference_logp_mask,
                          operator.eq, _explain_mask)


def _explain_mask(roles, got, want) -> str:
    if len(got) != len(want):
        return (f"for {len(roles)} tokens token_logprobs has {len(roles) - 1} positions (position t scores "
                f"token t+1; the first token is never predicted), so the mask needs {len(want)} entries, "
                f"got {len(got)}.")
    named = {PROMPT: "P", OBSERVATION: "O", ACTION: "A"}
    t = next(t for t, (g, w) in enumerate(zip(got, want)) if g != w)
    return (f"roles {''.join(named[r] for r in roles)}: position {t} scores token {t + 1}, a "
            f"{['prompt', 'observation', 'action'][roles[t + 1]]} token, so its mask is {want[t]}, "
            f"you gave {got[t]}. Only action tokens carry loss; look at the role of the token being "
            "predicted, not the one before it.")
