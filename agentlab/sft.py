"""SFT warm-up: teach the tiny policy the action grammar from scripted demonstrations.

RL only has something to learn when the starting policy acts but is far from perfect. The
warm-up mixes the scripted expert with a *systematically* imperfect demonstrator (each env's
`imperfect_action`, e.g. GuessNumber's "guess the lowest number still possible"): measured
here, SFT on a biased demonstrator leaves a policy RL improves quickly, while SFT on randomly
corrupted demonstrations or stopped early leaves one it barely moves.

Each env plans its own warm-up (`WarmUp` in `envs/base.py`: how many distinct demonstrations,
at which difficulty levels, how many SFT steps, and the biased share). GuessNumber and Maze
need 300 episodes and 300 steps. Envs whose actions copy names, values or numbers out of the
conversation need 5 to 20 times the episodes and 3 to 10 times the steps: after 300 steps (on
3,000 episodes) the tiny model wrote the same Math steps whatever the question.
Where the biased demonstrator rarely wins at the levels demonstrated (SQL's and Code's careless
answers: 0 and 1 of the 40 level-0/1 eval tasks; Math's left-to-right reading: 6 of 20 at level
0), its share stays below a half, so that greedy decoding follows the expert's habit and RL
still meets the biased one in samples. Where it is the majority, greedy decoding repeats it
move for move: warmed with 60% lazy GuessNumber episodes, the policy's greedy episodes on the
20 level-0 eval tasks are exactly the lazy demonstrator's (3 won), and on the whole eval split
it cannot be told from the untrained model. GuessNumber's own plan is therefore half and half.
The GRPO demo and the course's GuessNumber notebooks warm with 60% on purpose
(``warm_policy_path(imperfect_share=agentlab.demo.LAZY_SHARE)``): RL then has a habit to trade
for a better one, and learns faster than from a start that already bisects (`agentlab.demo`).
`bench/RESULTS.md` (warm-up section) scores each env's biased demonstrator next to the policy.

Demonstrations are built token by token exactly as `rollout` builds a trajectory, and the
loss is on action tokens only (the end-of-turn token included).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from agentlab.models import Profile, _atomic_save, build_tiny, cache_dir, load_policy, profile
from agentlab.rollout import ACTION, OBSERVATION, PROMPT, Trajectory, json_safe, pad_batch


def demonstration(policy, env, rng: np.random.Generator, imperfect_share: float, difficulty: int = 0) -> Trajectory:
    """One episode acted from start to end by the expert or, with probability ``imperfect_share``,
    by the biased demonstrator; tokenised exactly as `rollout` tokenises a sampled one.

    The choice is made once per episode, not per action. Mixing per action gives a policy whose
    partial improvements do not pay (measured on GuessNumber: one bisection in a lazy episode
    succeeds no more often than none, 0.34 vs 0.37), so RL finds no slope to climb. Mixed per
    episode, the policy keeps two coherent habits and RL only has to learn to pick the better one.
    """
    base = env.unwrapped if hasattr(env, "unwrapped") else env
    obs, info = env.reset(seed=int(rng.integers(2**31)), options={"task": base.generate_task(rng, difficulty)})
    ids = policy.prompt_ids(base.system_prompt, obs)
    traj = Trajectory(env_id=f"agentlab/{base.name}-v0", task_id=info["task_id"], difficulty=difficulty,
                      messages=[{"role": "system", "content": base.system_prompt}, {"role": "user", "content": obs}])
    traj.append_tokens(ids, PROMPT)
    careless = rng.random() < imperfect_share
    while True:
        action = base.imperfect_action(rng) if careless else base.expert_action()
        traj.append_tokens(policy.encode(action) + [policy.eot_id], ACTION, turn=traj.num_turns)
        obs, reward, term, trunc, info = env.step(action)
        traj.actions.append(action)
        traj.rewards.append(float(reward))
        traj.components.append(dict(info["reward_components"]))
        traj.infos.append(json_safe(info))
        traj.messages.append({"role": "assistant", "content": action})
        if term or trunc:
            traj.terminated, traj.truncated, traj.success = term, trunc and not term, bool(info.get("success"))
            return traj
        traj.messages.append({"role": "user", "content": obs})
        traj.append_tokens(policy.observation_ids(obs), OBSERVATION)


def demonstrations(policy, env_ids, seed: int = 0, episodes: int | None = None,
                   imperfect_share: float | None = None, levels: tuple[int, ...] | None = None) -> list[Trajectory]:
    """Each env's demonstrations as its `WarmUp` plans them: ``episodes`` of them, cycling through
    ``levels``, ``imperfect_share`` of them by the biased demonstrator. An argument given here
    replaces the plan's value for every env."""
    from agentlab.envs import make

    rng = np.random.default_rng(seed)
    out = []
    for env_id in env_ids:
        env = make(env_id)
        plan = env.unwrapped.warm_up
        share = plan.imperfect_share if imperfect_share is None else imperfect_share
        env_levels = levels or plan.levels
        for ep in range(episodes or plan.episodes):
            out.append(demonstration(policy, env, rng, share, env_levels[ep % len(env_levels)]))
        env.close()
    return out


def sft_loss(policy, batch: dict) -> torch.Tensor:
    """Mean negative log-likelihood of the action tokens (B, L-1 masked)."""
    mask = batch["loss_mask"]
    logp = policy.score(batch["ids"], batch["attn"], only=mask)["logp"]  # (B, L-1), 0 off the actions
    return -(logp * mask).sum() / mask.sum().clamp(min=1)


def sft(policy, demos: list[Trajectory], steps: int, batch_size: int, lr: float, seed: int = 0,
        progress: bool = True) -> list[float]:
    """Train on demonstrations with AdamW; returns the loss of every step."""
    device = policy.device
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20) * max(0.05, 1 - s / steps))
    rng = np.random.default_rng(seed)
    by_length = np.argsort([len(d.token_ids) for d in demos], kind="stable")  # batches of similar length pad less
    size = min(batch_size, len(demos))
    losses = []
    policy.model.train()
    for _ in tqdm(range(steps), desc="SFT", disable=not progress):
        start = int(rng.integers(len(demos) - size + 1))
        idx = by_length[start:start + size]
        batch = {k: v.to(device) for k, v in pad_batch([demos[i] for i in idx], policy.pad_id).items()}
        loss = sft_loss(policy, batch)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.trainable_parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    policy.model.eval()
    return losses


def warm_policy_path(prof: Profile | None = None, envs: list[str] | str | None = None, force: bool = False,
                     progress: bool = True, imperfect_share: float | None = None) -> Path:
    """The SFT-warmed tiny policy of ``prof``, built and cached on first use.

    ``envs``: the env ids demonstrated (one id or a list); None = every env. Each env brings
    the demonstrations and SFT steps of its `WarmUp`, so a policy warmed on several envs trains
    for the sum of their steps. ``imperfect_share``, if given, replaces every env's biased share
    (the GRPO demo warms GuessNumber with `agentlab.demo.LAZY_SHARE`). Measured on a 2-core CPU
    (`bench/RESULTS.md`): GuessNumber 73 s, Maze 166 s, Dialog 338 s, SQL 373 s, WebSearch 444 s,
    Code 592 s, Math 863 s; all seven together (7,600 steps) about 45 minutes. The demo, the
    notebooks and ``agentlab eval`` each use the policy warmed on the env they run. Cached under
    ``cache_dir()/warm-<hash>``; the hash covers the tiny model's recipe, the envs and their
    warm-up plans (with the share given here), and the profile's SFT settings, so changing any
    of them warms a new one.
    """
    from agentlab.envs import ENV_IDS, env_class

    prof = prof or profile()
    env_ids = list(ENV_IDS) if envs is None else [envs] if isinstance(envs, str) else list(envs)
    env_ids = [e if e in ENV_IDS else f"agentlab/{env_class(e).name}-v0" for e in env_ids]
    base = build_tiny(prof, verbose=progress)
    if imperfect_share is not None and not 0.0 <= imperfect_share <= 1.0:
        raise ValueError(f"imperfect_share is the share of biased demonstrations, between 0 and 1; got {imperfect_share}")
    plans = {e: env_class(e).warm_up for e in env_ids}
    if imperfect_share is not None:
        plans = {e: dataclasses.replace(plan, imperfect_share=float(imperfect_share)) for e, plan in plans.items()}
    steps = sum(plan.steps for plan in plans.values())
    recipe = {"base": base.name, "envs": env_ids, "steps": steps, "batch": prof.sft_batch, "lr": prof.sft_lr,
              "episodes": sum(plan.episodes for plan in plans.values()), "seed": prof.seed,
              "warm_up": {e: dataclasses.asdict(plan) for e, plan in plans.items()}, "version": 3}
    key = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]
    out = cache_dir() / f"warm-{key}"
    if out.exists() and (out / "sft.json").exists() and not force:
        return out
    if progress:
        print(f"warming up the tiny policy on {', '.join(e.split('/')[-1] for e in env_ids)} "
              f"({steps} SFT steps, cached in {out}) ...")
    torch.manual_seed(prof.seed)
    policy = load_policy(str(base), device="cpu")
    t0 = time.time()
    demos = demonstrations(policy, env_ids, seed=prof.seed, imperfect_share=imperfect_share)
    t_demo = time.time() - t0
    losses = sft(policy, demos, steps, prof.sft_batch, prof.sft_lr, seed=prof.seed, progress=progress)
    report = {**recipe, "demo_seconds": round(t_demo, 1), "sft_seconds": round(time.time() - t0 - t_demo, 1),
              "loss_first": losses[0], "loss_last": float(np.mean(losses[-10:]))}
    _atomic_save(out, lambda tmp: (policy.save(tmp), (tmp / "sft.json").write_text(json.dumps(report, indent=1))))
    return out
