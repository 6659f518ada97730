"""GPU benchmark: Qwen2.5-shaped models in 4-bit NF4 with LoRA r=16, through agentlab's own loading path.

    python -m bench.gpu                          # 0.5B, 1.5B and 3B; prints one markdown table
    python -m bench.gpu --sizes 0.5B --append bench/RESULTS.md
    python -m bench.gpu --check                  # no GPU needed: configs and parameter counts only

Nothing can be downloaded on the GPU machine, so each model is built from its real Qwen2.5
config numbers (hidden size, layers, heads, kv heads, intermediate size, vocab 151936) with
random weights (`AutoModelForCausalLM.from_config`), saved with ``save_pretrained`` to a
temporary folder beside a small byte-level tokenizer made here, and loaded back through
``agentlab.policy.load_policy(folder, quantization="4bit", lora=LoraSettings(r=16))`` — the
path a real instruct model takes. The tokenizer knows ~1,000 tokens while the model samples
from 151,936: ids it does not know decode to nothing. That changes the text the env sees,
not the work per token, so it is harmless for timing. (A Qwen2 config makes
``AutoTokenizer`` load the folder's tokenizer as a ``Qwen2Tokenizer``, built from the same
vocabulary and merges.) Random weights never stop on their own, and the end-of-turn token
is suppressed anyway, so every turn is exactly ``--max-new-tokens`` long.

Measured per model: seconds to load, GPU memory after loading (weights + adapter) and at
the peak, rollout action tokens/s on GuessNumber (``--tasks`` x group ``--group`` envs, five
turns), and one GRPO step at group size 8 (that rollout + ``agentlab.algos.grpo.update``).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import sys
import tempfile
from pathlib import Path

import torch

if __package__ in (None, ""):  # `python bench/gpu.py` as well as `python -m bench.gpu`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentlab import memory  # noqa: E402

# The sizes this benchmark runs; agentlab.memory.QWEN2_5 holds their real configs (and 7B's).
QWEN2_5 = {size: memory.QWEN2_5[size] for size in ("0.5B", "1.5B", "3B")}
QWEN2_COMMON = dict(max_position_embeddings=32768, rope_theta=1_000_000.0, rms_norm_eps=1e-6, hidden_act="silu")
ENV_ID = "agentlab/GuessNumber-v0"
LORA_R = 16


class NoGPU(RuntimeError):
    """Raised when this benchmark is started where no CUDA device is present."""


def require_cuda(script: str = "bench/gpu.py",
                 instead: str = "`python -m bench.gpu --check` verifies the configs without one") -> str:
    """The GPU's name, or a clear error saying why ``script`` cannot run here and what to run ``instead``."""
    if not torch.cuda.is_available():
        raise NoGPU(
            f"{script} needs an NVIDIA GPU with CUDA, and torch.cuda.is_available() is False here "
            f"(torch {torch.__version__}, built for CUDA {torch.version.cuda or 'none'}). Run it on a machine with "
            f"a GPU and a CUDA build of torch; {instead}.")
    return torch.cuda.get_device_name(0)


# ---------------------------------------------------------------------------- configs and sizes

def qwen_config(size: str, tokenizer=None, **overrides):
    """A `Qwen2Config` with the real numbers of Qwen2.5-``size``; special ids from ``tokenizer`` if given.

    ``overrides`` replace config numbers (a shrunken copy exercises this file's logic on a CPU).
    """
    from transformers import Qwen2Config

    ids = {}
    if tokenizer is not None:
        ids = dict(pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                   bos_token_id=tokenizer.bos_token_id)
    return Qwen2Config(**{**QWEN2_COMMON, **QWEN2_5[size], **ids, **overrides})


def parameter_counts(size: str) -> dict[str, int]:
    """Parameters of Qwen2.5-``size`` from the config numbers alone (`agentlab.memory.ModelShape`, no model built).

    ``linear``: the q/k/v/o and MLP weight matrices (what NF4 quantises); ``total`` adds the
    token embedding (tied with the output head), the q/k/v biases and the RMSNorm weights,
    which stay in the compute dtype.
    """
    linear, other = memory.ModelShape.from_config(qwen_config(size)).parameters()
    return {"linear": linear, "total": linear + other}


def meta_parameter_count(size: str) -> int:
    """Parameters of the model transformers builds from `qwen_config` (on the meta device: no memory)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(qwen_config(size))
    return sum(p.numel() for p in model.parameters())


def small_tokenizer():
    """A byte-level BPE tokenizer with agentlab's chat template, trained in a second on env text."""
    from agentlab.envs import make
    from agentlab.tiny import train_tokenizer

    env = make(ENV_ID)
    texts = [env.system_prompt]
    for seed in range(20):
        obs, _ = env.reset(seed=seed)
        texts += [obs, env.expert_action(), env.step(env.expert_action())[0]]
    return train_tokenizer(texts, vocab_size=512)


def build_random_model(size: str, folder: Path) -> None:
    """Save a randomly initialised Qwen2.5-``size`` (bf16) and the small tokenizer into ``folder``."""
    from transformers import AutoModelForCausalLM

    tokenizer = small_tokenizer()
    torch.manual_seed(0)
    with torch.device("cuda"):  # initialising billions of weights is much faster on the GPU
        model = AutoModelForCausalLM.from_config(qwen_config(size, tokenizer), dtype=torch.bfloat16)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    del model
    free_gpu()


def free_gpu() -> None:
    gc.collect()
    torch.cuda.empty_cache()


# ---------------------------------------------------------------------------- measuring

def gib(n_bytes: float) -> float:
    return n_bytes / 2**30


def timed_cuda(fn, *args, **kwargs):
    """Seconds of one call with the GPU's queue drained before and after."""
    import time

    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)  # CPU: for --check-style tests
    sync()
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    sync()
    return time.perf_counter() - start, out


def grpo_step(policy, optimizer, n_tasks: int, group: int, max_new_tokens: int, seed: int) -> dict:
    """One GRPO step: a multi-turn rollout of ``n_tasks`` x ``group`` envs, then `grpo.update`."""
    import numpy as np

    from agentlab.algos import grpo
    from agentlab.envs import make
    from agentlab.rollout import ACTION, SamplingSettings, rollout

    env = make(ENV_ID)
    rng = np.random.default_rng(seed)
    tasks = [env.generate_task(rng, 0) for _ in range(n_tasks)]
    group_tasks = [t for t in tasks for _ in range(group)]  # contiguous groups
    envs = [make(ENV_ID) for _ in group_tasks]
    gen = torch.Generator(device=policy.device).manual_seed(seed)
    sampling = SamplingSettings(temperature=1.0, top_p=1.0, max_new_tokens=max_new_tokens)
    t_roll, trajs = timed_cuda(rollout, envs, policy, sampling, tasks=group_tasks, generator=gen)
    rewards = torch.tensor([t.total_reward for t in trajs])
    # Equal rewards everywhere (random weights): keep the groups, so the step does its full backward pass.
    settings = grpo.GRPOSettings(minibatch_size=group, drop_zero_variance=False)
    t_upd, _ = timed_cuda(grpo.update, policy, optimizer, trajs, rewards, group, settings)
    tokens = sum(r == ACTION for t in trajs for r in t.roles)
    return {"rollout_s": t_roll, "update_s": t_upd, "tokens": tokens,
            "context": max(len(t.token_ids) for t in trajs)}


def bench_size(size: str, n_tasks: int, group: int, max_new_tokens: int, steps: int) -> dict:
    """Build, load in 4-bit with LoRA, then time rollouts and GRPO steps for one model size."""
    from agentlab.policy import LoraSettings, load_policy
    from bench.common import median, without_end_of_turn

    with tempfile.TemporaryDirectory(prefix=f"bench-qwen-{size}-") as folder:
        build_random_model(size, Path(folder))
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        lora = LoraSettings(r=LORA_R, alpha=2 * LORA_R)
        load_s, policy = timed_cuda(load_policy, folder, quantization="4bit", lora=lora)
    weights = torch.cuda.memory_allocated() - base
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-5)
    results = []
    with without_end_of_turn(policy.model, policy.eot_id):
        for step in range(steps + 1):  # the first step warms up kernels and the allocator
            results.append(grpo_step(policy, optimizer, n_tasks, group, max_new_tokens, seed=step))
    timed = results[1:] or results
    med = lambda key: median([r[key] for r in timed])  # noqa: E731
    row = {"size": size, "params": parameter_counts(size)["total"], "load_s": load_s, "weights_gib": gib(weights),
           "peak_gib": gib(torch.cuda.max_memory_allocated() - base),
           "trainable": policy.num_parameters(trainable_only=True),
           "tokens_per_s": med("tokens") / med("rollout_s"), "rollout_s": med("rollout_s"),
           "update_s": med("update_s"), "step_s": med("rollout_s") + med("update_s"), "context": timed[0]["context"]}
    del policy, optimizer
    free_gpu()
    return row


def markdown(rows: list[dict], gpu: str, args) -> str:
    """The results as one markdown section, with the GPU's name and the settings."""
    from bench.common import table

    head = (f"## GPU: {gpu}\n\n{datetime.date.today().isoformat()}, torch {torch.__version__}, CUDA "
            f"{torch.version.cuda}. Qwen2.5-shaped models with random weights, NF4 4-bit (double quantisation, bf16 "
            f"compute) + LoRA r={LORA_R}; GuessNumber, {args.tasks} tasks x group {args.group} = "
            f"{args.tasks * args.group} envs, 5 turns of exactly {args.max_new_tokens} tokens; median of "
            f"{args.steps} step(s) after a warm-up step. A GRPO step is the rollout plus `grpo.update` "
            f"(minibatches of one group).\n\n")
    return head + table(
        ["model", "parameters", "load s", "GPU memory after load (GiB)", "peak GPU memory (GiB)", "LoRA parameters",
         "rollout tokens/s", "rollout s", "update s", "GRPO step s", "longest episode (tokens)"],
        [[f"Qwen2.5-{r['size']} shape", f"{r['params'] / 1e9:.2f} B", r["load_s"], r["weights_gib"], r["peak_gib"],
          f"{r['trainable'] / 1e6:.1f} M", r["tokens_per_s"], r["rollout_s"], r["update_s"], r["step_s"],
          r["context"]] for r in rows]) + "\n"


def check() -> str:
    """CPU-side check: every config builds (on the meta device) with the parameter count the arithmetic says."""
    from bench.common import table

    rows = []
    for size in QWEN2_5:
        counted, built = parameter_counts(size)["total"], meta_parameter_count(size)
        rows.append([f"Qwen2.5-{size}", f"{counted:,}", f"{built:,}", "yes" if counted == built else "NO"])
    return table(["model", "parameters (arithmetic)", "parameters (transformers)", "agree"], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(QWEN2_5), help=f"comma-separated, from {list(QWEN2_5)}")
    parser.add_argument("--tasks", type=int, default=4, help="tasks per GRPO step")
    parser.add_argument("--group", type=int, default=8, help="GRPO group size")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="tokens per turn")
    parser.add_argument("--steps", type=int, default=3, help="timed GRPO steps after one warm-up step")
    parser.add_argument("--append", default=None, help="append the table to this markdown file (e.g. bench/RESULTS.md)")
    parser.add_argument("--check", action="store_true", help="check the configs on the CPU and exit")
    args = parser.parse_args(argv)
    from bench.common import go_offline

    go_offline()
    if args.check:
        print(check())
        return 0
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    unknown = [s for s in sizes if s not in QWEN2_5]
    if unknown:
        parser.error(f"unknown size(s) {unknown}; choose from {list(QWEN2_5)}")
    try:
        gpu = require_cuda()
    except NoGPU as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    rows = []
    for size in sizes:
        print(f"Qwen2.5-{size} shape ...", flush=True)
        rows.append(bench_size(size, args.tasks, args.group, args.max_new_tokens, args.steps))
    text = markdown(rows, gpu, args)
    print(text)
    if args.append:
        with open(args.append, "a") as f:
            f.write("\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
