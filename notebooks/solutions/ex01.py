"""Reference solutions of notebook 01's exercises (checked by tests/test_exercises.py)."""

import gymnasium as gym


def run_episode(env, policy, seed=None):
    """Play one episode; return (total_reward, turns, success)."""
    obs, info = env.reset(seed=seed)
    total, turns = 0.0, 0
    while True:
        obs, reward, terminated, truncated, info = env.step(policy(obs))
        total += reward
        turns += 1
        if terminated or truncated:  # either way the episode is over
            return total, turns, bool(info["success"])


def make_task():
    """A GuessNumber task entry: 11 hidden in 1..16, 4 guesses, a correct guess worth 2.0."""
    return {
        "id": "my-guess-11",
        "type": "guess",
        "query": "Find the hidden number between 1 and 16. You have 4 guesses.",
        "answer": 11,
        "tools": ["guess"],
        "max_steps": 4,
        "reward_weights": {"correct": 2.0},
        "difficulty": 0,
        "data": {"lo": 1, "hi": 16},
    }


def register_variant():
    """WebSearch without the evidence constraint, under its own id."""
    env_id = "learner/WebSearchNoEvidence-v0"
    if env_id not in gym.registry:
        gym.register(id=env_id, entry_point="agentlab.envs.websearch:WebSearchEnv",
                     kwargs={"require_evidence": False})
    return env_id
