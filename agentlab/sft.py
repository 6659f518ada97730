"""SFT: supervised fine-tuning on demonstrations, tokenised exactly as `rollout` tokenises a sampled episode.

    demo = demonstration(policy, env, rng, imperfect_share=0.6)   # one scripted episode, as tokens
    losses = sft(policy, demos, steps=300, batch_size=32, lr=2e-3)

RL only has something to learn when the starting policy acts but is far from perfect, so a
demonstration is acted either by the env's scripted expert or, for a share of the episodes, by
its *systematically* imperfect demonstrator (`imperfect_action`, e.g. GuessNumber's "guess the
lowest number still possible"). A biased demonstrator leaves two coherent habits for RL to
choose between; randomly corrupted demonstrations or SFT stopped early leave a policy that RL
barely moves (bench/RESULTS.md). How much each env is demonstrated is planned in
`agentlab.warmup`. The loss is on action tokens only, the end-of-turn token included.
"""

from __future__ import annotations

import numpy as np
import torch
from tqdm.auto import tqdm

from agentlab.rollout import ACTION, OBSERVATION, PROMPT, Trajectory, pad_batch, play


def demonstration(policy, env, rng: np.random.Generator, imperfect_share: float, difficulty: int = 0) -> Trajectory:
    """One episode acted from start to end by the expert or, with probability ``imperfect_share``,
    by the biased demonstrator, with the tokens `rollout` would have produced.

    The choice is made once per episode, not per action: mixed per action, a partial improvement
    (one bisection in an otherwise lazy GuessNumber episode) does not pay, so RL finds no slope to
    climb; mixed per episode, RL only has to learn to pick the better of two habits.
    """
    base = env.unwrapped if hasattr(env, "unwrapped") else env
    seed = int(rng.integers(2**31))
    task = base.generate_task(rng, difficulty)
    careless = rng.random() < imperfect_share
    traj = play(env, (lambda e: e.imperfect_action(rng)) if careless else (lambda e: e.expert_action()), task, seed)
    return tokenise(policy, traj)


def tokenise(policy, traj: Trajectory) -> Trajectory:
    """Add to a recorded episode the tokens `rollout` would have given it: the prompt, each action
    followed by end-of-turn, and each reply but the last (an ended episode needs no next turn)."""
    if getattr(policy, "action_format", "call") != traj.action_format:
        raise ValueError(f"this demonstration writes its actions as {traj.action_format!r} and the policy as "
                         f"{policy.action_format!r}; to train the policy on it, set policy.action_format = "
                         f"{traj.action_format!r} first (it then acts in that format everywhere)")
    traj.append_tokens(policy.prompt_ids(traj.messages[0]["content"], traj.messages[1]["content"]), PROMPT)
    for turn, action in enumerate(traj.actions):
        traj.append_tokens(policy.encode(action) + [policy.eot_id], ACTION, turn=turn)
        if turn + 1 < traj.num_turns:  # messages: system, first observation, then (action, reply) per turn
            traj.append_tokens(policy.observation_ids(traj.messages[2 * turn + 3]["content"]), OBSERVATION)
    return traj


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
    # In a notebook the bar is a widget and each redraw a message to the front end: every 2 s rather than
    # every step keeps a warm-up of several minutes to a few hundred messages.
    for _ in tqdm(range(steps), desc="SFT", disable=not progress, mininterval=2.0):
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
