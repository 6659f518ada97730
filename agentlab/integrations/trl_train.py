"""Train an agentlab env with TRL's `GRPOTrainer`: the way past one process and one GPU.

    # one process: the CPU, or one GPU
    python -m agentlab.integrations.trl_train --env agentlab/GuessNumber-v0 --model tiny --steps 20 --out runs/trl-guess
    # N GPUs, one process each (add --config_file for DeepSpeed ZeRO or FSDP)
    accelerate launch --num_processes N -m agentlab.integrations.trl_train \\
        --env agentlab/Math-v0 --model /models/Qwen2.5-1.5B-Instruct --steps 200 --out runs/trl-math

``--mode episode`` (default) plays whole multi-turn episodes with `EpisodeRollout`;
``--mode single`` lets TRL sample one action per prompt and the env score it as a first move.
Either way the reward functions are the env's reward components (`reward_funcs`). On a
machine without CUDA, or with ``--cpu``, it runs on the CPU in one process.

``--out`` receives ``metrics.jsonl`` (TRL's log, one line per step, with
``rewards/<component>/mean``, ``agentlab/success``, ``loss``, ``kl`` ...), ``summary.json``
and ``final/`` (the LoRA adapter, or the whole model with ``--lora-r 0``, and the tokenizer).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from agentlab.integrations.trl import EpisodeRollout, build_dataset, full_env_id, reward_funcs, turn_tokens
from agentlab.policy import LoraSettings, load_policy

MODES = ("episode", "single")


@dataclass
class TRLRun:
    """One TRL training run (one line per field; the command line sets the same names)."""

    env_id: str = "agentlab/GuessNumber-v0"  # Gymnasium id (or short name) of the env
    model: str = "tiny"  # "tiny" (built locally, untrained), a model folder or a hub id
    steps: int = 20  # optimizer steps
    out: str = "runs/trl"  # output folder
    mode: str = "episode"  # "episode" (multi-turn rollouts) or "single" (one action per prompt)
    split: str = "train"  # task-file split to train on
    difficulty: int | None = 0  # train on this difficulty level only (None: every level), as agentlab.train
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
    cpu: bool = False  # force the CPU even where CUDA is available


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
        logging_steps=1, save_strategy="no", report_to="none", seed=run.seed,
        use_cpu=device == "cpu", bf16=device.startswith("cuda"), dataloader_pin_memory=device != "cpu",
        disable_tqdm=True,
    )


def build_trainer(run: TRLRun, callbacks: list | None = None):
    """A ready `GRPOTrainer` for ``run``, and the `EpisodeRollout` it uses (None in single mode)."""
    from trl import GRPOTrainer

    if run.mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {run.mode!r}")
    device = device_for(run)
    lora = LoraSettings(r=run.lora_r, alpha=2 * run.lora_r) if run.lora_r > 0 else None
    policy = load_policy(run.model, quantization=run.quantization, lora=lora, device=device)
    policy.tokenizer.padding_side = "left"  # TRL left-pads prompts
    dataset = build_dataset(run.env_id, split=run.split, limit=run.limit, difficulty=run.difficulty)
    rollout_func = EpisodeRollout(run.env_id, max_new_tokens=run.max_new_tokens) if run.mode == "episode" else None
    trainer = GRPOTrainer(
        model=policy.model, processing_class=policy.tokenizer, args=grpo_config(run, device),
        reward_funcs=reward_funcs(run.env_id, eot_id=policy.eot_id), train_dataset=dataset,
        rollout_func=rollout_func, callbacks=callbacks,
    )
    return trainer, rollout_func


def train_with_trl(run: TRLRun) -> dict:
    """Train, then write ``metrics.jsonl``, ``summary.json`` and ``final/`` under ``run.out``."""
    run = dataclasses.replace(run, env_id=full_env_id(run.env_id))
    trainer, _ = build_trainer(run)
    t0 = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - t0
    steps = [r for r in trainer.state.log_history if "loss" in r]
    summary = {"run": dataclasses.asdict(run), "seconds": seconds, "processes": trainer.accelerator.num_processes,
               "first": steps[0] if steps else None, "last": steps[-1] if steps else None}
    if trainer.accelerator.is_main_process:
        out = Path(run.out)
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "metrics.jsonl", "w") as f:
            for record in steps:
                f.write(json.dumps(record) + "\n")
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
    trainer.save_model(str(Path(run.out) / "final"))  # every process calls it; only the main one writes
    return summary


def _level(text: str) -> int | None:
    return None if text == "all" else int(text)


def parse_args(argv: list[str] | None = None) -> TRLRun:
    p = argparse.ArgumentParser(prog="python -m agentlab.integrations.trl_train",
                                description="Train an agentlab env with TRL's GRPOTrainer.")
    d = TRLRun()
    p.add_argument("--env", dest="env_id", default=d.env_id, help="env id, e.g. agentlab/Math-v0")
    p.add_argument("--model", default=d.model, help="'tiny', a model folder or a hub id")
    p.add_argument("--steps", type=int, default=d.steps, help="optimizer steps")
    p.add_argument("--out", default=d.out, help="output folder")
    p.add_argument("--mode", choices=MODES, default=d.mode, help="multi-turn episodes or one action per prompt")
    p.add_argument("--split", default=d.split, help="task-file split")
    p.add_argument("--difficulty", type=_level, default=d.difficulty, help="difficulty level, or 'all'")
    p.add_argument("--limit", type=int, default=d.limit, help="use only the first N tasks")
    p.add_argument("--prompts-per-step", type=int, default=d.prompts_per_step, help="tasks per step per process")
    p.add_argument("--num-generations", type=int, default=d.num_generations, help="GRPO group size")
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens,
                   help="tokens per turn (default: the env's action_tokens)")
    p.add_argument("--max-completion-length", type=int, default=d.max_completion_length,
                   help="tokens per episode (episode mode)")
    p.add_argument("--lr", type=float, default=d.lr, help="learning rate")
    p.add_argument("--lora-r", type=int, default=d.lora_r, help="LoRA rank; 0 = full fine-tuning")
    p.add_argument("--quantization", choices=["4bit", "8bit"], default=d.quantization, help="bitsandbytes loading")
    p.add_argument("--beta", type=float, default=d.beta, help="KL coefficient")
    p.add_argument("--temperature", type=float, default=d.temperature, help="sampling temperature")
    p.add_argument("--seed", type=int, default=d.seed, help="seed")
    p.add_argument("--cpu", action="store_true", help="run on the CPU even where CUDA is available")
    return TRLRun(**vars(p.parse_args(argv)))


def main(argv: list[str] | None = None) -> dict:
    summary = train_with_trl(parse_args(argv))
    last = summary["last"] or {}
    print(json.dumps({"seconds": round(summary["seconds"], 1), "processes": summary["processes"],
                      "reward": last.get("reward"), "success": last.get("agentlab/success")}))
    return summary


if __name__ == "__main__":
    main()
