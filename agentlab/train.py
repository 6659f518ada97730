"""The training loop: sample tasks → rollout → shape rewards → advantages → update → evaluate.

    cfg = train_config(profile("ci"), "agentlab/GuessNumber-v0", algo="grpo")   # every field concrete
    policy = load_training_policy(cfg)              # the start (the profile's warm-up) with a new LoRA adapter
    result = train(cfg, policy, callbacks=[dashboard])   # runs/<name>/metrics.jsonl, checkpoints/
    result = train(cfg, policy, resume=True)        # continue a killed or interrupted run where it stopped

Everything a run writes lives in ``cfg.out_dir``: ``config.json``, ``metrics.jsonl`` (one
line per update), ``eval.jsonl`` (greedy success on held-out tasks), ``checkpoints/`` (the
trainable weights, optimiser, value head and RNG states, written atomically every
``checkpoint_every`` updates, or after any update once ``checkpoint_seconds`` have passed) and
``final/`` (the adapter, loadable with `load_policy`).

Each update draws its tasks and sampling noise from generators seeded by (seed, update), so
a resumed run continues exactly as if it had never stopped.

Ctrl-C (a notebook's "interrupt kernel") stops the run where it is. Outside an update's gradient
steps the policy in memory is the last whole update, and `stop_interrupted` checkpoints it; inside
them it is partly updated, and resuming loads the last checkpoint over it. Either way the run prints
the call that resumes, then the KeyboardInterrupt goes on, so the cell stops as interrupted.

Before the first rollout, `preflight` prints the run's memory estimate and plans what fits: each
minibatch runs in micro-batches of ``micro_batch_tokens``, and where the KV cache of a whole update's
episodes would not leave room for the update, the rollout samples them in chunks of whole groups. A
run that cannot fit even one episode at a time stops with an error that names what to lower.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from tqdm.auto import tqdm

from agentlab import memory
from agentlab import metrics as M
from agentlab.algos import grpo, ppo
from agentlab.cache import atomic_save
from agentlab.envs import env_class, make
from agentlab.envs.base import ECHO_CHARS, FORMATS
from agentlab.evaluate import evaluate_tasks, reflection_note, run_episodes
from agentlab.policy import LoraSettings, Policy, load_policy
from agentlab.profiles import Profile, profile
from agentlab.rewards import RewardShaping, shape_group_rewards
from agentlab.rollout import TOO_LONG, SamplingSettings, Trajectory, play, rollout, save_jsonl
from agentlab.sampler import SAMPLERS, int8_sampler
from agentlab.tasks import Task, load_tasks
from agentlab.warmup import profile_policy_source


class TrainingDiverged(RuntimeError):
    """Raised after ``max_bad_updates`` updates in a row had a NaN or infinite loss, or a KL to the
    reference above ``max_kl``."""


@dataclass
class TrainConfig:
    """One training run. `train_config` builds one with every field concrete; a ``None`` in a field
    marked "the profile's" is filled from the profile by `resolve`, and ``config.json`` holds the
    values the run used."""

    env_id: str = "agentlab/GuessNumber-v0"  # Gymnasium id of the env to train on
    algo: str = "grpo"  # "grpo" or "ppo"
    profile: str | None = None  # "ci", "cpu", "real-cpu" or "gpu"; None = AGENTLAB_PROFILE or the hardware
    policy: str | None = None  # model folder or hub id to start from; None = the profile's warm-up on env_id
    quantization: str | None = "profile"  # None, "4bit", "8bit" or "profile"
    lora_r: int | None = None  # LoRA rank (None: the profile's)
    updates: int | None = None  # number of updates (None: the profile's)
    tasks_per_update: int | None = None  # distinct tasks per update (None: the profile's)
    group_size: int | None = None  # samples per task (GRPO's group; PPO just gets more episodes); None: the profile's
    lr: float | None = None  # AdamW learning rate of the adapter (and value head); None: the profile's
    temperature: float = 1.0  # sampling temperature for training [0.7, 1.0]; eval is greedy
    # episode_streams: a run's episodes then do not depend on how its rollout is split into chunks, which the free
    # memory decides (`memory_plan`). Off by default only because the tiny-policy notebooks' asserts were
    # calibrated on one stream per batch.
    episode_streams: bool = False  # each episode samples from its own stream, keyed from (seed, update)
    top_p: float = 1.0  # nucleus sampling; 1.0 keeps training on-policy
    max_new_tokens: int | None = None  # token budget per turn (default: the profile's on this env)
    difficulty: int | list[int] = 0  # task difficulty level(s) sampled for training
    stratify: bool = False  # equal share of every difficulty level in each batch (S29)
    horizon: tuple[int, int] | None = None  # (first, last) max_steps, raised linearly over training (S17)
    reward_mode: str = "process"  # "process" or "outcome" rewards from the env
    env_kwargs: dict = field(default_factory=dict)  # extra env arguments (e.g. require_evidence)
    shaping: RewardShaping = field(default_factory=RewardShaping)  # batch-level reward shaping
    reflection: bool = False  # retry all-failed groups with the failure reason and train on both (S26)
    grpo: grpo.GRPOSettings = field(default_factory=grpo.GRPOSettings)  # GRPO hyperparameters
    ppo: ppo.PPOSettings = field(default_factory=ppo.PPOSettings)  # PPO hyperparameters
    micro_batch_tokens: int | None = None  # most tokens (rows × padded length) per pass; None = the most that fits
    gradient_checkpointing: bool = False  # recompute activations in backward: less memory, slower; pays on a real model
    share_prompts: bool | None = None  # run a group's prompt once in sampling and scoring (same numbers, less work)
    eval_every: int = 10  # greedy evaluation on held-out tasks every N updates (and at start and end)
    eval_episodes: int | None = None  # episodes per evaluation (None: the profile's)
    checkpoint_every: int = 10  # write a checkpoint every N updates
    checkpoint_seconds: float | None = None  # also after any update once this many seconds passed (None: the profile's)
    max_bad_updates: int = 3  # stop after this many non-finite (or max_kl) updates in a row
    action_format: str | None = None  # "call" or "tool_call"; None = the policy's native format (written to config.json)
    max_kl: float | None = None  # warn when the KL to the reference passes this, stop after max_bad_updates; None = off
    sampler: str | None = None  # sample with a cheaper copy, rebuilt every update: "int8" or "int8-partial" (CPU only)
    # sampler_max_kl: a warning, not a guard (the run goes on). 0.02 is the KL a healthy update moves the policy
    # (`agentlab.metrics`' approx_kl band): a sampler farther from the trainer than that makes every batch as stale
    # as one more update. bench/RESULTS.md ("A cheaper sampler") puts float32 at ~1e-11 and SmolLM2's int8 copies
    # at 0.37 (every linear) and 0.078 (lm_head, down_proj float), so it passes the trainer's own dtype and flags
    # both int8 copies of that model; it is chosen from those numbers, not calibrated against learning curves.
    sampler_max_kl: float | None = 0.02  # warn when sampler_kl (the sampler's KL to the trainer) passes this; None: off
    name: str = "run"  # run name; output goes to out_dir
    out_dir: str | None = None  # None = runs/<name>
    seed: int = 0  # seeds tasks, sampling and minibatch order


def train_config(prof: Profile, env_id: str, **fields) -> TrainConfig:
    """The run ``prof`` gives on ``env_id``, with ``fields`` (any `TrainConfig` field) on top and every
    profile-dependent field filled in: print it to see the learning rate, batch and budget a run uses."""
    return resolve(TrainConfig(env_id=env_id, profile=prof.name, **fields), prof)


def resolve(cfg: TrainConfig, prof: Profile | None = None) -> TrainConfig:
    """Fill every ``None`` from the profile (``prof``, else the one ``cfg.profile`` names) and check
    the fields that cannot work together (derived values, computed in one place)."""
    prof = prof or profile(cfg.profile)
    if cfg.algo not in ("grpo", "ppo"):
        raise ValueError(f"algo must be 'grpo' or 'ppo', got {cfg.algo!r}")
    shaping = cfg.shaping
    if cfg.algo == "ppo" and (shaping.zscore or shaping.floor_reward or shaping.diversity_penalty):
        # Each shaping step rewrites an episode's total against its group or batch, while PPO's GAE
        # reads per-turn rewards, and no one way of spreading that change over the turns is right.
        raise ValueError("cfg.shaping (z-score, floor reward, diversity penalty) shapes episode rewards for GRPO's "
                         "groups; PPO learns from per-turn rewards: switch the shaping off or use algo='grpo'")
    if cfg.grpo.advantage not in grpo.ADVANTAGES:
        raise ValueError(f"grpo.advantage must be one of {grpo.ADVANTAGES}, got {cfg.grpo.advantage!r}")
    if not cfg.temperature > 0:  # training samples divide the logits by it
        raise ValueError(f"temperature must be above 0 (evaluation is greedy already); got {cfg.temperature}")
    if cfg.action_format not in (None, *FORMATS):
        raise ValueError(f"action_format must be one of {FORMATS} or None (the policy's own), got {cfg.action_format!r}")
    if cfg.tasks_per_update is not None and cfg.tasks_per_update < 1:
        raise ValueError(f"tasks_per_update must be at least 1 (questions sampled per update); got {cfg.tasks_per_update}")
    env_class(cfg.env_id)  # unknown ids fail here, with the list of known ones
    quantization = prof.quantization if cfg.quantization == "profile" else cfg.quantization
    if cfg.sampler is not None and cfg.sampler not in SAMPLERS:
        raise ValueError(f"sampler must be None (sample with the trainer itself) or one of {tuple(SAMPLERS)}, "
                         f"got {cfg.sampler!r}")
    if cfg.sampler is not None and (quantization is not None or prof.device != "cpu"):
        # PyTorch's dynamic int8 kernels are CPU kernels, and a bitsandbytes base has no float weights to quantise
        raise ValueError(f"sampler={cfg.sampler!r} samples from a dynamic int8 copy of a float policy on the CPU; this "
                         f"run's policy is {quantization or 'float'} on {prof.device} (profile {prof.name!r}). Drop "
                         "the sampler (sampler=None, --sampler none) or train on a CPU profile with quantization=None")
    pick = lambda value, default: default if value is None else value  # noqa: E731
    return dataclasses.replace(
        cfg, profile=prof.name,
        quantization=quantization,
        lora_r=pick(cfg.lora_r, prof.lora_r), updates=pick(cfg.updates, prof.rl_updates),
        tasks_per_update=pick(cfg.tasks_per_update, prof.tasks_per_update),
        group_size=pick(cfg.group_size, prof.group_size), lr=pick(cfg.lr, prof.rl_lr),
        max_new_tokens=pick(cfg.max_new_tokens, prof.turn_tokens(cfg.env_id)),
        eval_episodes=pick(cfg.eval_episodes, prof.eval_episodes),
        share_prompts=pick(cfg.share_prompts, prof.share_prompts),
        checkpoint_seconds=pick(cfg.checkpoint_seconds, prof.checkpoint_seconds),
        out_dir=pick(cfg.out_dir, f"runs/{cfg.name}"),
    )


def load_training_policy(cfg: TrainConfig) -> Policy:
    """The policy ``train`` takes: a new LoRA adapter on ``cfg.policy``, or on the profile's warm-up on
    ``cfg.env_id`` (built and cached on first use) where that is None. The adapter's initial weights
    are drawn under ``cfg.seed``, so the same config starts from the same policy."""
    cfg = resolve(cfg)
    source = cfg.policy or profile_policy_source(profile(cfg.profile), envs=[cfg.env_id])
    torch.manual_seed(cfg.seed)
    return load_policy(source, quantization=cfg.quantization, lora=LoraSettings(r=cfg.lora_r, alpha=2 * cfg.lora_r))


@dataclass
class TrainResult:
    policy: Policy
    history: list[dict]  # one metrics dict per update
    evals: list[dict]  # {"update", "success_rate", "success_ci95", "episodes"}
    out_dir: Path


# ---------------------------------------------------------------------------- sampling tasks

def sample_tasks(env, cfg: TrainConfig, rng: np.random.Generator) -> list:
    """``tasks_per_update`` tasks from the env's generator at the configured difficulty."""
    levels = cfg.difficulty if isinstance(cfg.difficulty, (list, tuple)) else [cfg.difficulty]
    if cfg.stratify:  # every level gets the same share of the batch, in a fixed order
        picks = [levels[i % len(levels)] for i in range(cfg.tasks_per_update)]
    else:
        picks = [levels[int(rng.integers(len(levels)))] for _ in range(cfg.tasks_per_update)]
    return [env.generate_task(rng, d) for d in picks]


def max_steps_at(cfg: TrainConfig, update: int) -> int | None:
    """The horizon schedule: max_steps rises linearly from ``horizon[0]`` to ``horizon[1]``."""
    if cfg.horizon is None:
        return None
    first, last = cfg.horizon
    frac = update / max(1, cfg.updates - 1)
    return int(round(first + frac * (last - first)))


def eval_tasks(cfg: TrainConfig) -> list:
    """Up to ``eval_episodes`` distinct held-out tasks at the training difficulty levels.

    Greedy decoding on a repeated task repeats the same episode, so tasks are never cycled:
    the interval is computed over distinct tasks only (GuessNumber's easiest level has 16).
    """
    levels = set(cfg.difficulty if isinstance(cfg.difficulty, (list, tuple)) else [cfg.difficulty])
    tasks, seen = [], set()
    for t in load_tasks(env_class(cfg.env_id).task_file(), "eval"):
        key = (t.query, json.dumps(t.answer), json.dumps(t.data, sort_keys=True))
        if t.difficulty in levels and key not in seen:
            seen.add(key)
            tasks.append(t)
    if not tasks:
        raise ValueError(f"{cfg.env_id}: the eval split has no task at difficulty {sorted(levels)}")
    return tasks[: cfg.eval_episodes]


def greedy_eval(policy: Policy, cfg: TrainConfig, tasks: list, max_steps: int | None = None,
                batch_size: int | None = None) -> dict:
    """Greedy success on ``tasks`` with its 95% interval (decoding as in deployment, S16);
    ``batch_size`` episodes at a time (default: all of them in one batch)."""
    env_kwargs = {"reward_mode": cfg.reward_mode, "max_steps": max_steps, **cfg.env_kwargs}
    settings = SamplingSettings(greedy=True, max_new_tokens=cfg.max_new_tokens)
    # no env seeds, as the loop has always evaluated; greedy decoding picks the same tokens in any batch
    res = evaluate_tasks(policy, cfg.env_id, tasks, settings, env_kwargs, batch_size=max(1, batch_size or len(tasks)),
                         seed=None)
    return {"success_rate": res.success_rate, "success_ci95": list(res.success_ci95), "episodes": res.episodes,
            "mean_turns": res.mean_turns, "distinct_tasks": res.tasks, "trajectories": res.trajectories}


# ---------------------------------------------------------------------------- one update's data

def collect(policy: Policy, cfg: TrainConfig, update: int, gen: torch.Generator,
            rng: np.random.Generator, rollout_rows: int | None = None) -> tuple[list[Trajectory], list[Trajectory]]:
    """Rollouts for one update in contiguous groups, ``rollout_rows`` episodes at a time (default: all in
    one batch); plus reflection retries of all-failed groups. ``policy`` samples them all: the trainer,
    or the cheaper copy of it that `train` builds for the update (``cfg.sampler``)."""
    steps = max_steps_at(cfg, update)
    env_kwargs = {"reward_mode": cfg.reward_mode, "max_steps": steps, **cfg.env_kwargs}
    tasks = sample_tasks(make(cfg.env_id, **env_kwargs), cfg, rng)
    group_tasks = [t for t in tasks for _ in range(cfg.group_size)]  # (N,) contiguous groups
    settings = SamplingSettings(temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens)
    envs = [make(cfg.env_id, **env_kwargs) for _ in group_tasks]
    step = rollout_rows or len(group_tasks)
    # One stream per batch: chunks draw from it one after another, so the run is reproducible for a given chunk
    # size only. Streams per episode: keys drawn once from the update's generator, so any chunking gives the same.
    keys = stream_keys(gen, len(group_tasks)) if cfg.episode_streams else None
    trajs = [t for s in range(0, len(group_tasks), step)
             for t in rollout(envs[s:s + step], policy, settings, tasks=group_tasks[s:s + step],
                              generator=gen if keys is None else None,
                              keys=None if keys is None else keys[s:s + step])]
    for i, t in enumerate(trajs):
        t.group = i // cfg.group_size
    retries: list[Trajectory] = []
    if cfg.reflection:
        for g in range(len(tasks)):
            group = trajs[g * cfg.group_size:(g + 1) * cfg.group_size]
            if any(t.success for t in group):
                continue
            # one batch per group, sampling on from the update's generator (or from keys it draws), so the draws
            # stay reproducible
            retry_keys = stream_keys(gen, cfg.group_size) if cfg.episode_streams else None
            redo = run_episodes(policy, cfg.env_id, [tasks[g]] * cfg.group_size, settings, env_kwargs,
                                batch_size=min(cfg.group_size, rollout_rows or cfg.group_size), seed=None,
                                prefixes=[reflection_note(group[0])] * cfg.group_size,
                                generator=gen if retry_keys is None else None, keys=retry_keys)
            for t in redo:
                t.group = len(tasks) + len(retries) // cfg.group_size
            retries += redo
    return trajs, retries


def stream_keys(gen: torch.Generator, n: int) -> list[int]:
    """``n`` sampling-stream keys (`agentlab.rollout.stream_uniform`) from ``gen``, 62 random bits each: two
    streams could only overlap where their keys differ by a small multiple of splitmix's step, a 2^-50 chance."""
    return torch.randint(0, 2 ** 62, (n,), generator=gen, device=gen.device).tolist()


def episode_rewards(trajs: list[Trajectory], cfg: TrainConfig) -> tuple[torch.Tensor, dict]:
    """Episode rewards (N,) after the batch-level shaping switched on in ``cfg.shaping``."""
    raw = torch.tensor([t.total_reward for t in trajs])
    completeness = torch.tensor([sum(i.get("valid", False) for i in t.infos) / max(1, t.num_turns) for t in trajs])
    texts = ["\n".join(t.actions) for t in trajs]
    return shape_group_rewards(raw, texts, cfg.group_size, cfg.shaping, completeness=completeness)


def batch_metrics(trajs: list[Trajectory], cfg: TrainConfig) -> dict:
    """The diagnostics that come from the episodes themselves (`agentlab.metrics.episode_metrics`)."""
    return M.episode_metrics(trajs, cfg.group_size)


# ---------------------------------------------------------------------------- the memory preflight

def episode_tokens(policy: Policy, env_id: str, env_kwargs: dict, tasks: list[Task],
                   max_new_tokens: int) -> tuple[int, int, int]:
    """(longest episode, shortest prompt, actions' tokens at most) for ``tasks``, in tokens, without sampling.

    An episode is its prompt, then up to max_steps turns of an action of at most ``max_new_tokens``
    and the env's reply. The longest reply is taken from the expert's episodes, the reply to a
    too-long action, and the reply to an invalid one with the quote of the action it echoes; the
    last reply may add the out-of-steps note. Capped at the model's context, as rollout caps it.
    """
    longest, shortest_prompt, most_actions = 0, None, 0
    fmt = policy.action_format
    for task in tasks:
        native = {} if fmt == "call" else {"action_format": fmt}  # an OpenEnv server's env knows only "call"
        env = make(env_id, **env_kwargs, **native)
        obs, info = env.reset(options={"task": task})
        tools = env.unwrapped.tool_schemas() if native else None
        prompt, steps = len(policy.prompt_ids(env.unwrapped.system_prompt, obs, tools)), info["max_steps"]
        invalid = len(policy.observation_ids(env.step("")[0])) + min(max_new_tokens, ECHO_CHARS) + 3  # + the quote
        if native:
            env.unwrapped.action_format = "call"  # the scripted expert writes the kit's grammar
        expert = [m["content"] for m in play(env, lambda e: e.expert_action(), task=task).messages[2:]
                  if m["role"] == "user"]
        replies = [invalid] + [len(policy.observation_ids(r)) for r in [TOO_LONG.format(n=max_new_tokens), *expert]]
        reply = 1 + max(replies)  # + the end-of-turn that closes a cut action
        note = len(policy.encode(f"\nOut of steps ({steps})."))
        longest = max(longest, prompt + steps * (max_new_tokens + reply) + note)
        shortest_prompt = prompt if shortest_prompt is None else min(shortest_prompt, prompt)
        most_actions = max(most_actions, steps * max_new_tokens)
        env.close()
    max_context = getattr(policy.model.config, "max_position_embeddings", 4096)
    return min(longest, max_context), shortest_prompt, most_actions


@dataclass(frozen=True)
class MemoryPlan:
    """What `preflight` settles before the first rollout."""

    micro_batch_tokens: int | None  # most tokens per forward+backward pass; None: whole minibatches
    rollout_rows: int | None  # episodes sampled in one batch; None: all of an update's (and all held-out tasks)


def rollout_chunks(rows: int, group_size: int) -> list[int]:
    """Smaller rollout batches to try when ``rows`` episodes at once do not fit, largest first: whole
    groups, so that a group's episodes share their prompt's cache, then parts of one group."""
    groups = [k * group_size for k in range((rows - 1) // group_size, 0, -1)]
    return groups + list(range(min(group_size, rows) - 1, 0, -1))


def preflight(policy: Policy, cfg: TrainConfig, tasks: list[Task]) -> MemoryPlan:
    """Print the run's memory estimate and plan what fits: the micro-batch budget in tokens
    (``cfg.micro_batch_tokens``, else the largest that fits; None where the available memory is unknown)
    and how many episodes the rollout samples at once. Where the KV cache of all of an update's episodes
    would leave too little room for the update, the rollout runs in chunks: the largest that leaves
    room for a pass over one group's episodes, else for one episode. Raises `MemoryBudgetError` when
    not even one episode at a time fits. ``cfg`` is resolved; ``tasks`` are its held-out tasks, whose
    prompts and replies bound an episode's length."""
    levels = cfg.difficulty if isinstance(cfg.difficulty, (list, tuple)) else [cfg.difficulty]
    rng = np.random.default_rng(cfg.seed)  # its own generator: the run's task draws stay as they are
    generated = [make(cfg.env_id, **cfg.env_kwargs).generate_task(rng, d) for d in levels]
    env_kwargs = {**cfg.env_kwargs, **({"max_steps": max(cfg.horizon)} if cfg.horizon else {})}
    context, prompt, actions = episode_tokens(policy, cfg.env_id, env_kwargs, tasks[:2] + generated, cfg.max_new_tokens)
    dtype = next(p.dtype for p in policy.model.parameters() if p.is_floating_point())
    shape = memory.ModelShape.from_config(policy.model.config, dtype, policy.quantization)
    # the int8 copy is built from a merged float copy of the weights, the larger of the two it holds at once
    sampler = shape.weight_bytes() if cfg.sampler is not None else 0.0
    trainable = policy.num_parameters(trainable_only=True) + (shape.hidden + 1 if cfg.algo == "ppo" else 0)
    rows = max(cfg.tasks_per_update * cfg.group_size, len(tasks))  # a training batch, or evaluation's one batch
    minibatch = (cfg.grpo if cfg.algo == "grpo" else cfg.ppo).minibatch_size * context  # the most one pass can hold
    # the model is loaded: what it holds counts both in the estimate and as available
    available = memory.available_bytes(policy.device)
    available = None if available is None else available + sum(
        p.numel() * p.element_size() for p in policy.model.parameters())

    def plan(rollout_rows: int) -> tuple[int | None, memory.MemoryEstimate]:
        sizes = dict(rollout_rows=rollout_rows, context=context, action_share=actions / (prompt + actions),
                     checkpointing=cfg.gradient_checkpointing, sampler=sampler)
        budget = cfg.micro_batch_tokens
        if budget is None and available is not None:
            budget = memory.largest_budget(shape, trainable, available, **sizes)
        return budget, memory.estimate(shape, trainable, minibatch if budget is None else min(budget, minibatch), **sizes)

    def fits(est: memory.MemoryEstimate) -> bool:
        return available is None or est.total <= memory.SAFE_SHARE * available

    budget, est = plan(rows)
    chunk = None
    if not fits(est):
        tried = [(r, *plan(r)) for r in rollout_chunks(rows, cfg.group_size)]
        roomy = [t for t in tried if fits(t[2]) and t[1] >= min(minibatch, cfg.group_size * context)]
        chunk, budget, est = (roomy or [t for t in tried if fits(t[2])] or [(None, budget, est)])[0]
    print(est.describe(available))
    if not fits(est):
        raise memory.MemoryBudgetError(memory_advice(est, available, cfg))
    if chunk is not None:
        print(f"sampling {chunk} episodes at a time: the KV cache of all {rows} at once would not leave room "
              f"for the update")
    return MemoryPlan(micro_batch_tokens=budget, rollout_rows=chunk)


def memory_advice(est: memory.MemoryEstimate, available: float, cfg: TrainConfig) -> str:
    """The error of a run that cannot fit: what it needs, and the settings that lower each part."""
    budget = (f"micro_batch_tokens (now {cfg.micro_batch_tokens:,})" if cfg.micro_batch_tokens else
              f"micro_batch_tokens (even one episode of {est.context:,} tokens per micro-batch does not fit)")
    episodes = f"tasks_per_update {cfg.tasks_per_update} × group_size {cfg.group_size}"
    knobs = [budget, f"the episodes per update ({episodes}: the KV cache)",
             f"max_new_tokens (now {cfg.max_new_tokens}: the episode length)"]
    knobs += [] if cfg.gradient_checkpointing else ["or set gradient_checkpointing=True (activations)"]
    size = memory.format_bytes
    return (f"this run needs about {size(est.total)}, more than {memory.SAFE_SHARE:.0%} of the {size(available)} "
            f"available ({est.describe()}). Lower " + ", ".join(knobs) + ".")


# ---------------------------------------------------------------------------- checkpoints

@contextlib.contextmanager
def sigint_deferred():
    """Hold back Ctrl-C (SIGINT; Jupyter's "interrupt kernel" sends one) until the block ends, then
    deliver it: what the block writes is finished rather than half done. Signals reach only the
    main thread, so in any other thread this defers nothing."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous is None:  # None: a handler set from C
        yield
        return
    pending = []
    signal.signal(signal.SIGINT, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if pending:
            signal.raise_signal(signal.SIGINT)  # to the handler it was meant for: KeyboardInterrupt, as a rule


def save_checkpoint(out_dir: Path, update: int, policy: Policy, optimizer, value_head, cfg: TrainConfig,
                    keep: int = 2, rng_state: torch.Tensor | None = None) -> Path:
    """Write ``checkpoints/update-NNNNN`` atomically (`atomic_save`: a run killed while writing leaves
    the previous checkpoint as the latest; Ctrl-C waits until it is written); keep the last ``keep``.
    ``rng_state`` is the torch RNG state to record (default: its state now)."""
    ckpt_dir = out_dir / "checkpoints"
    rng_state = torch.get_rng_state() if rng_state is None else rng_state

    def write(tmp: Path) -> None:
        trainable = {n: p.detach().cpu() for n, p in policy.model.named_parameters() if p.requires_grad}
        torch.save(trainable, tmp / "trainable.pt")
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        if value_head is not None:
            torch.save(value_head.state_dict(), tmp / "value_head.pt")
        state = {"update": update, "torch_rng": rng_state.tolist()}
        (tmp / "state.json").write_text(json.dumps(state))

    with sigint_deferred():
        for junk in ckpt_dir.glob(".update-*"):  # what a killed run was writing
            shutil.rmtree(junk, ignore_errors=True)
        final = ckpt_dir / f"update-{update:05d}"
        atomic_save(final, write)
        for old in sorted(ckpt_dir.glob("update-*"))[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(out_dir: Path) -> Path | None:
    ckpts = sorted((out_dir / "checkpoints").glob("update-*"))
    return ckpts[-1] if ckpts else None


def load_checkpoint(path: Path, policy: Policy, optimizer, value_head) -> int:
    """Restore weights, optimiser, value head and RNG; return the number of updates done."""
    trainable = torch.load(path / "trainable.pt")
    missing = set(trainable) - {n for n, _ in policy.model.named_parameters()}
    if missing:
        raise RuntimeError(f"checkpoint {path} does not match this model (unknown parameters {sorted(missing)[:3]})")
    policy.model.load_state_dict(trainable, strict=False)
    optimizer.load_state_dict(torch.load(path / "optimizer.pt"))
    if value_head is not None and (path / "value_head.pt").exists():
        value_head.load_state_dict(torch.load(path / "value_head.pt"))
    state = json.loads((path / "state.json").read_text())
    torch.set_rng_state(torch.tensor(state["torch_rng"], dtype=torch.uint8))
    return int(state["update"])


def _truncate_jsonl(path: Path, before_update: int) -> None:
    """Keep the lines of a metrics file that belong to updates before ``before_update``."""
    if not path.exists():
        return
    lines = [ln for ln in path.read_text().splitlines() if ln.strip() and json.loads(ln)["update"] < before_update]
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(ln + "\n" for ln in lines))
    os.replace(tmp, path)  # a resume interrupted here keeps the whole file, never an emptied one


def _append_jsonl(path: Path, record: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def resume_point(out_dir: Path) -> Path | None:
    """The checkpoint a resumed run continues from, said out loud; None (also said) when there is none."""
    ckpt = latest_checkpoint(out_dir)
    if ckpt is None:
        print(f"{out_dir} has no checkpoint: starting from update 0")
    else:
        print(f"resuming {out_dir} from update {json.loads((ckpt / 'state.json').read_text())['update']} ({ckpt.name})")
    return ckpt


def stop_interrupted(out_dir: Path, policy: Policy, optimizer, value_head, cfg: TrainConfig, in_memory: int | None,
                     logged: int, logged_rng: torch.Tensor) -> str:
    """After Ctrl-C in `train`: checkpoint the last whole update if the policy in memory still is that
    update and no checkpoint holds it, and say what the run kept and the call that resumes it.

    ``in_memory`` is the number of whole updates the policy holds (None: stopped in the gradient steps),
    ``logged`` the number whose metrics and evaluation are written, ``logged_rng`` the RNG state then."""
    def updates_in(ckpt: Path | None) -> int:
        return json.loads((ckpt / "state.json").read_text())["update"] if ckpt else 0

    if in_memory == logged > updates_in(latest_checkpoint(out_dir)):  # not 0: with no checkpoint a run starts over
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C again: the checkpoint is written whole (or not at all)
            save_checkpoint(out_dir, logged, policy, optimizer, value_head, cfg, rng_state=logged_rng)
    ckpt = latest_checkpoint(out_dir)
    saved = updates_in(ckpt)
    if in_memory is None:
        where = f"in the gradient steps of update {logged}: the policy in memory is partly updated"
    elif in_memory > logged:
        where = f"after the gradient steps of update {logged}, before its metrics were all written"
    else:
        where = f"after {logged} whole updates" if logged else "before the first update"
    if ckpt is None:
        kept, call = "There is no checkpoint yet.\nTo start again from update 0", "train(cfg, policy, resume=True)"
        if in_memory != 0:
            kept += " with a freshly loaded policy (the one in memory has changed)"
            call = "train(cfg, load_training_policy(cfg), resume=True)"
    else:
        held = ", as does the policy in memory" if in_memory == saved else "; the policy in memory differs from it"
        kept = (f"Checkpoint {ckpt} holds {saved} whole updates{held}.\n"
                f"To continue with update {saved} (resuming loads the checkpoint into the policy)")
        call = "train(cfg, policy, resume=True)"
    return (f"Training interrupted {where}. {kept}, with the same cfg:\n    {call}\n"
            f"or on the command line:\n    agentlab train --config {out_dir / 'config.json'} --resume")


# ---------------------------------------------------------------------------- health checks

def check_update(update: int, stats: dict, cfg: TrainConfig, streaks: dict[str, int]) -> str | None:
    """Warn about a bad update (NaN or infinite loss, KL to the reference above ``max_kl``); return why the
    run must stop once ``max_bad_updates`` bad ones came in a row, else None. ``streaks`` counts them.
    A sampler farther from the trainer than ``sampler_max_kl`` only warns, once per stretch of such updates."""
    nonfinite, kl = stats.get("nonfinite", 0.0), stats.get("kl")
    sampler_far = sampler_warning(update, stats, cfg, streaks.get("sampler", 0))
    streaks["sampler"] = streaks.get("sampler", 0) + 1 if sampler_far else 0
    if 0.0 < nonfinite < 1.0:
        warnings.warn(f"update {update}: {nonfinite:.0%} of its gradient steps had a NaN or infinite loss "
                      "and were skipped")
    if nonfinite >= 1.0:
        warnings.warn(f"update {update}: the loss was NaN or infinite; the update was skipped")
    kl_high = cfg.max_kl is not None and kl is not None and kl > cfg.max_kl
    if kl_high:
        warnings.warn(f"update {update}: the KL to the reference is {kl:.3g}, above max_kl={cfg.max_kl}: the policy "
                      f"is running away from the reference. Lower the learning rate (now {cfg.lr}) or the steps per "
                      "update (epochs, or larger minibatches)")
    streaks["nonfinite"] = streaks["nonfinite"] + 1 if nonfinite >= 1.0 else 0
    streaks["kl"] = streaks["kl"] + 1 if kl_high else 0
    if streaks["nonfinite"] >= cfg.max_bad_updates:
        return (f"{streaks['nonfinite']} updates in a row had a NaN or infinite loss (last: update {update}). "
                f"Lower the learning rate (now {cfg.lr})")
    if streaks["kl"] >= cfg.max_bad_updates:
        return (f"{streaks['kl']} updates in a row had a KL to the reference above max_kl={cfg.max_kl} (last: {kl:.3g} "
                f"at update {update}). Lower the learning rate (now {cfg.lr}) or the steps per update")
    return None


def sampler_warning(update: int, stats: dict, cfg: TrainConfig, streak: int) -> bool:
    """Whether this update's ``sampler_kl`` passed ``cfg.sampler_max_kl``; warns at the first such update
    after one below it (``streak``: such updates just before), since a sampler's distance rarely changes."""
    gap = stats.get("sampler_kl")
    far = cfg.sampler_max_kl is not None and gap is not None and gap > cfg.sampler_max_kl
    if far and streak == 0:
        settings = cfg.grpo if cfg.algo == "grpo" else cfg.ppo
        todo = (f"Correct for it ({cfg.algo}.is_correction='token_truncated')" if settings.is_correction is None else
                f"The correction's weights carry much of the signal (is_capped_frac "
                f"{stats.get('is_capped_frac', float('nan')):.1%} past is_cap={settings.is_cap})")
        closer = "a closer copy (sampler='int8-partial') or " if cfg.sampler == "int8" else ""
        warnings.warn(f"update {update}: the sampler's KL to the trainer is {gap:.3g} (sampler_kl), above "
                      f"sampler_max_kl={cfg.sampler_max_kl}; {stats.get('sampler_clip_frac', float('nan')):.0%} of "
                      f"its tokens start outside the clip range. {todo}, or sample with {closer}the trainer "
                      "(sampler=None). Not repeated while it stays above")
    return far


def warn_trained_again(policy: Policy, out_dir: Path) -> None:
    """Warn that a fresh run starts from weights earlier `train` calls moved: in a notebook, the training cell
    run a second time, whose results then differ from the first time's."""
    warnings.warn(f"this policy already holds the updates of an earlier train() call ({', '.join(policy.trained_in)}), "
                  f"so the run into {out_dir} continues from those weights, not from where the first run started "
                  "(a training cell run twice?). For the same result every time, load a fresh policy in the same "
                  "cell: policy = load_training_policy(cfg)", stacklevel=3)


# ---------------------------------------------------------------------------- the loop

def train(cfg: TrainConfig, policy: Policy, callbacks: list[Callable] = (), resume: bool = False,
          progress: bool = True) -> TrainResult:
    """Train ``policy`` (with a LoRA adapter, e.g. from `load_training_policy`) for ``cfg.updates``
    updates; see the module docstring for what is written where.

    ``callbacks`` are called as ``cb(update, metrics, trajectories)`` after every update.
    """
    if not isinstance(policy, Policy):
        raise TypeError(f"train(cfg, policy) takes a loaded Policy, got {type(policy).__name__}; "
                        "load one with load_training_policy(cfg)")
    policy.action_format = cfg.action_format or policy.action_format
    # config.json names the model the run started from and the format it writes, also where they were chosen for it
    cfg = dataclasses.replace(resolve(cfg), policy=cfg.policy or policy.name, action_format=policy.action_format)
    out_dir = Path(cfg.out_dir)
    if out_dir.exists() and not resume and latest_checkpoint(out_dir) is not None:
        raise FileExistsError(f"{out_dir} already holds a run; pass resume=True to continue it or pick another name")
    ckpt = resume_point(out_dir) if resume else None
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.json").write_text(json.dumps(dataclasses.asdict(cfg), indent=1, default=str))
    torch.manual_seed(cfg.seed)
    policy.share_prompts = cfg.share_prompts
    if cfg.gradient_checkpointing:  # non-reentrant: works with a frozen base under a LoRA adapter
        policy.model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    value_head = None
    params = policy.trainable_parameters()
    if cfg.algo == "ppo":
        value_head = ppo.ValueHead(policy.model.config.hidden_size).to(policy.device)
        params = params + list(value_head.parameters())
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    start = load_checkpoint(ckpt, policy, optimizer, value_head) if ckpt is not None else 0
    if start == 0:
        if policy.trained_in:
            warn_trained_again(policy, out_dir)
        for name in ("metrics.jsonl", "eval.jsonl"):
            (out_dir / name).unlink(missing_ok=True)
    _truncate_jsonl(out_dir / "metrics.jsonl", start)  # metrics of updates 0 .. start-1
    _truncate_jsonl(out_dir / "eval.jsonl", start + 1)  # evaluations after 0 .. start updates
    history = [json.loads(ln) for ln in (out_dir / "metrics.jsonl").read_text().splitlines()] \
        if (out_dir / "metrics.jsonl").exists() else []
    evals = [json.loads(ln) for ln in (out_dir / "eval.jsonl").read_text().splitlines()] \
        if (out_dir / "eval.jsonl").exists() else []
    held_out = eval_tasks(cfg)
    plan = preflight(policy, cfg, held_out)  # prints the estimate; stops a run that cannot fit
    micro_batch_tokens = plan.micro_batch_tokens

    def run_eval(update: int) -> None:
        res = greedy_eval(policy, cfg, held_out, batch_size=plan.rollout_rows)
        record = {"update": update, **{k: v for k, v in res.items() if k != "trajectories"}}
        evals.append(record)
        _append_jsonl(out_dir / "eval.jsonl", record)
        save_jsonl(res["trajectories"][:32], out_dir / f"eval-trajectories-{update:05d}.jsonl")

    if start == 0:
        run_eval(0)
    streaks = {"nonfinite": 0, "kl": 0, "sampler": 0}
    saved_at = time.monotonic()
    bar = tqdm(range(start, cfg.updates), desc=f"{cfg.algo} {cfg.env_id.split('/')[-1]}", disable=not progress,
               initial=start, total=cfg.updates)
    # whole updates the policy in memory holds (None during gradient steps), and those whose records are all written
    in_memory, logged, logged_rng = start, start, torch.get_rng_state()
    try:
        for update in bar:
            rng = np.random.default_rng([cfg.seed, update])
            seed = cfg.seed * 1_000_003 + update
            gen = torch.Generator(device=policy.device).manual_seed(seed)  # sampling's draws
            # the minibatch order is drawn on the CPU; there one stream serves both
            order = gen if gen.device.type == "cpu" else torch.Generator().manual_seed(seed)
            t0 = time.perf_counter()
            # a cheaper copy samples the update's episodes (and retries); rebuilt from the trainer every update, so
            # that it holds the adapter as it is now. Held-out evaluation stays greedy on the trainer itself.
            sampler = int8_sampler(policy, SAMPLERS[cfg.sampler]) if cfg.sampler is not None else policy
            t_built = time.perf_counter()
            trajs, retries = collect(sampler, cfg, update, gen, rng, plan.rollout_rows)
            del sampler  # the copy's memory goes back before the update
            batch = trajs + retries
            t1 = time.perf_counter()
            in_memory = None  # the gradient steps change the policy: from here only a checkpoint holds a whole update
            if str(out_dir) not in policy.trained_in:
                policy.trained_in.append(str(out_dir))
            if cfg.gradient_checkpointing:
                policy.model.train()  # transformers checkpoints layers in training mode only
            if cfg.algo == "grpo":
                rewards, shaping_info = episode_rewards(batch, cfg)
                stats = grpo.update(policy, optimizer, batch, rewards, cfg.group_size, cfg.grpo, generator=order,
                                    micro_batch_tokens=micro_batch_tokens, measure_sampler_gap=cfg.sampler is not None)
            else:
                shaping_info = {}
                stats = ppo.update(policy, optimizer, batch, cfg.ppo, value_head=value_head, generator=order,
                                   micro_batch_tokens=micro_batch_tokens, measure_sampler_gap=cfg.sampler is not None)
            if cfg.gradient_checkpointing:
                policy.model.eval()  # and sampling in eval mode, with its KV cache
            t2 = time.perf_counter()
            in_memory = update + 1
            action_tokens = sum(len(t.turn_index) - t.turn_index.count(-1) for t in batch)
            record = {"update": update, **batch_metrics(trajs, cfg), **stats, **shaping_info,
                      "max_steps": max_steps_at(cfg, update), "reflection_retries": len(retries),
                      "reflection_success": M.success_rate([t.success for t in retries]) if retries else None,
                      "tokens_per_s": action_tokens / max(t1 - t_built, 1e-9), "seconds_rollout": t1 - t_built,
                      "seconds_update": t2 - t1}
            if cfg.sampler is not None:
                record["seconds_sampler_build"] = t_built - t0
            if (why := check_update(update, stats, cfg, streaks)) is not None:
                _append_jsonl(out_dir / "metrics.jsonl", record)
                raise TrainingDiverged(f"{why} or resume from {latest_checkpoint(out_dir)}.")
            history.append(record)
            _append_jsonl(out_dir / "metrics.jsonl", record)
            done = update + 1
            if done % cfg.eval_every == 0 or done == cfg.updates:
                run_eval(done)
            logged, logged_rng = done, torch.get_rng_state()  # all of update `update` is on disk: a checkpoint may follow
            overdue = cfg.checkpoint_seconds is not None and time.monotonic() - saved_at >= cfg.checkpoint_seconds
            if done % cfg.checkpoint_every == 0 or done == cfg.updates or overdue:
                save_checkpoint(out_dir, done, policy, optimizer, value_head, cfg)
                saved_at = time.monotonic()
            bar.set_postfix(success=f"{record['success_rate']:.2f}", turns=f"{record['mean_turns']:.1f}")
            for cb in callbacks:
                cb(update, record, trajs)
        for cb in callbacks:
            if hasattr(cb, "close"):  # e.g. the dashboard draws its final state
                cb.close()
        policy.save(out_dir / "final")
    except KeyboardInterrupt:  # Ctrl-C, or Jupyter's "interrupt kernel"
        bar.close()
        if cfg.gradient_checkpointing:
            policy.model.eval()  # stopped in the update, the model would stay in training mode
        print(stop_interrupted(out_dir, policy, optimizer, value_head, cfg, in_memory, logged, logged_rng))
        raise  # the cell stops as interrupted, and cells queued after it do not run on a half-trained policy
    return TrainResult(policy=policy, history=history, evals=evals, out_dir=out_dir)
