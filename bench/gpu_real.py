"""The real model on a GPU: SmolLM2-135M-Instruct's demo run, with RL in 4-bit NF4 + LoRA on CUDA.

    python -m bench.gpu_real                                 # Dialog and SQL, 16 updates each
    python -m bench.gpu_real --envs Dialog --updates 8 --append bench/RESULTS.md

Each env runs `agentlab demo --profile real-cpu --env ENV --quantization 4bit`: the warm-up is the
real-cpu profile's own (LoRA SFT in float32 on the CPU, cached), so RL starts from the policy
the CPU runs start from; RL then loads it in NF4 with bf16 compute on the GPU (the CPU runs keep
float32). Held-out greedy success before and after (40 tasks of levels 0 and 1, 95% intervals),
seconds, peak GPU memory, sampling tokens/s and seconds per update go into one markdown table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

import torch

if __package__ in (None, ""):  # `python bench/gpu_real.py` as well as `python -m bench.gpu_real`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def run_env(env: str, updates: int, quantization: str | None, out: Path) -> dict:
    """One demo run on ``env``; its summary plus the GPU's peak memory and per-update timings."""
    from agentlab.demo import demo_policy, run_demo
    from bench.common import median

    t0 = time.time()
    demo_policy("real-cpu", env_id=env)  # the warm-up, built (or found) here so that it is timed apart
    warm_s = time.time() - t0
    torch.cuda.reset_peak_memory_stats()
    summary = run_demo("real-cpu", json_path=str(out / f"{env}.json"), out_dir=str(out / env), updates=updates,
                       env_id=env, quantization=quantization)
    history = [json.loads(line) for line in (out / env / "metrics.jsonl").read_text().splitlines()]
    return {**summary, "warm_s": warm_s, "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
            "tokens_per_s": median([h["tokens_per_s"] for h in history]),
            "rollout_s": median([h["seconds_rollout"] for h in history]),
            "update_s": median([h["seconds_update"] for h in history])}


def markdown(rows: list[dict], gpu: str) -> str:
    from bench.common import table

    def rate(side: dict) -> str:
        return "%.3f [%.2f, %.2f]" % (side["success_rate"], *side["success_ci95"])

    head = (f"## GPU: {gpu}, the real model: SmolLM2-135M-Instruct\n\n{datetime.date.today().isoformat()}, torch "
            f"{torch.__version__}, CUDA {torch.version.cuda}. `python -m bench.gpu_real`: the real-cpu demo's recipe "
            "(warm-up in float32 on the CPU, GRPO 8 tasks x 8, lr 1e-4, temperature 0.8, seed 0) with RL in "
            f"{rows[0]['quantization'] or 'bf16'} on the GPU; held-out greedy success on 40 eval tasks of levels 0 "
            "and 1, 95% intervals; per-update numbers are medians.\n\n")
    return head + table(
        ["env", "updates", "before", "after", "warm-up s", "RL s", "peak GPU memory (GiB)", "sampling tokens/s",
         "rollout s per update", "update s per update", "invalid actions (first, last)", "KL (last)"],
        [[r["env"].split("/")[-1], r["updates"], rate(r["before"]), rate(r["after"]), r["warm_s"], r["seconds"],
          r["peak_gib"], r["tokens_per_s"], r["rollout_s"], r["update_s"],
          f"{r['invalid_rate'][0]:.0%}, {r['invalid_rate'][-1]:.0%}", f"{r['kl'][-1]:.3f}"] for r in rows]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_real", description=__doc__.splitlines()[0])
    parser.add_argument("--envs", default="Dialog,SQL", help="comma-separated envs")
    parser.add_argument("--updates", type=int, default=16)
    parser.add_argument("--quantization", default="4bit", choices=("4bit", "8bit", "none"))
    parser.add_argument("--out", default="runs/gpu_real", help="run folders and each env's summary JSON")
    parser.add_argument("--append", default=None, help="append the table to this markdown file")
    args = parser.parse_args(argv)
    from bench.common import go_offline
    from bench.gpu import NoGPU, require_cuda

    go_offline()
    try:
        gpu = require_cuda("bench/gpu_real.py", "on a CPU the same run is `agentlab demo --profile real-cpu --env SQL`")
    except NoGPU as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    quantization = None if args.quantization == "none" else args.quantization
    rows = []
    for env in [e.strip() for e in args.envs.split(",") if e.strip()]:
        rows.append(run_env(env, args.updates, quantization, Path(args.out)))
        print(markdown(rows, gpu), flush=True)  # after every env, so that a cut run keeps what it measured
    if args.append:
        with open(args.append, "a") as f:
            f.write("\n" + markdown(rows, gpu))
    return 0


if __name__ == "__main__":
    sys.exit(main())
