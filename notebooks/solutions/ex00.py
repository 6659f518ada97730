"""Reference solutions of notebook 00's exercises (checked by tests/test_exercises.py)."""


def trainable_fraction(model):
    """Share of the parameter elements that the optimiser updates (requires_grad)."""
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable / total
