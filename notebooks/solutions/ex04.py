"""Reference solutions of notebook 04's exercises (checked by tests/test_exercises.py)."""

import math


def gae_advantages(rewards, values, gamma, gae_lambda, last_value=None):
    """GAE for one episode: A_t = δ_t + γλ·A_t+1, δ_t = r_t + γ·V(s_t+1) − V(s_t).

    After the last turn the value is 0 if the episode terminated (last_value is None) and
    last_value (the critic's V(s_T)) if it was truncated.
    """
    next_values = list(values[1:]) + [0.0 if last_value is None else last_value]
    advantages, running = [], 0.0
    for t in reversed(range(len(rewards))):
        delta = rewards[t] + gamma * next_values[t] - values[t]
        running = delta + gamma * gae_lambda * running
        advantages.append(running)
    return advantages[::-1]


def credit_horizon(gamma, gae_lambda, threshold=0.1):
    """The smallest k with (γλ)^k < threshold: how many turns back a reward keeps ≥ threshold of its weight."""
    x = gamma * gae_lambda
    if x >= 1.0:
        return math.inf
    k, weight = 0, 1.0
    while weight >= threshold:
        weight *= x
        k += 1
    return k
