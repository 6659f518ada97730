"""Exercises of notebook 00 (setup and tour): how much of the policy LoRA trains."""

from __future__ import annotations

import math

import torch
from torch import nn

from agentlab.exercises import exercise


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


@exercise(
    "00.trainable_fraction",
    "write trainable_fraction(model) -> float: the share of the model's parameter *elements* that "
    "requires_grad (0.0 to 1.0)",
    wrong=[_counts_tensors, _frozen_share, _trainable_over_frozen],
)
def check_trainable_fraction(trainable_fraction) -> str | None:
    for what, model in _toy_models():
        want = _reference(model)
        got = trainable_fraction(model)
        if isinstance(got, torch.Tensor):
            got = got.item()
        if not isinstance(got, (int, float)) or not math.isfinite(float(got)):
            return f"return a number between 0 and 1, got {got!r}"
        if math.isclose(float(got), want, rel_tol=1e-9, abs_tol=1e-12):
            continue
        tensors = sum(p.requires_grad for p in model.parameters()) / len(list(model.parameters()))
        if math.isclose(float(got), tensors):
            return (f"on '{what}' you counted parameter tensors ({tensors:.3f}); count their elements with "
                    f"p.numel(): the answer is {want:.4f}.")
        if math.isclose(float(got), 1 - want):
            return f"on '{what}' you returned the frozen share {got:.4f}; the trainable share is {want:.4f}."
        return f"on '{what}' the trainable share is {want:.4f}, you returned {float(got):.4f}."
    return None
