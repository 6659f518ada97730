"""`agentlab demo`: warm up the tiny policy, train it with GRPO, and show before and after.

The demo trains on GuessNumber-v0 (difficulty 0: a number in 1..16, five guesses), the env
where a multi-turn policy visibly learns on two CPU cores within minutes. It starts from a
warm-up lazier than GuessNumber's own plan: ``LAZY_SHARE`` of the demonstrations come from a
lazy player who guesses the lowest number still possible, the rest from the bisecting expert.
Greedy decoding then follows the lazy majority and fails whenever the number is high, while
sampling still tries bisection now and then; those episodes win more often, and GRPO moves the
first guess (and every later one) towards it. Bisection only pays when every turn uses the
reply to the turn before, so the gain is a multi-turn one. From a start that already bisects,
RL has much less to show (bench/RESULTS.md compares the starts).

On the ``real-cpu`` profile the demo trains SmolLM2-135M-Instruct instead, on a tool-use env
(``agentlab demo --profile real-cpu --env Dialog``): the same loop, from the model's LoRA SFT
warm-up on the env's demonstrations, evaluated on 40 held-out tasks (levels 0 and 1).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from agentlab.algos import grpo
from agentlab.envs import full_id
from agentlab.flags import with_value
from agentlab.profiles import TINY, Profile, profile
from agentlab.train import TrainConfig, load_training_policy, resolve, train
from agentlab.warmup import profile_policy_source

DEMO_ENV = "agentlab/GuessNumber-v0"
LAZY_SHARE = 0.6  # the lazy demonstrator's share of the demo's warm-up (GuessNumber's own plan: 0.5)


def demo_policy(prof: Profile | str | None = None, progress: bool = True, env_id: str = DEMO_ENV) -> str:
    """The demo's starting policy: on the tiny profiles the warm-up on ``env_id`` (GuessNumber's with
    ``LAZY_SHARE`` lazy episodes, another env's by its own plan), on ``real-cpu`` the real model's
    warm-up on ``env_id`` (built and cached on first use), on ``gpu`` the profile's instruct model."""
    prof = prof if isinstance(prof, Profile) else profile(prof)
    share = LAZY_SHARE if full_id(env_id) == DEMO_ENV and prof.model == TINY else None
    return profile_policy_source(prof, envs=[full_id(env_id)], imperfect_share=share, progress=progress)


def demo_config(prof: Profile | str | None = None, out_dir: str = "runs/demo", policy: str | None = None,
                env_id: str = DEMO_ENV, **overrides) -> TrainConfig:
    """The demo's run on ``env_id``, every field concrete; ``policy`` is its starting point (default:
    `demo_policy`). ``overrides`` are `TrainConfig` fields by dotted name (``lr=3e-4``,
    ``**{"grpo.beta": 0.1}``), as ``agentlab demo``'s flags give them, set over the recipe. The
    gradient step keeps the recipe's size, so more questions per update means more steps per update."""
    prof = prof if isinstance(prof, Profile) else profile(prof)
    env_id = full_id(env_id)
    updates = overrides.pop("updates", None) or prof.rl_updates
    policy = policy or demo_policy(prof, env_id=env_id)
    if prof.model != TINY and prof.warm_up:
        cfg = real_model_config(prof, env_id, out_dir, updates, policy)
    else:
        # Outcome reward: GuessNumber's process reward (+0.1 per guess still possible) pays a long
        # lazy scan as much as a short bisection, which only blurs what the demo should show.
        cfg = TrainConfig(env_id=env_id, algo="grpo", profile=prof.name, difficulty=0, name="demo", updates=updates,
                          policy=policy, reward_mode="outcome", out_dir=out_dir,
                          eval_every=max(4, updates // 3), checkpoint_every=10)
    for dotted, value in overrides.items():  # the caller's, over either recipe
        cfg = with_value(cfg, dotted, value)
    return resolve(cfg, prof)


def real_model_config(prof, env_id: str, out_dir: str, updates: int, policy: str) -> TrainConfig:
    """GRPO for a real model on a CPU, where one update's rollout and backward pass take minutes:
    one optimiser step per update over the whole batch (several steps per batch at a LoRA learning
    rate ran away from the reference within one update), sampling at temperature 0.8 (at 1.0 the
    49k-token tail wrote malformed actions), and 40 held-out tasks from levels 0 and 1. Each episode
    samples from its own stream, so a laptop that must sample in chunks gets the same run."""
    episodes = prof.tasks_per_update * prof.group_size
    return TrainConfig(env_id=env_id, algo="grpo", profile=prof.name, difficulty=[0, 1], name="demo", updates=updates,
                       policy=policy, temperature=0.8, episode_streams=True, out_dir=out_dir, eval_every=updates,
                       grpo=grpo.GRPOSettings(epochs=1, minibatch_size=episodes))


def run_demo(profile_name: str | None = None, json_path: str | None = None, out_dir: str = "runs/demo",
             progress: bool = True, env_id: str = DEMO_ENV, **overrides) -> dict:
    """Train the demo and return (and optionally write) its summary: the JSON that
    ``agentlab demo --json`` writes (keys in docs/design.md). ``overrides``: as in `demo_config`."""
    prof = profile(profile_name)
    t0 = time.time()
    start = demo_policy(prof, progress, env_id)  # built here (cached after the first run) so that it is timed apart
    t_warm = time.time() - t0
    cfg = demo_config(prof, out_dir, policy=start, env_id=env_id, **overrides)
    shutil.rmtree(out_dir, ignore_errors=True)  # the demo always starts fresh
    t1 = time.time()
    result = train(cfg, load_training_policy(cfg), progress=progress)
    seconds = time.time() - t1
    before, after = result.evals[0], result.evals[-1]
    keep = ("success_rate", "success_ci95", "mean_turns", "distinct_tasks")
    summary = {
        "env": cfg.env_id, "algo": cfg.algo, "profile": prof.name, "quantization": cfg.quantization, "lr": cfg.lr,
        "temperature": cfg.temperature, "tasks_per_update": cfg.tasks_per_update, "seconds": round(seconds, 1),
        "warmup_seconds": round(t_warm, 1), "updates": len(result.history),
        "eval_episodes": before["episodes"],
        "before": {k: before[k] for k in keep}, "after": {k: after[k] for k in keep},
        "out_dir": str(result.out_dir),
        # the run's health: a policy that leaves its start too fast writes malformed actions
        "invalid_rate": [round(h["invalid_rate"], 4) for h in result.history],
        "kl": [round(h.get("kl", 0.0), 5) for h in result.history],
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
        f"\n{summary['env']} - {summary['algo'].upper()} on the {summary['profile']} profile"
        f"{', ' + summary['quantization'] if summary.get('quantization') else ''}, "
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

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(14, 3.6))
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
    ax3.plot(ups, [h["invalid_rate"] for h in history], label="invalid actions (sampled)")
    ax3.plot(ups, [h.get("kl", 0.0) for h in history], label="KL to the reference (per token)")
    # only a run with a cheaper sampler or is_correction logs these; others keep the plot they had
    for key, label in [("sampler_kl", "KL(sampler ‖ trainer) (per token)"),
                       ("sampler_clip_frac", "sampled tokens outside the clip range")]:
        if any(key in h for h in history):
            ax3.plot(ups, [h.get(key, float("nan")) for h in history], label=label)
    ax3.set(xlabel="update", title="health")
    ax3.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
