"""The tiny policy's SFT warm-up: a plan per env, the warmed policies it caches, and the profile's policy.

    path = warm_policy_path(profile("ci"), envs=["agentlab/GuessNumber-v0"])   # built once, then cached
    policy = profile_policy(prof, envs=["agentlab/Maze-v0"], lora=True)        # what a profile trains

A randomly initialised tiny model cannot write a single valid action, so before RL it is taught
the action grammar by SFT on scripted demonstrations (`agentlab.sft`). Envs differ in what it
must pick up first: a GuessNumber guess copies the range just stated, while a WebSearch answer
copies a made-up name out of a document and a Math step needs the times table. So each env gets
its own `WarmUp`, kept here rather than in the env, since it describes the tiny policy and not
the task. A real instruct model (the ``gpu`` profile) has no warm-up.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from agentlab.cache import atomic_save, build_lock, cache_dir, manifest_problem, reusable
from agentlab.envs import ENV_IDS, full_id, make
from agentlab.policy import LoraSettings, Policy, load_policy, model_source
from agentlab.profiles import TINY, Profile, profile
from agentlab.rollout import Trajectory
from agentlab.sft import demonstration, sft
from agentlab.tiny import build_tiny


@dataclass(frozen=True)
class WarmUp:
    """How one env is demonstrated to the tiny policy before RL."""

    levels: tuple[int, ...] = (0, 0, 1)  # difficulties demonstrated, cycled over the episodes
    episodes: int = 300  # distinct demonstrations
    steps: int = 300  # SFT steps (of `batch` episodes) when the env is warmed alone
    imperfect_share: float = 0.6  # share of episodes acted by the biased demonstrator
    env_kwargs: tuple = ()  # (name, value) pairs for the env that plays the demonstrations, e.g. (("analysis_share", 1.0),)
    batch: int | None = None  # episodes per SFT step; None = the profile's `sft_batch`


# Where the biased demonstrator rarely wins (SQL's careless query, Code's careless submission,
# Math's left-to-right reading), its share stays below a half: greedy decoding follows the
# majority habit, and a policy that only copied a losing habit would leave RL nothing to find.
WARM_UPS: dict[str, WarmUp] = {
    # 1..16 only: random offsets (level 1 and up) need arithmetic the tiny model lacks. Half lazy:
    # with the lazy habit in the majority greedy decoding plays it move for move (the GRPO demo
    # starts from that lazier mix on purpose, `agentlab.demo.LAZY_SHARE`).
    "agentlab/GuessNumber-v0": WarmUp(levels=(0,), imperfect_share=0.5),
    "agentlab/Maze-v0": WarmUp(),
    # Answers copy made-up names out of documents: copying needs many distinct examples.
    "agentlab/WebSearch-v0": WarmUp(episodes=3000, steps=1000),
    "agentlab/SQL-v0": WarmUp(episodes=3000, steps=1000, imperfect_share=0.4),
    "agentlab/Code-v0": WarmUp(episodes=1500, steps=1000, imperfect_share=0.4),
    # A step copies the question's numbers and needs the times table: the longest warm-up.
    "agentlab/Math-v0": WarmUp(levels=(0,), episodes=6000, steps=3000, imperfect_share=0.3),
    # act(...) copies the values the user gave: many distinct dialogues again.
    "agentlab/Dialog-v0": WarmUp(episodes=3000, steps=1000),
}


# A pretrained instruct model already reads and writes; it only has to pick up the action grammar
# and the envs' habits, so a few hundred demonstrations and a short LoRA SFT do for every env. Both
# levels its runs train and evaluate on are shown: a level the warm-up never showed (Dialog's
# second missing slot) is met with malformed actions RL must first unlearn.
PRETRAINED_WARM_UP = WarmUp(levels=(0, 1), episodes=256, steps=32)


def warm_up_plan(env_id: str, model: str = TINY) -> WarmUp:
    """The env's plan for ``model`` (``WarmUp()`` for an env registered without one)."""
    if model != TINY:
        return PRETRAINED_WARM_UP
    return WARM_UPS.get(full_id(env_id), WarmUp())


def fit_plan(plan: WarmUp, model: str = TINY) -> WarmUp:
    """An experiment's own plan (`agentlab.phenomena`) as ``model`` runs it: as written for the tiny policy,
    whose sizes it was set on; for a pretrained model cut to `PRETRAINED_WARM_UP`'s demonstrations and steps,
    keeping what makes the experiment (levels, biased share, env settings, batch). The tiny policy's hundreds of
    steps would take hours on a real model, which has only the action grammar and the habits to pick up."""
    if model == TINY:
        return plan
    return dataclasses.replace(plan, episodes=min(plan.episodes, PRETRAINED_WARM_UP.episodes),
                               steps=min(plan.steps, PRETRAINED_WARM_UP.steps))


def _recipe(plan: WarmUp) -> dict:
    """A plan as it enters the cache key; ``env_kwargs`` and ``batch`` only when set, so older plans keep their key."""
    d = dataclasses.asdict(plan)
    for field in ("env_kwargs", "batch"):
        if not d[field]:
            del d[field]
    return d


def demonstrations(policy, env_ids, seed: int = 0, episodes: int | None = None,
                   imperfect_share: float | None = None, levels: tuple[int, ...] | None = None,
                   model: str = TINY, plan: WarmUp | None = None) -> list[Trajectory]:
    """Each env's demonstrations as its plan says (``plan``, if given, is every env's plan): ``episodes``
    of them, cycling through ``levels``, ``imperfect_share`` of them by the biased demonstrator. An
    argument given here replaces the plan's value for every env."""
    rng = np.random.default_rng(seed)
    out = []
    for env_id in env_ids:
        env_plan = plan or warm_up_plan(env_id, model)
        env = make(env_id, **dict(env_plan.env_kwargs))
        share = env_plan.imperfect_share if imperfect_share is None else imperfect_share
        env_levels = levels or env_plan.levels
        for ep in range(episodes or env_plan.episodes):
            out.append(demonstration(policy, env, rng, share, env_levels[ep % len(env_levels)]))
        env.close()
    return out


def warm_policy_path(prof: Profile | None = None, envs: list[str] | str | None = None, force: bool = False,
                     progress: bool = True, imperfect_share: float | None = None, plan: WarmUp | None = None) -> Path:
    """The SFT-warmed policy of ``prof`` (the tiny one, or the profile's pretrained model), built
    and cached on first use.

    ``envs``: the env ids demonstrated (one id or a list); None = every env. Each env brings the
    demonstrations and SFT steps of its plan, so a policy warmed on several envs trains for the
    sum of their steps. ``plan``, if given, replaces every env's plan (a warm-up made for one
    experiment, e.g. `agentlab.phenomena`, cut to a pretrained model's size by `fit_plan`);
    ``imperfect_share``, if given, every env's biased share. Cached
    under ``cache_dir()/warm-<hash>``; the hash covers the tiny model's recipe, the envs and their
    plans (with the share given here) and the profile's SFT settings, so changing any of them
    warms a new one; a cached one that its manifest shows is not whole is warmed again. Build times
    per env are in bench/RESULTS.md (warm-up section).
    """
    prof = prof or profile()
    env_ids = list(ENV_IDS) if envs is None else [envs] if isinstance(envs, str) else list(envs)
    env_ids = [full_id(e) for e in env_ids]
    base = build_tiny(prof, verbose=progress) if prof.model == TINY else Path(model_source(prof.model))
    if imperfect_share is not None and not 0.0 <= imperfect_share <= 1.0:
        raise ValueError(f"imperfect_share is the share of biased demonstrations, between 0 and 1; got {imperfect_share}")
    plan = plan and fit_plan(plan, prof.model)
    plans = {e: plan or warm_up_plan(e, prof.model) for e in env_ids}
    if imperfect_share is not None:
        plans = {e: dataclasses.replace(plan, imperfect_share=float(imperfect_share)) for e, plan in plans.items()}
    steps = sum(plan.steps for plan in plans.values())
    batches = {plan.batch or prof.sft_batch for plan in plans.values()}
    if len(batches) > 1:  # one SFT run over every env's demonstrations has one batch size
        raise ValueError(f"these envs' warm-up plans ask for different SFT batches {sorted(batches)}; warm them "
                         "one env at a time, or pass one `plan` for all of them")
    batch = batches.pop()
    recipe = {"base": base.name, "envs": env_ids, "steps": steps, "batch": batch, "lr": prof.sft_lr,
              "episodes": sum(plan.episodes for plan in plans.values()), "seed": prof.seed,
              "warm_up": {e: _recipe(plan) for e, plan in plans.items()}, "version": 3}
    if prof.sft_lora_r:
        recipe["lora_r"] = prof.sft_lora_r
    key = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]
    out = cache_dir() / f"warm-{key}"
    if not force and manifest_problem(out) is None:
        return out
    with build_lock(out):  # a process started beside this one may be building it
        if not force and reusable(out, "the warmed policy"):
            return out
        if progress:
            print(f"warming up {prof.model} on {', '.join(e.split('/')[-1] for e in env_ids)} "
                  f"({steps} SFT steps, cached in {out}) ...")
        torch.manual_seed(prof.seed)
        lora = LoraSettings(r=prof.sft_lora_r, alpha=2 * prof.sft_lora_r) if prof.sft_lora_r else None
        policy = load_policy(str(base), device="cpu", lora=lora)
        t0 = time.time()
        demos = demonstrations(policy, env_ids, seed=prof.seed, imperfect_share=imperfect_share, model=prof.model, plan=plan)
        t_demo = time.time() - t0
        losses = sft(policy, demos, steps, batch, prof.sft_lr, seed=prof.seed, progress=progress)
        if lora:  # merged into the full-precision base, so that RL's reference is the warmed policy
            policy.model = policy.model.merge_and_unload()
        report = {**recipe, "demo_seconds": round(t_demo, 1), "sft_seconds": round(time.time() - t0 - t_demo, 1),
                  "loss_first": losses[0], "loss_last": float(np.mean(losses[-10:]))}
        atomic_save(out, lambda tmp: (policy.save(tmp), (tmp / "sft.json").write_text(json.dumps(report, indent=1))))
        return out


def profile_policy_source(prof: Profile | None = None, envs: list[str] | str | None = None,
                          imperfect_share: float | None = None, progress: bool = True, plan: WarmUp | None = None) -> str:
    """What the profile trains and evaluates: the SFT-warmed policy (the tiny one, or SmolLM2 on
    ``real-cpu``; warmed on ``envs``, built and cached on first use; ``plan`` and ``imperfect_share``
    replace the envs' warm-up plan and its biased share), or on ``gpu`` the instruct model as it comes."""
    prof = prof or profile()
    if not prof.warm_up:
        return prof.model
    return str(warm_policy_path(prof, envs=envs, imperfect_share=imperfect_share, progress=progress, plan=plan))


def profile_policy(prof: Profile | None = None, envs: list[str] | str | None = None,
                   lora: LoraSettings | bool | None = None, imperfect_share: float | None = None) -> Policy:
    """Load the profile's policy (see `profile_policy_source`) with the profile's quantization."""
    prof = prof or profile()
    return load_policy(profile_policy_source(prof, envs, imperfect_share), quantization=prof.quantization, lora=lora)
