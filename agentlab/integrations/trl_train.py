"""Train an agentlab env with TRL's `GRPOTrainer`: the way past one process and one GPU.

    # one process: the CPU, or one GPU
    python -m agentlab.integrations.trl_train --env agentlab/GuessNumber-v0 --model warm --steps 20 --out runs/trl-guess
    # N GPUs, one process each (add --config_file for DeepSpeed ZeRO or FSDP)
    accelerate launch --num_processes N -m agentlab.integrations.trl_train \\
        --env agentlab/Math-v0 --model /models/Qwen2.5-1.5B-Instruct --steps 200 --out runs/trl-math
    # N processes on the CPU, data-parallel over gloo
    accelerate launch --multi_gpu --num_processes N -m agentlab.integrations.trl_train --cpu \\
        --env agentlab/GuessNumber-v0 --model warm --steps 4 --out runs/trl-cpu2
    # the env served over OpenEnv (agentlab serve, or any agentlab server): --env takes its address
    python -m agentlab.integrations.trl_train --env http://127.0.0.1:8000 --model warm --steps 20 --out runs/trl-remote

``--mode episode`` (default) plays whole multi-turn episodes with `EpisodeRollout`;
``--mode single`` lets TRL sample one action per prompt and the env score it as a first move.
Either way the reward functions are the env's reward components (`reward_funcs`). On a
machine without CUDA, or with ``--cpu``, it runs on the CPU. ``--model warm`` starts from the
tiny policy SFT-warmed on the env (built once and cached): the untrained ``tiny`` writes no valid
action, so every reward is the format penalty and GRPO has nothing to compare.

Several processes are data-parallel: each plays its own share of every step's prompts with its
own envs, and the gradients are averaged. On the CPU, ``accelerate launch --cpu`` starts a single
process whatever ``--num_processes`` says (it reaches more only through mpirun); ``accelerate
launch --multi_gpu`` starts them through torchrun, and ``--cpu`` here makes them meet over gloo.

``--out`` receives ``metrics.jsonl`` (TRL's log, one line per step, with
``rewards/<component>/mean``, ``agentlab/success``, ``loss``, ``kl`` ...), ``summary.json``
(with ``processes`` and, per process, the episodes it played) and ``final/`` (the LoRA adapter,
or the whole model with ``--lora-r 0``, and the tokenizer).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from agentlab.flags import add_flags, build, given, normalize_flag
from agentlab.integrations import env_id_of
from agentlab.integrations.trl import EpisodeRollout, build_dataset, reward_funcs, trl_deprecations_hidden, turn_tokens
from agentlab.policy import LoraSettings, load_policy

MODES = ("episode", "single")


@dataclass
class TRLRun:
    """One TRL training run (one line per field; the command line sets the same names)."""

    env_id: str = "agentlab/GuessNumber-v0"  # Gymnasium id, short name, or an OpenEnv server's address (http://...)
    model: str = "warm"  # "warm" (the tiny policy SFT-warmed on the env), "tiny" (untrained), a folder or a hub id
    steps: int = 20  # optimizer steps
    out: str = "runs/trl"  # output folder
    mode: str = "episode"  # "episode" (multi-turn rollouts) or "single" (one action per prompt)
    split: str = "train"  # task-file split to train on
    difficulty: int | None = 0  # train on this difficulty level only (none: every level), as agentlab.train
    limit: int | None = None  # use only the first N tasks of the split (after the difficulty filter)
    prompts_per_step: int = 2  # distinct tasks per step on each process
    num_generations: int = 4  # samples per task: GRPO's group size
    max_new_tokens: int | None = None  # tokens per turn (episode) or completion (single); None: env.action_tokens
    max_completion_length: int = 384  # tokens per episode, actions and observations together (episode)
    lr: float = 2e-3  # learning rate (constant)
    lora_r: int = 8  # LoRA rank; 0 trains every weight
    quantization: str | None = None  # None, "4bit" or "8bit" (bitsandbytes)
    beta: float = 0.0  # KL coefficient against the reference (the base model with LoRA off)
    temperature: float = 1.0  # sampling temperature
    seed: int = 0  # seeds TRL's data order and sampling
    advantage: str = "episode"  # only "episode": TRL's GRPO gives one advantage per completion (see below)
    cpu: bool = False  # force the CPU even where CUDA is available


def single_cpu_launch() -> bool:
    """True under ``accelerate launch --cpu --num_processes N>1``, which started this one process only:
    accelerate sets the rendezvous address for several processes but leaves WORLD_SIZE unset."""
    return (os.environ.get("ACCELERATE_USE_CPU", "").lower() == "true" and "MASTER_ADDR" in os.environ
            and "WORLD_SIZE" not in os.environ)


def model_source(run: TRLRun) -> str:
    """``run.model`` as `load_policy` takes it; "warm" builds (once, on the first process) the tiny
    policy warmed on the env, which every process then loads from the cache."""
    if run.model != "warm":
        return run.model
    from accelerate import PartialState

    from agentlab.profiles import profile
    from agentlab.warmup import warm_policy_path

    from agentlab.envs import env_class

    served = getattr(env_class(run.env_id), "served", None) or {}  # an env behind OpenEnv: warm on the env it serves
    with PartialState().main_process_first():
        return str(warm_policy_path(profile(), envs=[served.get("env_id") or run.env_id]))


def device_for(run: TRLRun) -> str:
    """This process's device: the CPU, or the GPU that accelerate gave this process."""
    if run.cpu or not torch.cuda.is_available():
        return "cpu"
    from accelerate import PartialState

    return f"cuda:{PartialState().local_process_index}"


def grpo_config(run: TRLRun, device: str):
    """TRL's config for the run; every batch size is counted in completions."""
    from trl import GRPOConfig

    completion_tokens = run.max_completion_length if run.mode == "episode" else turn_tokens(run.env_id, run.max_new_tokens)
    return GRPOConfig(
        output_dir=run.out, max_steps=run.steps, learning_rate=run.lr, lr_scheduler_type="constant",
        per_device_train_batch_size=run.prompts_per_step * run.num_generations,
        num_generations=run.num_generations, max_completion_length=completion_tokens,
        temperature=run.temperature, top_p=1.0, top_k=0, beta=run.beta,
        activation_checkpointing=True,  # TRL's default, by the name transformers 5 reads without a warning
        ddp_find_unused_parameters=False,  # every LoRA weight takes part in every step (DDP checks otherwise)
        logging_steps=1, save_strategy="no", report_to="none", seed=run.seed,
        use_cpu=device == "cpu", bf16=device.startswith("cuda"), dataloader_pin_memory=device != "cpu",
        disable_tqdm=True,
    )


def build_trainer(run: TRLRun, callbacks: list | None = None):
    """A ready `GRPOTrainer` for ``run``, and the `EpisodeRollout` it uses (None in single mode)."""
    from trl import GRPOTrainer

    if run.mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {run.mode!r}")
    if run.advantage != "episode":
        # GRPOTrainer spreads one number over a whole completion, and in episode mode the completion
        # is the whole episode, so a per-turn advantage has nowhere to go
        raise ValueError(f"advantage {run.advantage!r} gives each turn its own advantage; TRL's GRPOTrainer takes one "
                         "per completion (here, per episode). Train per-turn credit with agentlab itself: agentlab train "
                         f"--env {run.env_id} --grpo.advantage {run.advantage}")
    device = device_for(run)
    lora = LoraSettings(r=run.lora_r, alpha=2 * run.lora_r) if run.lora_r > 0 else None
    # the adapter's first weights are drawn here, before GRPOTrainer seeds anything: seeded by the run, so that
    # the same run (a notebook cell run again included) starts from the same policy
    torch.manual_seed(run.seed)
    policy = load_policy(model_source(run), quantization=run.quantization, lora=lora, device=device)
    policy.tokenizer.padding_side = "left"  # TRL left-pads prompts
    dataset = build_dataset(run.env_id, split=run.split, limit=run.limit, difficulty=run.difficulty)
    rollout_func = EpisodeRollout(run.env_id, max_new_tokens=run.max_new_tokens) if run.mode == "episode" else None
    if rollout_func is not None:  # TRL warns on every run that rollout_func is experimental; relying on it is this module's documented design
        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    trainer = GRPOTrainer(
        model=policy.model, processing_class=policy.tokenizer, args=grpo_config(run, device),
        reward_funcs=reward_funcs(run.env_id, eot_id=policy.eot_id), train_dataset=dataset,
        rollout_func=rollout_func, callbacks=callbacks,
    )
    return trainer, rollout_func


def train_with_trl(run: TRLRun) -> dict:
    """Train, then write ``metrics.jsonl``, ``summary.json`` and ``final/`` under ``run.out``."""
    from accelerate.utils import gather_object

    if single_cpu_launch():
        raise SystemExit(
            "accelerate launch --cpu started one process although --num_processes asked for more (on the CPU it "
            "starts several only through mpirun). Launch with accelerate launch --multi_gpu --num_processes N "
            "-m agentlab.integrations.trl_train --cpu ... (torchrun underneath; the processes meet over gloo).")
    run = dataclasses.replace(run, env_id=env_id_of(run.env_id))
    trainer, episodes = build_trainer(run)
    t0 = time.perf_counter()
    with trl_deprecations_hidden():
        trainer.train()
    seconds = time.perf_counter() - t0
    steps = [r for r in trainer.state.log_history if "loss" in r]
    mine = {"process": trainer.accelerator.process_index, "episodes": len(episodes.played) if episodes else None,
            "tasks": sorted({e["task_id"] for e in episodes.played}) if episodes else None,
            "mean_return": sum(e["return"] for e in episodes.played) / max(1, len(episodes.played)) if episodes else None}
    summary = {"run": dataclasses.asdict(run), "seconds": seconds, "processes": trainer.accelerator.num_processes,
               "per_process": gather_object([mine]), "first": steps[0] if steps else None,
               "last": steps[-1] if steps else None}
    if trainer.accelerator.is_main_process:
        out = Path(run.out)
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "metrics.jsonl", "w") as f:
            for record in steps:
                f.write(json.dumps(record) + "\n")
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
    trainer.save_model(str(Path(run.out) / "final"))  # every process calls it; only the main one writes
    return summary


def parse_args(argv: list[str] | None = None) -> TRLRun:
    """A `TRLRun` from the command line: one flag per field (``--env`` for env_id), help from its comment."""
    p = argparse.ArgumentParser(prog="python -m agentlab.integrations.trl_train",
                                description="Train an agentlab env with TRL's GRPOTrainer (see the module docstring).")
    add_flags(p, TRLRun, aliases={"env_id": "--env"}, choices={"mode": MODES, "quantization": ("4bit", "8bit")})
    argv = [normalize_flag(a) for a in (sys.argv[1:] if argv is None else argv)]
    return build(TRLRun, given(p.parse_args(argv), TRLRun))


def main(argv: list[str] | None = None) -> dict:
    from accelerate import PartialState

    summary = train_with_trl(parse_args(argv))
    last = summary["last"] or {}
    if PartialState().is_main_process:
        print(json.dumps({"seconds": round(summary["seconds"], 1), "processes": summary["processes"],
                          "reward": last.get("reward"), "success": last.get("agentlab/success")}))
    return summary


if __name__ == "__main__":
    main()
