"""Reference solutions of notebook 00's exercises (checked by tests/test_exercises.py)."""


def trainable_fraction(model):
    """Share of the parameter elements that the optimiser updates (requires_grad)."""
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable / total


def guesses_needed(n):
    """Fewest guesses that always find a number among n candidates with higher/lower feedback.

    Each guess either hits or leaves one of two halves of the n − 1 other numbers, so k guesses
    can cover 2^k − 1 numbers: the answer is the smallest k with 2^k − 1 >= n, i.e. ceil(log2(n + 1)).
    """
    k = 0
    while 2**k - 1 < n:
        k += 1
    return k
