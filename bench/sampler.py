"""A cheaper sampler on the CPU: SmolLM2-135M sampling in float32 vs its int8 copy (`agentlab.sampler`).

Two things are measured at the ``real-cpu`` profile's batch (tasks_per_update × group_size envs,
groups sharing their prompt, max_new_tokens per turn):

* speed: action tokens/s of one `rollout` turn on GuessNumber, every action exactly
  max_new_tokens long (end-of-turn pushed out of reach, `bench.common.without_end_of_turn`), the
  two sides interleaved (A B A B ...) so that a change in the machine's load falls on both;
* mismatch: on tokens the int8 copy sampled freely (end-of-turn allowed), the mean k3 estimate of
  KL(int8 ‖ float32) per action token, the share of tokens whose ratio π_fp32/π_int8 leaves
  [0.8, 1.2], and the share whose importance weight passes the default cap 3 — the numbers the
  update logs as ``sampler_kl``, ``sampler_clip_frac`` and ``is_capped_frac`` — on two groups of the
  batch. A float32 sampler against the float32 trainer is the control (only rounding).

    python -m bench.sampler [--quick]
"""

from __future__ import annotations

import sys
import time

import torch

from bench.common import SEED, SMOLLM2, bench_policy, fixed_length_envs, interleaved, median, table, without_end_of_turn

ENV_ID = "agentlab/GuessNumber-v0"
INT8 = {  # name -> the linear layers left in float32 (`agentlab.sampler.int8_sampler`'s skip)
    "int8, every linear": (),
    "int8, lm_head and down_proj float": ("lm_head", "down_proj"),
}


def batch_shape(quick: bool) -> dict:
    """The real-cpu profile's sampling batch (a quarter of it with --quick)."""
    from agentlab.profiles import profile

    prof = profile("real-cpu")
    groups = 2 if quick else prof.tasks_per_update
    return {"envs": groups * prof.group_size, "group": prof.group_size, "tokens": prof.max_new_tokens}


def sample(policy, shape: dict, fixed: bool, seed: int = SEED) -> list:
    """One turn of every env (groups of ``shape["group"]`` on one task); ``fixed``: every action full length."""
    from agentlab.rollout import SamplingSettings, rollout

    envs = fixed_length_envs(ENV_ID, shape["envs"], turns=1)
    seeds = [seed + i // shape["group"] for i in range(shape["envs"])]
    with torch.no_grad():
        if fixed:
            with without_end_of_turn(policy.model, policy.eot_id):
                return rollout(envs, policy, SamplingSettings(max_new_tokens=shape["tokens"]), seeds=seeds,
                               generator=torch.Generator().manual_seed(seed))
        return rollout(envs, policy, SamplingSettings(max_new_tokens=shape["tokens"]), seeds=seeds,
                       generator=torch.Generator().manual_seed(seed))


def mismatch(trainer, sampler, shape: dict) -> dict[str, float]:
    """`sampler_mismatch` of the trainer against ``sampler`` on one freely sampled turn of the batch."""
    from agentlab.algos.losses import policy_logp, sampler_mismatch
    from agentlab.rollout import pad_batch

    batch = pad_batch(sample(sampler, shape, fixed=False), trainer.pad_id)
    prox = policy_logp(trainer, batch, 1.0, max_tokens=None)  # (B, L-1) float32, adapter on
    stats = sampler_mismatch(prox, batch["old_logp"], batch["loss_mask"], 0.2, "token_truncated", 3.0)
    return {**stats, "tokens": int(batch["loss_mask"].sum())}


def measure(quick: bool) -> dict:
    from agentlab.policy import LoraSettings, Policy
    from agentlab.rollout import ACTION
    from agentlab.sampler import int8_sampler, merged_model

    shape = batch_shape(quick)
    torch.manual_seed(SEED)
    trainer = bench_policy(SMOLLM2, lora=LoraSettings(r=8, alpha=16))  # the real-cpu profile's RL adapter
    trainer.share_prompts = True  # as the real-cpu profile runs it
    with torch.no_grad():  # an adapter that has trained a little (B ≠ 0), so the merge matters
        for name, p in trainer.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 1e-3, generator=torch.Generator().manual_seed(len(name)))
    start = time.perf_counter()
    samplers = {"float32": trainer, **{name: int8_sampler(trainer, skip) for name, skip in INT8.items()}}
    # the int8 copies have the adapter merged, which alone saves LoRA's extra products: this side shows how much
    samplers["float32, adapter merged"] = Policy(merged_model(trainer).eval(), trainer.tokenizer, name="merged")
    samplers["float32, adapter merged"].share_prompts = True
    build_s = (time.perf_counter() - start) / (len(INT8) + 1)
    sides = {name: (lambda s=s: sample(s, shape, fixed=True)) for name, s in samplers.items()}
    runs = interleaved(sides, 1 if quick else 2)  # 2, not 3: the whole bench stays near 3 minutes on one core
    rows = {}
    for name, results in runs.items():
        tokens = sum(r == ACTION for t in results[0][1] for r in t.roles)
        rows[name] = {"tokens": tokens, "tps": [tokens / s for s, _ in results]}
    small = {**shape, "envs": 2 * shape["group"]}  # two groups: enough tokens for the means, a third of the time
    for name, sampler in samplers.items():
        rows[name]["mismatch"] = mismatch(trainer, sampler, small)
        print(f"  {name}: {[round(x, 1) for x in rows[name]['tps']]} tok/s, {rows[name]['mismatch']}", flush=True)
    return {"shape": shape, "rows": rows, "build_s": build_s, "threads": torch.get_num_threads()}


def run(quick: bool = False) -> str:
    m = measure(quick)
    shape, rows = m["shape"], m["rows"]
    base = median(rows["float32"]["tps"])
    body = table(["sampler", "action tokens/s (median)", "runs", "speed-up", "sampler_kl (k3)", "sampler_clip_frac",
                  "is_capped_frac (cap 3)"],
                 [[name, f"{median(r['tps']):.1f}", " ".join(f"{x:.1f}" for x in r["tps"]),
                   f"{median(r['tps']) / base:.2f}×", f"{r['mismatch']['sampler_kl']:.2e}",
                   f"{r['mismatch']['sampler_clip_frac']:.3f}", f"{r['mismatch']['is_capped_frac']:.4f}"]
                  for name, r in rows.items()])
    text = (f"{shape['envs']} GuessNumber envs (groups of {shape['group']} sharing a prompt), one turn of "
            f"{shape['tokens']} action tokens each, SmolLM2-135M-Instruct with a LoRA adapter (r=8), "
            f"{m['threads']} torch thread(s); sides interleaved. Building each copy (merge, then quantise) "
            f"took {m['build_s']:.1f} s on average. Mismatch on about {rows['float32']['mismatch']['tokens']} freely "
            f"sampled action tokens, against the float32 trainer.\n\n{body}")
    print(text)
    return text


if __name__ == "__main__":
    from bench.common import go_offline

    go_offline()
    run(quick="--quick" in sys.argv)
