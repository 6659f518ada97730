"""One GRPO step: agentlab (`rollout` + `agentlab.algos.grpo.update`) vs TRL's `GRPOTrainer`.

The task both can run is single-turn: GuessNumber's first guess (the env with
``max_steps=1``), rewarded by the agentlab env itself. Both sides start from the same model
in fp32 on the CPU with the same LoRA adapter (r=8, alpha=16, every linear layer), and per
step:

    sample PROMPTS tasks x GROUP_SIZE completions of exactly COMPLETION_TOKENS tokens
    -> env reward -> group-relative advantages -> reference logprobs (adapter off, beta=0.04)
    -> one clipped-surrogate + KL loss, backward and AdamW step over the whole batch

"One step" is generation plus update, since TRL's step contains both. The end-of-turn
token is suppressed on both sides (`bench.common.without_end_of_turn`) so the completions
have the same length whatever the untrained model samples; the rewards are then all equal
(every action is invalid), so agentlab is told not to skip zero-variance groups
(``drop_zero_variance=False``) — otherwise it would skip the backward pass that TRL does.
Seconds per step are the median over the steps after one warm-up step.

Two models: the untrained tiny policy, where both sides are mostly overhead, and
SmolLM2-135M-Instruct, where the arithmetic of a real model dominates a step (the issue's
goal is set there).
"""

from __future__ import annotations

import io
import json
import tempfile
import time

import torch

from bench.common import (MODELS, SEED, SMOLLM2, bench_policy, breakdown, cumulative, median, model_path,
                          profile_stats, progress, seconds, table, verdict, without_end_of_turn)

ENV_ID = "agentlab/GuessNumber-v0"
GROUP_SIZE = 8
COMPLETION_TOKENS = 24
LORA_R, LORA_ALPHA = 8, 16
LR, BETA, CLIP = 1e-3, 0.04, 0.2
GOALS = {"tiny": 2.0, SMOLLM2: 1.5}  # speed-up over TRL's defaults per GRPO step


def sizes(model: str, quick: bool) -> dict:
    """Prompts per step and timed steps (after one warm-up step); SmolLM2 steps take ~40x longer."""
    if quick:
        return {"prompts": 2, "steps": 1}
    return {"prompts": 4, "steps": 5 if model == "tiny" else 3}


def make_tasks(n: int, seed: int = SEED) -> list[dict]:
    """``n`` GuessNumber tasks at difficulty 0, as dicts, with the first observation each side sees."""
    import numpy as np

    from agentlab.envs import make

    env = make(ENV_ID, max_steps=1)
    rng = np.random.default_rng(seed)
    tasks = []
    for _ in range(n):
        task = env.generate_task(rng, 0).to_dict()
        obs, _ = env.reset(options={"task": task})
        tasks.append({"task": task, "system": env.system_prompt, "obs": obs})
    return tasks


def env_reward(text: str, task: dict) -> float:
    """The agentlab env's reward for ``text`` as the first (and only) action on ``task``."""
    from agentlab.envs import make

    env = make(ENV_ID, max_steps=1)
    env.reset(options={"task": task})
    return float(env.step(text)[1])


# ---------------------------------------------------------------------------- agentlab

def agentlab_steps(tasks: list[dict], n_prompts: int, n_steps: int, model: str = "tiny") -> dict:
    """Warm-up + ``n_steps`` agentlab GRPO steps; seconds per step, split into rollout and update."""
    from agentlab.algos import grpo
    from agentlab.envs import make
    from agentlab.policy import LoraSettings
    from agentlab.rollout import SamplingSettings, rollout

    torch.manual_seed(SEED)
    policy = bench_policy(model, lora=LoraSettings(r=LORA_R, alpha=LORA_ALPHA))
    policy.share_prompts = model != "tiny"  # as the real-model profiles have it: a group's prompt is read once
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=LR, weight_decay=0.0)
    settings = grpo.GRPOSettings(clip_coef=CLIP, beta=BETA, epochs=1, minibatch_size=n_prompts * GROUP_SIZE,
                                 drop_zero_variance=False)
    sampling = SamplingSettings(temperature=1.0, top_p=1.0, max_new_tokens=COMPLETION_TOKENS)
    gen = torch.Generator().manual_seed(SEED)

    def step(i: int) -> tuple[float, float]:
        batch = tasks[i * n_prompts:(i + 1) * n_prompts]
        group_tasks = [t["task"] for t in batch for _ in range(GROUP_SIZE)]  # contiguous groups
        envs = [make(ENV_ID, max_steps=1) for _ in group_tasks]
        t_roll, trajs = seconds(rollout, envs, policy, sampling, tasks=group_tasks, generator=gen)
        rewards = torch.tensor([t.total_reward for t in trajs])  # (N,)
        t_upd, _ = seconds(grpo.update, policy, optimizer, trajs, rewards, GROUP_SIZE, settings, generator=gen)
        lengths.append(max(len(t.token_ids) for t in trajs))
        return t_roll, t_upd

    lengths: list[int] = []

    def profile_step() -> None:
        """One more step on fresh tasks, for a profiler to watch."""
        with without_end_of_turn(policy.model, policy.eot_id):
            step(n_steps + 1)

    with without_end_of_turn(policy.model, policy.eot_id):
        times = [step(i) for i in progress(range(n_steps + 1), "grpo: agentlab steps")]
    timed = times[1:]
    return {"step_s": median([a + b for a, b in timed]), "rollout_s": median([a for a, _ in timed]),
            "update_s": median([b for _, b in timed]), "all": [a + b for a, b in times],
            "trainable": policy.num_parameters(trainable_only=True), "profile": profile_step,
            "seq_tokens": max(lengths), "eot_id": policy.eot_id}


# ---------------------------------------------------------------------------- TRL

def trl_steps(tasks: list[dict], n_prompts: int, n_steps: int, out_dir: str, eot_id: int,
              gradient_checkpointing: bool = True, profile_step: int | None = None, model: str = "tiny") -> dict:
    """Warm-up + ``n_steps`` steps of TRL's GRPOTrainer on the same tasks; seconds per step.

    TRL's GRPOConfig turns gradient checkpointing on by default (memory for compute);
    ``gradient_checkpointing=False`` measures it without. ``eot_id``: the token that ends a turn
    (agentlab's `Policy.eot_id` for the same model). With ``profile_step`` (0 = the
    warm-up step), that one step runs under cProfile and its statistics are returned too.
    """
    import cProfile
    import pstats

    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from agentlab.policy import LoraSettings

    class StepClock(TrainerCallback):
        """Wall-clock time at the start of training and at the end of every optimiser step;
        optionally one step (generation included: TRL generates inside the step) under cProfile."""

        def __init__(self):
            self.marks: list[float] = []
            self.profiler = cProfile.Profile() if profile_step is not None else None

        def on_train_begin(self, args, state, control, **kwargs):
            self.marks = [time.perf_counter()]

        def on_step_begin(self, args, state, control, **kwargs):
            if self.profiler is not None and state.global_step == profile_step:
                self.profiler.enable()

        def on_step_end(self, args, state, control, **kwargs):
            if self.profiler is not None and state.global_step == profile_step + 1:  # already counted
                self.profiler.disable()
            self.marks.append(time.perf_counter())

    def reward(completions, task, **_) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [env_reward(text, json.loads(t)) for text, t in zip(texts, task)]

    rows = [{"prompt": [{"role": "system", "content": t["system"]}, {"role": "user", "content": t["obs"]}],
             "task": json.dumps(t["task"])} for t in tasks[:(n_steps + 1) * n_prompts]]
    config = GRPOConfig(
        output_dir=out_dir, use_cpu=True, bf16=False, fp16=False, report_to="none", seed=SEED,
        max_steps=n_steps + 1, per_device_train_batch_size=n_prompts * GROUP_SIZE, gradient_accumulation_steps=1,
        num_generations=GROUP_SIZE, max_completion_length=COMPLETION_TOKENS, temperature=1.0, top_p=1.0, top_k=0,
        beta=BETA, epsilon=CLIP, num_iterations=1, scale_rewards="group", learning_rate=LR, weight_decay=0.0,
        lr_scheduler_type="constant", max_grad_norm=1.0, shuffle_dataset=False, save_strategy="no",
        disable_tqdm=True, dataloader_num_workers=0, gradient_checkpointing=gradient_checkpointing,
    )
    torch.manual_seed(SEED)
    tokenizer = AutoTokenizer.from_pretrained(model_path(model))
    lm = AutoModelForCausalLM.from_pretrained(model_path(model), dtype=torch.float32)
    lora = LoraConfig(r=LORA_R, lora_alpha=LORA_ALPHA, lora_dropout=0.0, task_type="CAUSAL_LM",
                      target_modules=LoraSettings().target_modules)
    clock = StepClock()
    with without_end_of_turn(lm, eot_id):
        trainer = GRPOTrainer(model=lm, reward_funcs=reward, args=config, train_dataset=Dataset.from_list(rows),
                              processing_class=tokenizer, peft_config=lora, callbacks=[clock])
        trainer.train()
    steps = [b - a for a, b in zip(clock.marks, clock.marks[1:])]
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    prompt = tokenizer.apply_chat_template(rows[0]["prompt"], add_generation_prompt=True, tokenize=False)
    seq_tokens = len(tokenizer(prompt, add_special_tokens=False)["input_ids"]) + COMPLETION_TOKENS
    out = {"step_s": median(steps[1:]), "all": steps, "trainable": trainable, "seq_tokens": seq_tokens}
    if clock.profiler is not None:
        out["stats"] = pstats.Stats(clock.profiler, stream=io.StringIO())
    return out


# ---------------------------------------------------------------------------- where the time goes

# phase -> (file, function) whose cumulative time measures it, on each side
AGENTLAB_PHASES = {
    "generation": ("agentlab/rollout.py", "rollout"),  # sampling every turn (and the env's replies, a few ms)
    "forward passes (reference + policy)": ("agentlab/policy.py", "score"),
    "backward": ("torch/autograd/__init__.py", "backward"),
}
TRL_PHASES = {
    "generation": ("transformers/generation/utils.py", "generate"),
    "forward passes (reference + policy)": ("trl/trainer/grpo_trainer.py", "_get_per_token_logps_and_entropies"),
    "backward": ("torch/autograd/__init__.py", "backward"),
}


def phase_table(ours_profile, tasks: list[dict], n_prompts: int, eot_id: int, model: str) -> str:
    """One step of each side under cProfile, split into generation, forward passes, backward and the rest."""
    ours_total, ours_stats = seconds(profile_stats, ours_profile)
    with tempfile.TemporaryDirectory(prefix="bench-trl-") as out_dir:
        trl = trl_steps(tasks, n_prompts, 1, out_dir, eot_id, gradient_checkpointing=True, profile_step=1, model=model)
    trl_total, trl_stats = trl["all"][1], trl["stats"]
    rows = []
    for phase in AGENTLAB_PHASES:
        a, b = cumulative(ours_stats, *AGENTLAB_PHASES[phase]), cumulative(trl_stats, *TRL_PHASES[phase])
        rows.append([phase, a, b])
    rows.append(["everything else", ours_total - sum(r[1] for r in rows), trl_total - sum(r[2] for r in rows)])
    rows.append(["**whole step**", ours_total, trl_total])
    return table(["phase (one step, under cProfile)", "agentlab s", "TRL (defaults) s"], rows)


# ---------------------------------------------------------------------------- report

def compare(model: str, quick: bool) -> str:
    """Measure both sides on ``model``; its part of the RESULTS.md section."""
    n = sizes(model, quick)
    tasks = make_tasks((n["steps"] + 2) * n["prompts"])
    ours = agentlab_steps(tasks, n["prompts"], n["steps"], model)
    print(f"  {model} agentlab: {ours['step_s']:.3f} s/step (rollout {ours['rollout_s']:.3f}, "
          f"update {ours['update_s']:.3f})", flush=True)
    theirs = {}
    for checkpointing in (True, False):
        with tempfile.TemporaryDirectory(prefix="bench-trl-") as out_dir:
            theirs[checkpointing] = trl_steps(tasks, n["prompts"], n["steps"], out_dir, ours["eot_id"],
                                              checkpointing, model=model)
        print(f"  {model} TRL GRPOTrainer (gradient checkpointing {'on' if checkpointing else 'off'}): "
              f"{theirs[checkpointing]['step_s']:.3f} s/step", flush=True)
    default, lean = theirs[True], theirs[False]
    ratio, ratio_lean = default["step_s"] / ours["step_s"], lean["step_s"] / ours["step_s"]
    batch, goal = n["prompts"] * GROUP_SIZE, GOALS[model]
    body = [
        f"**{MODELS[model]}**: {n['prompts']} prompts x group {GROUP_SIZE} = {batch} completions of "
        f"{COMPLETION_TOKENS} tokens per step, LoRA r={LORA_R} (alpha {LORA_ALPHA}) on every linear layer "
        f"({ours['trainable']:,} trainable parameters in agentlab, {default['trainable']:,} in TRL), fp32 on the "
        f"CPU, beta={BETA}, clip {CLIP}, one optimiser step per batch. Median over {n['steps']} step(s) after a "
        "warm-up step. Tokens per sequence in the update: agentlab "
        f"{ours['seq_tokens']} (prompt, completion, and the env's reply, which `rollout` keeps for a critic), "
        f"TRL {default['seq_tokens']} (prompt and completion)."
        + (" agentlab reads a group's shared prompt once (`Policy.share_prompts`, on in the real-model profiles)."
           if model != "tiny" else ""),
        "",
        table(["", "seconds per step", "of which generation", "of which update", "TRL / agentlab"],
              [["agentlab `rollout` + `grpo.update`", ours["step_s"], ours["rollout_s"], ours["update_s"], ""],
               ["TRL 1.16 `GRPOTrainer`, defaults (gradient checkpointing on)", default["step_s"], "", "",
                f"{ratio:.2f}x"],
               ["TRL 1.16 `GRPOTrainer`, gradient checkpointing off", lean["step_s"], "", "", f"{ratio_lean:.2f}x"]]),
        "",
        "Every step, warm-up first (s): agentlab " + ", ".join(f"{s:.3f}" for s in ours["all"])
        + "; TRL (defaults) " + ", ".join(f"{s:.3f}" for s in default["all"])
        + "; TRL (no checkpointing) " + ", ".join(f"{s:.3f}" for s in lean["all"]) + ".",
        "",
        verdict(f"agentlab's speed-up per GRPO step over TRL's defaults on {MODELS[model]}", ratio, goal),
    ]
    if ratio < goal:
        body += ["", f"Why: both sides spend a step in the same arithmetic — sampling {batch} x "
                 f"{COMPLETION_TOKENS} tokens, a reference pass, a forward and a backward pass with the adapter — "
                 "so a speed-up can only come from the work around it, and the phases below show where each side "
                 "spends its step (cProfile adds its own overhead to both). agentlab's update scores "
                 f"{ours['seq_tokens'] - default['seq_tokens']} more tokens per sequence than TRL (the env's reply "
                 "after the action, kept for a critic that GRPO does not have); like TRL it applies the output layer "
                 "and softmax to the completion tokens only (`Policy.score(only=...)`), and each minibatch is padded "
                 "to its own longest episode (`agentlab.algos.losses.micro_batches`).", "",
                 phase_table(ours["profile"], tasks, n["prompts"], ours["eot_id"], model), "",
                 breakdown(ours["profile"], f"agentlab GRPO step on {MODELS[model]}")]
    return "\n".join(body)


def run(quick: bool = False) -> str:
    """Measure both sides on the tiny policy and on SmolLM2-135M, and return the RESULTS.md section."""
    return "\n\n".join(compare(model, quick) for model in progress(list(GOALS), "grpo: models"))
