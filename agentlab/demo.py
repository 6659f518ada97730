"""`agentlab demo`: warm up the tiny policy, train it with GRPO, and show before and after.

The demo trains on GuessNumber-v0 (difficulty 0: a number in 1..16, five guesses), the env
where a multi-turn policy visibly learns on two CPU cores within minutes. The warm-up copies
whole episodes of two demonstrators: ``LAZY_SHARE`` (60%) of them a lazy one that guesses the
lowest number still possible, the rest the bisecting expert. That is lazier than GuessNumber's
own warm-up plan (half and half, after which greedy decoding already bisects on most level-0
tasks), on purpose: greedy decoding follows the majority habit and fails whenever the number
is above 5; sampling still tries bisection now and then, those episodes win more often, and
GRPO moves the first guess (and every later one) towards it. Bisection only pays when every
turn uses the reply to the turn before, so the gain is a multi-turn one. Measured with
``--profile ci``: the 60% start goes from 0.125 to 0.875 in 12 updates; from the env's own plan
(50%) the 8 held-out games start at 0.875 and end there; from 40%, 0.50 to 0.75 in 24 updates and
still 0.75 after 48. The tool-use envs (WebSearch, SQL) need more updates than a five-minute
budget allows the tiny model; with a real model on a GPU the same loop trains on them.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from agentlab.models import profile
from agentlab.train import TrainConfig, train

DEMO_ENV = "agentlab/GuessNumber-v0"
LAZY_SHARE = 0.6  # the lazy demonstrator's share of the demo's warm-up (GuessNumber's own plan: 0.5)


def demo_config(profile_name: str | None = None, out_dir: str = "runs/demo", updates: int | None = None) -> TrainConfig:
    prof = profile(profile_name)
    updates = updates or prof.rl_updates
    # Outcome reward: GuessNumber's process reward (+0.1 per guess still possible) pays a long
    # lazy scan as much as a short bisection, which only blurs what the demo should show.
    return TrainConfig(env_id=DEMO_ENV, algo="grpo", profile=prof.name, difficulty=0, name="demo", updates=updates,
                       imperfect_share=LAZY_SHARE, reward_mode="outcome", out_dir=out_dir,
                       eval_every=max(4, updates // 3), checkpoint_every=10)


def run_demo(profile_name: str | None = None, json_path: str | None = None, out_dir: str = "runs/demo",
             progress: bool = True, updates: int | None = None) -> dict:
    """Train the demo and return (and optionally write) the DESIGN.md demo JSON."""
    from agentlab.sft import warm_policy_path

    prof = profile(profile_name)
    cfg = demo_config(prof.name, out_dir, updates)
    t0 = time.time()
    # the warm-up the run will load, built here (cached after the first run) so that it is timed apart
    warm_policy_path(prof, envs=[cfg.env_id], progress=progress, imperfect_share=cfg.imperfect_share)
    t_warm = time.time() - t0
    shutil.rmtree(out_dir, ignore_errors=True)  # the demo always starts fresh
    t1 = time.time()
    result = train(cfg, progress=progress)
    seconds = time.time() - t1
    before, after = result.evals[0], result.evals[-1]
    keep = ("success_rate", "success_ci95", "mean_turns", "distinct_tasks")
    summary = {
        "env": DEMO_ENV, "algo": cfg.algo, "profile": prof.name, "seconds": round(seconds, 1),
        "warmup_seconds": round(t_warm, 1), "updates": len(result.history),
        "eval_episodes": before["episodes"],
        "before": {k: before[k] for k in keep}, "after": {k: after[k] for k in keep},
        "out_dir": str(result.out_dir),
    }
    plot_path = plot_run(result.history, result.evals, Path(out_dir) / "demo.png")
    summary["plot"] = str(plot_path)
    if progress:
        print(report(summary, Path(out_dir)))
    if json_path:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def report(summary: dict, out_dir: Path) -> str:
    """A before/after table and two example trajectories from the last evaluation."""
    from agentlab.rollout import load_jsonl

    b, a = summary["before"], summary["after"]
    lines = [
        f"\n{summary['env']} - {summary['algo'].upper()} on the {summary['profile']} profile, "
        f"{summary['updates']} updates in {summary['seconds']:.0f} s",
        f"{'':24}{'before (SFT)':>16}{'after (RL)':>16}",
        f"{'greedy success':24}{b['success_rate']:>16.2f}{a['success_rate']:>16.2f}",
        f"{'95% interval':24}{'[%.2f, %.2f]' % tuple(b['success_ci95']):>16}{'[%.2f, %.2f]' % tuple(a['success_ci95']):>16}",
        f"{'turns per episode':24}{b['mean_turns']:>16.2f}{a['mean_turns']:>16.2f}",
        f"(held-out eval split, {summary['eval_episodes']} greedy episodes over {a['distinct_tasks']} distinct tasks)",
    ]
    last = sorted(out_dir.glob("eval-trajectories-*.jsonl"))
    if last:
        for t in load_jsonl(last[-1])[:2]:
            lines.append(f"\n{t.messages[1]['content']}")
            for action, msg in zip(t.actions, [m for m in t.messages[2:] if m["role"] == "user"] + [None] * 9):
                lines.append(f"  > {action:<14} {msg['content'] if msg else ''}")
    lines.append(f"\nplot: {summary['plot']}   metrics: {out_dir / 'metrics.jsonl'}")
    return "\n".join(lines)


def plot_run(history: list[dict], evals: list[dict], path: Path) -> Path:
    """Success (sampled in training, greedy on held-out tasks), return and turns per update."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    ups = [h["update"] for h in history]
    ax1.plot(ups, [h["success_rate"] for h in history], label="training (sampled)", alpha=0.7)
    ax1.plot([e["update"] for e in evals], [e["success_rate"] for e in evals], "o-", label="held-out (greedy)")
    lo = [e["success_ci95"][0] for e in evals]
    hi = [e["success_ci95"][1] for e in evals]
    ax1.fill_between([e["update"] for e in evals], lo, hi, alpha=0.2, color="C1")
    ax1.set(xlabel="update", ylabel="success rate", ylim=(0, 1.02), title="success")
    ax1.legend(loc="lower right")
    ax2.plot(ups, [h["mean_return"] for h in history], label="return")
    ax2.plot(ups, [h["mean_turns"] for h in history], label="turns per episode")
    ax2.set(xlabel="update", title="return and episode length")
    ax2.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
