"""CPU dtype by measurement: SmolLM2-135M with a LoRA adapter in float32, under bfloat16 autocast, and in
4-bit NF4 with float32 or bfloat16 compute.

A faster dtype is worth taking only where training still learns what it learns in float32,
so each variant is measured three ways:

* speed: action tokens/s sampled by `rollout` (8 GuessNumber envs, 3 turns of exactly 24
  tokens: the end-of-turn token is pushed out of reach) and tokens/s through the forward and
  backward pass of the SFT loss on a batch of 8 demonstrations;
* agreement: the largest and the mean gap between its log-probabilities of the demonstrations'
  action tokens and float32's (teacher-forced, no gradient);
* learning: the SFT loss over a few steps at a constant learning rate on WebSearch
  demonstrations, from the same adapter initialisation as float32.

A variant *agrees* when its last SFT loss is within ``LOSS_TOLERANCE`` (relative) of float32's.
The section names the fastest agreeing variant for sampling and for training, and says whether
the `real-cpu` profile (float32, no quantisation) is it.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np
import torch

from bench.common import SEED, SMOLLM2, bench_policy, median, progress, seconds, table, without_end_of_turn

SFT_ENV = "agentlab/WebSearch-v0"
LORA_R, LORA_ALPHA, LR = 16, 32, 1e-3  # the real-cpu profile's SFT adapter and rate
LOSS_TOLERANCE = 0.10
VARIANTS = {  # name -> (quantization, autocast to bfloat16, 4-bit compute dtype)
    "float32": (None, False, None),
    "bfloat16 autocast": (None, True, None),
    "4-bit NF4, float32 compute": ("4bit", False, torch.float32),
    "4-bit NF4, bfloat16 compute": ("4bit", False, torch.bfloat16),
}


def sizes(quick: bool) -> dict:
    """SFT steps, demonstrations per step, sampling envs and turns."""
    return {"steps": 4, "batch": 4, "envs": 4, "turns": 2} if quick else {"steps": 10, "batch": 8, "envs": 8, "turns": 3}


def load(name: str):
    """The variant's policy with a fresh LoRA adapter, initialised from the same seed for every variant;
    and a context manager that runs its forward passes in the variant's dtype."""
    from agentlab.policy import LoraSettings

    quantization, autocast, compute = VARIANTS[name]
    torch.manual_seed(SEED)
    policy = bench_policy(SMOLLM2, quantization=quantization, lora=LoraSettings(r=LORA_R, alpha=LORA_ALPHA))
    if compute is not None:
        import bitsandbytes as bnb

        for module in policy.model.modules():
            if isinstance(module, bnb.nn.Linear4bit):
                module.compute_dtype = compute
    mode = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if autocast else contextlib.nullcontext
    return policy, mode


def demonstrations(policy, n: int) -> list:
    """``n`` WebSearch level-0 demonstrations (60% by the biased demonstrator), tokenised for ``policy``."""
    from agentlab.envs import make
    from agentlab.sft import demonstration

    env, rng = make(SFT_ENV), np.random.default_rng(SEED)
    return [demonstration(policy, env, rng, imperfect_share=0.6) for _ in range(n)]


def action_logp(policy, mode, batch: dict) -> torch.Tensor:
    """Log-probabilities of the batch's action tokens, flattened (no gradient)."""
    with torch.no_grad(), mode():
        logp = policy.score(batch["ids"], batch["attn"], only=batch["loss_mask"])["logp"]
    return logp.float()[batch["loss_mask"].bool()]


def sample_speed(policy, mode, n_envs: int, turns: int) -> float:
    """Action tokens per second sampled by `rollout` (GuessNumber, fixed-length turns: `bench.rollout`'s side)."""
    from bench.rollout import agentlab_rollout

    with torch.no_grad(), mode(), without_end_of_turn(policy.model, policy.eot_id):
        elapsed, sampled = seconds(agentlab_rollout, policy, n_envs, turns)
    return sampled["tokens"] / elapsed


def sft_run(policy, mode, demos: list, steps: int, batch_size: int) -> dict:
    """``steps`` AdamW steps at a constant rate on consecutive slices of ``demos``: the loss of each step
    and the tokens/s of its forward and backward pass."""
    from agentlab.rollout import pad_batch
    from agentlab.sft import sft_loss

    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=LR, weight_decay=0.0)
    losses, rates = [], []
    policy.model.train()
    for step in range(steps):
        start_row = (step * batch_size) % len(demos)
        batch = pad_batch(demos[start_row:start_row + batch_size], policy.pad_id)
        start = time.perf_counter()
        with mode():
            loss = sft_loss(policy, batch)
        optimizer.zero_grad()
        loss.backward()
        rates.append(int(batch["attn"].sum()) / (time.perf_counter() - start))
        torch.nn.utils.clip_grad_norm_(policy.trainable_parameters(), 1.0)
        optimizer.step()
        losses.append(float(loss.detach()))
    policy.model.eval()
    return {"losses": losses, "train_tps": median(rates)}


def measure(quick: bool) -> dict[str, dict]:
    """Every variant, one loaded at a time."""
    from agentlab.rollout import pad_batch

    n = sizes(quick)
    rows, reference = {}, None
    for name in progress(list(VARIANTS), "dtype"):
        policy, mode = load(name)
        demos = demonstrations(policy, n["steps"] * n["batch"])
        probe = pad_batch(demos[:n["batch"]], policy.pad_id)
        logp = action_logp(policy, mode, probe)
        reference = logp if reference is None else reference
        gap = (logp - reference).abs()
        row = {"sample_tps": sample_speed(policy, mode, n["envs"], n["turns"]),
               "gap_max": float(gap.max()), "gap_mean": float(gap.mean()),
               **sft_run(policy, mode, demos, n["steps"], n["batch"])}
        print(f"  {name}: sampling {row['sample_tps']:.1f} tok/s, training {row['train_tps']:.0f} tok/s, "
              f"logp gap max {row['gap_max']:.3g}, SFT loss {row['losses'][0]:.2f} -> {row['losses'][-1]:.2f}",
              flush=True)
        rows[name] = row
        del policy
    return rows


def choose(rows: dict[str, dict]) -> tuple[str, str]:
    """Mark each variant ``agrees`` (its last SFT loss within ``LOSS_TOLERANCE`` of float32's) and return
    the fastest agreeing variant for sampling and for training (float32 agrees with itself)."""
    base = rows["float32"]["losses"][-1]
    for row in rows.values():
        row["agrees"] = abs(row["losses"][-1] - base) <= LOSS_TOLERANCE * base
    agreeing = [name for name, row in rows.items() if row["agrees"]]
    return max(agreeing, key=lambda k: rows[k]["sample_tps"]), max(agreeing, key=lambda k: rows[k]["train_tps"])


def run(quick: bool = False) -> str:
    """Measure every variant and return the RESULTS.md section."""
    n = sizes(quick)
    rows = measure(quick)
    base = rows["float32"]
    fastest_sampling, fastest_training = choose(rows)
    chosen = "the `real-cpu` profile's float32 is" if fastest_sampling == fastest_training == "float32" else \
        "the `real-cpu` profile (float32) is not"
    return "\n".join([
        f"SmolLM2-135M-Instruct with a LoRA adapter (r {LORA_R}, alpha {LORA_ALPHA}, the same initial weights in "
        f"every variant) on this CPU. Sampling: `rollout` over {n['envs']} GuessNumber envs x {n['turns']} turns "
        "of exactly 24 action tokens. Training: forward and backward of the SFT loss on "
        f"{n['batch']} WebSearch demonstrations per step, {n['steps']} AdamW steps at a constant lr {LR:g} "
        "(median tokens/s over the steps). Log-probability gap: |log p - log p(float32)| over the first "
        f"batch's action tokens before any step. *Agrees*: the last SFT loss within {LOSS_TOLERANCE:.0%} of "
        "float32's.",
        "",
        table(["variant", "sampling tokens/s", "training tokens/s", "log p gap max / mean", "SFT loss, each step",
               "agrees with float32"],
              [[name, r["sample_tps"], r["train_tps"], f"{r['gap_max']:.3g} / {r['gap_mean']:.3g}",
                " -> ".join(f"{x:.2f}" for x in r["losses"]), "yes" if r["agrees"] else "**no**"]
               for name, r in rows.items()]),
        "",
        f"Fastest variant that agrees with float32: **{fastest_sampling}** for sampling "
        f"({rows[fastest_sampling]['sample_tps'] / base['sample_tps']:.2f}x float32), **{fastest_training}** for "
        f"training ({rows[fastest_training]['train_tps'] / base['train_tps']:.2f}x float32); {chosen} that choice "
        "on this CPU. bfloat16 pays only on CPUs with AVX512-BF16 or AMX, and only where the loss still falls "
        "as in float32 (`bench/NOTES.md`).",
    ])
