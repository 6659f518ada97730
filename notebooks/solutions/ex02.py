"""Reference solutions of notebook 02's exercises (checked by tests/test_exercises.py)."""

import torch

from agentlab.rollout import ACTION


def temperature_probs(logits, temperature):
    """Sampling probabilities at a temperature; 0 is greedy (one-hot on the argmax)."""
    logits = torch.as_tensor(logits, dtype=torch.float32)
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(), logits.numel()).float()
    return torch.softmax(logits / temperature, dim=-1)


def logp_mask(roles):
    """1 where token_logprobs position t scores an action token (token t+1), else 0."""
    return [int(role == ACTION) for role in roles[1:]]
