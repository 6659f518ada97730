"""Exercises of notebook 00 (setup and tour): how much of the policy LoRA trains, and how many
guesses always find a hidden number."""

from __future__ import annotations

import math

import torch
from torch import nn

from agentlab.exercises import exercise, first_mismatch, scalar, whole


def _toy_models():
    """(description, model): frozen and trainable parts of different sizes."""
    torch.manual_seed(0)
    half = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    for p in half[0].parameters():
        p.requires_grad_(False)
    lora_like = nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 2), nn.Linear(2, 16))
    for p in lora_like[0].parameters():
        p.requires_grad_(False)
    frozen = nn.Linear(3, 3)
    for p in frozen.parameters():
        p.requires_grad_(False)
    return [("two 4x4 layers, the first frozen", half),
            ("a frozen 16x16 layer with a rank-2 adapter beside it", lora_like),
            ("a model with every parameter frozen", frozen),
            ("a model with nothing frozen", nn.Linear(5, 2))]


def _reference(model) -> float:
    total = sum(p.numel() for p in model.parameters())
    return sum(p.numel() for p in model.parameters() if p.requires_grad) / total


def _counts_tensors(model):
    params = list(model.parameters())
    return sum(p.requires_grad for p in params) / len(params)


def _frozen_share(model):
    total = sum(p.numel() for p in model.parameters())
    return sum(p.numel() for p in model.parameters() if not p.requires_grad) / total


def _trainable_over_frozen(model):
    frozen = sum(p.numel() for p in model.parameters() if not p.requires_grad)
    return sum(p.numel() for p in model.parameters() if p.requires_grad) / max(frozen, 1)


@exercise("00.trainable_fraction", wrong=[_counts_tensors, _frozen_share, _trainable_over_frozen])
def check_trainable_fraction(trainable_fraction) -> str | None:
    """write trainable_fraction(model) -> float: the share of the model's parameter *elements* that
    requires_grad (0.0 to 1.0)"""
    return first_mismatch(_toy_models(), lambda case: scalar(trainable_fraction(case[1])),
                          lambda case: _reference(case[1]), _same_share, _explain_share)


def _same_share(got, want) -> bool:
    return _is_number(got) and math.isclose(float(got), want, rel_tol=1e-9, abs_tol=1e-12)


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(float(x))


def _explain_share(case, got, want) -> str:
    what, model = case
    if not _is_number(got):
        return f"return a number between 0 and 1, got {got!r}"
    tensors = sum(p.requires_grad for p in model.parameters()) / len(list(model.parameters()))
    if math.isclose(float(got), tensors):
        return (f"on '{what}' you counted parameter tensors ({tensors:.3f}); count their elements with "
                f"p.numel(): the answer is {want:.4f}.")
    if math.isclose(float(got), 1 - want):
        return f"on '{what}' you returned the frozen share {got:.4f}; the trainable share is {want:.4f}."
    return f"on '{what}' the trainable share is {want:.4f}, you returned {float(got):.4f}."


# ---------------------------------------------------------------------------- 00.guesses_needed

# range sizes n: GuessNumber's levels first (the feedback then speaks of a game the learner saw),
# then the edges: 1, 2, powers of two and their neighbours
_SIZES = [16, 32, 100, 1000, 1, 2, 3, 4, 7, 8, 15, 17, 31, 33, 127, 128, 1023, 1024, 10**6]


def _reference_guesses(n: int) -> int:
    """Bisection: each "higher"/"lower" answer leaves at most half of the n − 1 other numbers,
    so k guesses can always tell apart 2^k − 1 numbers; the answer is the smallest k with 2^k − 1 ≥ n."""
    return int(n).bit_length()


def _guesses_log2(n):
    return math.ceil(math.log2(n))


def _guesses_halving(n):
    k = 0
    while n > 1:  # halves the range but forgets that a guess can also *be* the number
        n = math.ceil(n / 2)
        k += 1
    return k


def _guesses_linear(n):
    return n


def _bisection_worst_case(n: int) -> int:
    """Play every target with the midpoint rule and return the most guesses any game took."""
    worst = 0
    for target in range(1, n + 1):
        lo, hi, k = 1, n, 0
        while True:
            k += 1
            mid = (lo + hi) // 2
            if mid == target:
                break
            lo, hi = (mid + 1, hi) if mid < target else (lo, mid - 1)
        worst = max(worst, k)
    return worst


@exercise("00.guesses_needed", wrong=[_guesses_log2, _guesses_halving, _guesses_linear])
def check_guesses_needed(guesses_needed) -> str | None:
    """write guesses_needed(n) -> int: the fewest guesses that always find a number hidden among n candidates
    when every wrong guess is answered 'higher' or 'lower'"""
    return first_mismatch(_SIZES, lambda n: whole(guesses_needed(n)), _reference_guesses,
                          lambda got, want: isinstance(got, int) and got == want, _explain_guesses)


def _explain_guesses(n, got, want) -> str:
    if not isinstance(got, int):
        return f"return a whole number of guesses; for n = {n} you returned {got!r}"
    if n <= 64:
        played = _bisection_worst_case(n)
        hint = f"playing all {n} targets with the midpoint rule, the longest game takes {played} guesses"
    else:
        hint = f"k guesses can tell apart at most 2^k − 1 numbers, and 2^{want - 1} − 1 = {2 ** (want - 1) - 1} < {n}"
    if got == want - 1:
        return (f"one short for n = {n}: you returned {got}, but {hint}. A guess can be the number itself, "
                "so k guesses cover 2^k − 1 numbers, not 2^k.")
    if got == n and n > 3:
        return (f"for n = {n} you returned {got}: that is trying every number in turn. The feedback halves "
                f"what is left, so far fewer guesses suffice ({want}).")
    return f"for n = {n} the answer is {want} ({hint}); you returned {got}."
