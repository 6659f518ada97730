"""Exercises of notebook 03 (rewards): z-scoring a batch, and the metrics that reveal a shortcut."""

from __future__ import annotations

import math

import torch

from agentlab.exercises import exercise, first_mismatch
from agentlab.rewards import zscore as _zscore
from agentlab.rollout import Trajectory

# ---------------------------------------------------------------------------- 03.zscore

_BATCHES = [
    [1.0, 0.0, 0.0, 1.0, 0.2, -0.2, 1.5, 0.3],
    [0.5, 0.5, 0.5, 0.5],  # all equal: must give zeros, not NaN
    [10.0, -3.0, 7.5],
]


def _reference_zscore(rewards):
    return _zscore(torch.tensor(rewards, dtype=torch.float32))


def _zscore_sample_std(rewards):
    r = torch.as_tensor(rewards, dtype=torch.float32)
    return (r - r.mean()) / (r.std() + 1e-6)


def _zscore_no_eps(rewards):
    r = torch.as_tensor(rewards, dtype=torch.float32)
    return (r - r.mean()) / r.std(unbiased=False)


def _zscore_no_centring(rewards):
    r = torch.as_tensor(rewards, dtype=torch.float32)
    return r / (r.std(unbiased=False) + 1e-6)


@exercise("03.zscore", wrong=[_zscore_sample_std, _zscore_no_eps, _zscore_no_centring])
def check_zscore(zscore) -> str | None:
    """write zscore(rewards) -> tensor: (r - mean) / (population std + 1e-6) over the batch"""
    return first_mismatch(_BATCHES, lambda batch: torch.as_tensor(zscore(torch.tensor(batch)), dtype=torch.float32),
                          _reference_zscore, _same_zscores, _explain_zscore)


def _same_zscores(got, want) -> bool:
    return got.shape == want.shape and abs(float(got.mean())) <= 1e-4 and torch.allclose(got, want, atol=1e-4)


def _explain_zscore(batch, got, want) -> str:
    if got.shape != want.shape:
        return f"for {len(batch)} rewards return {len(batch)} values, got shape {tuple(got.shape)}."
    if not torch.isfinite(got).all():
        return (f"on the batch {batch} you returned {got.tolist()}: when every reward is equal the std is 0; "
                "add a small eps (1e-6) to the std so the result is 0, not NaN.")
    if abs(float(got.mean())) > 1e-4:
        return f"z-scores should have mean 0; yours have mean {float(got.mean()):+.3f}: subtract the batch mean."
    ratio = float(got.std(unbiased=False)) if len(batch) > 1 else math.nan
    return (f"on {batch} expected {[round(x, 3) for x in want.tolist()]}, got "
            f"{[round(x, 3) for x in got.tolist()]} (their std is {ratio:.3f}, should be 1): divide by the "
            "population std (unbiased=False), the spread of this batch itself.")


# ---------------------------------------------------------------------------- 03.shortcut_report


def _traj(tools: list[str | None], checks: list[dict], success: bool) -> Trajectory:
    return Trajectory(env_id="agentlab/WebSearch-v0", task_id="t", actions=[str(t) for t in tools],
                      rewards=[0.0] * len(tools), components=[{} for _ in tools],
                      infos=[{"tool": t, "valid": t is not None, "checks": c} for t, c in zip(tools, checks)],
                      terminated=True, success=success)


def _cases() -> list[list[Trajectory]]:
    thorough = _traj(["search", "read", "finish"], [{"search_hit": True}, {"read_after_search": True}, {}], True)
    sloppy = _traj(["search", "search", "read", "finish"],
                   [{"search_hit": False}, {"search_hit": True}, {"read_after_search": False}, {}], False)
    shortcut = _traj(["search", "finish"], [{"search_hit": True}, {}], False)
    guess = _traj(["finish"], [{}], True)
    refused = _traj([None, "search", None, "read", "finish"],
                    [{}, {"search_hit": True}, {}, {"read_after_search": True}, {}], True)
    return [[thorough, sloppy, shortcut, guess], [shortcut, guess, guess], [thorough, refused]]


def _reference_report(trajs):
    from agentlab import metrics as M

    infos = [i for t in trajs for i in t.infos]
    shares = M.action_distribution([i["tool"] for i in infos])
    return {"mean_turns": M.mean_turns([t.num_turns for t in trajs]),
            "finish_share": shares.get("finish", 0.0),
            "read_share": shares.get("read", 0.0),
            "useful_read_rate": M.step_level_rates([i["checks"] for i in infos]).get("read_after_search", 0.0)}


def _report_per_episode_share(trajs):
    out = _reference_report(trajs)
    out["finish_share"] = sum(any(i["tool"] == "finish" for i in t.infos) for t in trajs) / len(trajs)
    return out


def _report_rate_over_all_steps(trajs):
    out = _reference_report(trajs)
    infos = [i for t in trajs for i in t.infos]
    out["useful_read_rate"] = sum(bool(i["checks"].get("read_after_search")) for i in infos) / len(infos)
    return out


def _report_without_read(trajs):
    out = _reference_report(trajs)
    del out["read_share"]
    return out


_HINTS = {
    "mean_turns": "the mean number of turns (actions) per episode",
    "finish_share": "finish actions divided by ALL actions of all episodes, not by episodes",
    "read_share": "read actions divided by all actions",
    "useful_read_rate": "count only the steps where the check read_after_search applies (read steps), not every step",
}


@exercise("03.shortcut_report", wrong=[_report_per_episode_share, _report_rate_over_all_steps, _report_without_read])
def check_shortcut_report(shortcut_report) -> str | None:
    """write shortcut_report(trajs) -> dict with mean_turns, finish_share, read_share (shares of all actions) and
    useful_read_rate (share of read steps whose check read_after_search passed; 0.0 if no read)"""
    return first_mismatch(_cases(), shortcut_report, _reference_report, _same_report, _explain_report)


def _same_report(got, want) -> bool:
    return (isinstance(got, dict) and set(want) <= set(got)
            and all(math.isclose(float(got[key]), value, abs_tol=1e-9) for key, value in want.items()))


def _explain_report(trajs, got, want) -> str:
    if not isinstance(got, dict):
        return f"return a dict with keys {sorted(want)}, got {type(got).__name__}."
    missing = set(want) - set(got)
    if missing:
        return f"your dict lacks {sorted(missing)}; expected keys {sorted(want)}."
    key, value = next((k, v) for k, v in want.items() if not math.isclose(float(got[k]), v, abs_tol=1e-9))
    return (f"{key} should be {value:.3f} on a batch of {len(trajs)} episodes, you gave "
            f"{float(got[key]):.3f}: {_HINTS[key]}.")
