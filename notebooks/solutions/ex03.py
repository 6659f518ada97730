"""Reference solutions of notebook 03's exercises (checked by tests/test_exercises.py)."""

import torch

from agentlab import metrics as M


def zscore(rewards, eps=1e-6):
    """(r - mean) / (population std + eps) over the batch."""
    r = torch.as_tensor(rewards, dtype=torch.float32)
    return (r - r.mean()) / (r.std(unbiased=False) + eps)


def shortcut_report(trajs):
    """The numbers that reveal a 'finish early' shortcut, which total reward hides."""
    infos = [info for t in trajs for info in t.infos]  # one per action
    shares = M.action_distribution([info["tool"] for info in infos])
    rates = M.step_level_rates([info["checks"] for info in infos])
    return {
        "mean_turns": M.mean_turns([t.num_turns for t in trajs]),
        "finish_share": shares.get("finish", 0.0),
        "read_share": shares.get("read", 0.0),
        "useful_read_rate": rates.get("read_after_search", 0.0),
    }
