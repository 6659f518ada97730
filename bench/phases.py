"""Each phase of one GRPO update against what this machine allows for it.

First the machine's two limits, measured in this process with its torch thread count:

* memory bandwidth: the best of a few copies of a float32 tensor at least 4x the last-level
  cache, counting the bytes read and the bytes written;
* matmul throughput: the best of a few ``F.linear`` calls shaped like the model's widest
  linear layer (hidden -> intermediate) on a batch of ``MATMUL_TOKENS`` tokens, in float32.

Then the phases of an update on one fixed batch: the profile's GuessNumber episodes (``ci`` for
the tiny policy, ``real-cpu`` for SmolLM2), groups of ``group_size`` sharing a task and, where
the profile says so, their prompt; every action exactly the turn's token budget long
(`bench.common.without_end_of_turn`), a LoRA adapter of the profile's rank on every linear.

1. sampling, one decode step of `agentlab.rollout.rollout` (the model's forward, from hooks);
   the rollout's prefill of prompts and replies is shown too;
2. the reference pass: `agentlab.algos.losses.reference_logp`, as `grpo.update` calls it;
3. the scoring forward with gradient: `Policy.score` and the loss over each minibatch;
4. the backward pass of that loss.

With N = N_body + N_head the model's weights less the embedding lookup (which reads one row per
token): N_body those of the decoder layers, LoRA's factors included, N_head those of ``lm_head``,

    forward over T tokens, S of them scored   FLOP = 2·N_body·T + 2·N_head·S
    backward to the inputs                    FLOP ≈ the forward's (LoRA's weight gradients are small)
    decode step of R rows                     FLOP = 2·N·R
                                              bytes = weight bytes + K and V of every position attended to
    limit of a pass                           FLOP / matmul rate
    limit of a decode step                    max(FLOP / matmul rate, bytes / bandwidth)

The reference pass runs with the adapter off, so its N_body leaves LoRA's factors out.
``lm_head`` counts only at the scored positions because `Policy.score` applies it to the action
tokens alone, and sampling to each row's last position. T counts real tokens, a group's shared
prompt once: padding is work the code could avoid. Attention's own products (4·hidden·context
FLOP per token and layer) are left out, so a limit is a little below the true minimum.
The issue's goal is every phase within 1.5x of its limit.

    python -m bench.phases [--model tiny|smollm2] [--quick] [--json FILE] [--threads N] [--micro-batch-tokens N]
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from bench.common import (SEED, SMOLLM2, ForwardClock, bench_policy, fixed_length_envs, interleaved, median, repeats,
                          seconds, table, without_end_of_turn)

ENV_ID = "agentlab/GuessNumber-v0"
GOAL = 1.5  # each phase within 1.5x of its limit
MATMUL_TOKENS = 1024  # rows of the throughput probe: a scoring pass's worth of tokens
COPY_TRIES, MATMUL_TRIES = 5, 10  # best of: a limit is what the machine can do, not what it usually does


# ---------------------------------------------------------------------------- the arithmetic

def pass_flops(n_body: int, n_head: int, tokens: int, scored: int) -> float:
    """FLOP of one forward pass over ``tokens`` tokens with ``lm_head`` applied at ``scored`` of them
    (2 per weight per token: a multiply and an add)."""
    return 2.0 * (n_body * tokens + n_head * scored)


def limit_s(flops: float, nbytes: float, gflops: float, gbps: float) -> float:
    """The fewest seconds a piece of work can take: its FLOP at the matmul rate or its bytes at
    the memory bandwidth, whichever is longer."""
    return max(flops / (gflops * 1e9), nbytes / (gbps * 1e9))


def bound_by(flops: float, nbytes: float, gflops: float, gbps: float) -> str:
    """Which of the two terms of `limit_s` sets it: ``"memory"`` or ``"compute"``."""
    return "memory" if nbytes / (gbps * 1e9) >= flops / (gflops * 1e9) else "compute"


def decode_step_work(n_body: int, n_head: int, weight_bytes: int, kv_bytes: int, rows: int,
                     attended: int) -> tuple[float, float]:
    """(FLOP, bytes) of one decode step: ``rows`` tokens through every weight, each scored, reading every
    weight once and the cached K and V (``kv_bytes`` per position) of the ``attended`` positions of all rows."""
    return pass_flops(n_body, n_head, rows, rows), float(weight_bytes + kv_bytes * attended)


def model_sizes(policy) -> dict:
    """N_body and N_head (see the module docstring), N_lora (the part of N_body in LoRA factors, which
    the reference pass skips), the bytes a decode step reads from the weights, and the bytes of K and V
    cached per position (all layers)."""
    model = policy.model
    head = model.get_output_embeddings().weight
    lookup = model.get_input_embeddings().weight
    body = [p for p in model.parameters() if p is not head and p is not lookup]  # a tied head is listed once
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    return {"n_body": sum(p.numel() for p in body), "n_head": head.numel(),
            "n_lora": sum(p.numel() for name, p in model.named_parameters() if "lora_" in name),
            "weight_bytes": sum(p.numel() * p.element_size() for p in body) + head.numel() * head.element_size(),
            "kv_bytes": 2 * cfg.num_hidden_layers * kv_heads * head_dim * head.element_size()}


def tokens_read(policy, ids: torch.Tensor, attn: torch.Tensor, only: torch.Tensor) -> int:
    """Tokens a scoring pass over right-padded ``ids`` (B, L) must run through the body: every real
    token, and a shared prompt once where the policy shares prompts (as `Policy.score` does)."""
    from agentlab.policy import shared_prompts

    lengths = attn.sum(1).tolist()
    shared = shared_prompts(ids, attn, only) if policy.share_prompts else None
    if shared is None:
        return int(sum(lengths))
    starts, owner = shared
    return sum(starts[o] for o in set(owner)) + sum(n - s for n, s in zip(lengths, starts))


# ---------------------------------------------------------------------------- the machine

def last_level_cache_bytes() -> int:
    """The largest CPU cache of cpu0, from sysfs (32 MiB where it cannot be read)."""
    sizes = []
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = f.read_text().strip().upper()
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        sizes.append(int(text.rstrip("KMG")) * scale)
    return max(sizes, default=32 * 2**20)


def bandwidth_gbps(nbytes: int, tries: int = COPY_TRIES) -> float:
    """Memory bandwidth, GB/s: bytes read plus bytes written by the fastest of ``tries`` float32 copies."""
    src, dst = torch.ones(nbytes // 4), torch.empty(nbytes // 4)
    dst.copy_(src)  # first touch: the pages are mapped before the clock runs
    best = min(seconds(dst.copy_, src)[0] for _ in range(tries))
    return 2 * src.numel() * 4 / best / 1e9


def matmul_gflops(tokens: int, d_in: int, d_out: int, tries: int = MATMUL_TRIES) -> float:
    """float32 ``F.linear`` throughput, GFLOP/s, of (tokens, d_in) by a (d_out, d_in) weight, best of ``tries``."""
    x, w = torch.randn(tokens, d_in), torch.randn(d_out, d_in)
    F.linear(x, w)
    best = min(seconds(F.linear, x, w)[0] for _ in range(tries))
    return 2 * tokens * d_in * d_out / best / 1e9


def machine_limits(policy) -> dict:
    """This process's limits at its thread count: bandwidth (GB/s) and matmul rate at the widest linear (GFLOP/s)."""
    from bench.run import cpu_model

    cfg, cache = policy.model.config, last_level_cache_bytes()
    copy_bytes = max(4 * cache, 64 * 2**20)
    return {"cpu": cpu_model(), "threads": torch.get_num_threads(), "cache_mib": cache / 2**20,
            "copy_mib": copy_bytes / 2**20, "gbps": bandwidth_gbps(copy_bytes),
            "matmul_shape": f"({MATMUL_TOKENS}, {cfg.hidden_size}) x ({cfg.hidden_size}, {cfg.intermediate_size})",
            "gflops": matmul_gflops(MATMUL_TOKENS, cfg.hidden_size, cfg.intermediate_size),
            "gflops_square": matmul_gflops(1024, 1024, 1024, tries=3)}  # for reference: the same core on a bigger shape


# ---------------------------------------------------------------------------- the phases

def batch_shape(model_name: str, quick: bool) -> dict:
    """The profile's update batch: ``groups`` tasks x ``group`` episodes of ``turns`` turns, ``tokens`` per action."""
    from agentlab.profiles import profile

    prof = profile("ci" if model_name == "tiny" else "real-cpu")
    return {"profile": prof.name, "groups": 2 if quick else prof.tasks_per_update, "group": prof.group_size,
            "turns": 2 if quick else 3, "tokens": prof.turn_tokens(ENV_ID), "lora_r": prof.lora_r,
            "share_prompts": prof.share_prompts}


def sample(policy, shape: dict, seed: int = SEED) -> dict:
    """Phase 1: the batch's episodes from `rollout`, and every forward pass the sampling made."""
    from agentlab.rollout import SamplingSettings, rollout

    n = shape["groups"] * shape["group"]
    envs = fixed_length_envs(ENV_ID, n, shape["turns"])
    with ForwardClock(policy.model) as meter, without_end_of_turn(policy.model, policy.eot_id):
        trajs = rollout(envs, policy, SamplingSettings(max_new_tokens=shape["tokens"]),
                        seeds=[seed + i // shape["group"] for i in range(n)],
                        generator=torch.Generator().manual_seed(seed))
    return {"trajs": trajs, "passes": meter.passes}


def update_batch(policy, trajs: list, group: int) -> dict:
    """The padded batch `grpo.update` builds, with its ``ref_logp`` and ``adv`` (B, L-1).

    The untrained policy's episodes all score alike, which gives every advantage 0: rewards are
    drawn at random instead, so the backward pass carries a real gradient (its cost is the same)."""
    from agentlab.advantages import group_advantages
    from agentlab.algos.losses import reference_logp
    from agentlab.rollout import pad_batch

    batch = pad_batch(trajs, policy.pad_id)
    batch["ref_logp"] = reference_logp(policy, batch, trajs[0].temperature, None)  # (B, L-1)
    rewards = torch.randn(len(trajs), generator=torch.Generator().manual_seed(SEED))  # (B,)
    batch["adv"] = group_advantages(rewards, group)[:, None] * batch["loss_mask"]  # (B, L-1)
    return batch


def reference_pass(policy, batch: dict, temperature: float, max_tokens: int | None = None) -> torch.Tensor:
    """Phase 2: log π_ref of every action token, no-grad passes with the adapter off, as the update runs them."""
    from agentlab.algos.losses import reference_logp

    return reference_logp(policy, batch, temperature, max_tokens)  # (B, L-1)


def score_and_backward(policy, batch: dict, temperature: float, max_tokens: int | None = None) -> dict:
    """Phases 3 and 4: one epoch of `grpo.update`'s gradient passes, its loss built from the same
    pieces, the forward (score + loss) and the backward timed apart. ``update`` runs the backward
    inside `AccumulatedStep.add`, so the loop is written out here; the gradient clip and the
    optimiser step (LoRA's few weights) are not timed. Also the work: tokens read and scored. ``max_tokens``:
    the update's ``micro_batch_tokens`` (None: each minibatch in one pass)."""
    from agentlab.algos.grpo import GRPOSettings
    from agentlab.algos.losses import clipped_surrogate, kl_to_reference, micro_batches, minibatches, share
    from agentlab.tensors import masked_mean

    s, mask = GRPOSettings(), batch["loss_mask"]
    out = {"forward_s": 0.0, "backward_s": 0.0, "tokens": 0, "scored": 0}
    for mb in minibatches(len(mask), s.minibatch_size, torch.Generator().manual_seed(SEED)):
        policy.model.zero_grad(set_to_none=True)  # as AccumulatedStep starts
        for _, part in micro_batches(batch, mb, max_tokens):
            m = part["loss_mask"]  # (b, l-1)
            start = time.perf_counter()
            scored = policy.score(part["ids"], part["attn"], temperature, entropy=True if s.ent_coef else "logged",
                                  only=m)
            pg_loss, _ = clipped_surrogate(scored["logp"], part["old_logp"], part["adv"], m, s.clip_coef)
            kl = kl_to_reference(scored["logp"], part["ref_logp"], m)
            loss = share(m, mask[mb]) * (pg_loss + s.beta * kl - s.ent_coef * masked_mean(scored["entropy"], m))
            middle = time.perf_counter()
            loss.backward()
            out["forward_s"] += middle - start
            out["backward_s"] += time.perf_counter() - middle
            out["tokens"] += tokens_read(policy, part["ids"], part["attn"], m)
            out["scored"] += int(m.sum())
    policy.model.zero_grad(set_to_none=True)
    return out


# ---------------------------------------------------------------------------- measuring

def load(model_name: str, shape: dict):
    """The bench's policy with a fresh LoRA adapter of the profile's rank, sharing prompts where the profile does."""
    from agentlab.policy import LoraSettings

    policy = bench_policy(SMOLLM2 if model_name == "smollm2" else "tiny",
                          lora=LoraSettings(r=shape["lora_r"], alpha=2 * shape["lora_r"]))  # alpha as training sets it
    policy.share_prompts = shape["share_prompts"]
    return policy


def sampling_rows(passes: list[dict], decode_s: float, prefill_s: float, sizes: dict, m: dict) -> list[dict]:
    """Rows for the decode step (per step) and the prefill (in all) from a rollout's forward passes."""
    decode = [p for p in passes if p["width"] == 1]
    prefill = [p for p in passes if p["width"] > 1]
    work = [decode_step_work(sizes["n_body"], sizes["n_head"], sizes["weight_bytes"], sizes["kv_bytes"], p["new"],
                             p["attended"]) for p in decode]  # (FLOP, bytes) per step
    bounds = [bound_by(f, b, m["gflops"], m["gbps"]) for f, b in work]
    kv_mb = median([p["attended"] * sizes["kv_bytes"] / 1e6 for p in decode])
    prefill_flops = sum(pass_flops(sizes["n_body"], sizes["n_head"], p["new"], p["rows"]) for p in prefill)
    steps = max(len(decode), 1)
    return [
        {"phase": "1. sampling: one decode step", "s": decode_s / steps, "step_bytes": median([b for _, b in work]),
         "limit_s": sum(limit_s(f, b, m["gflops"], m["gbps"]) for f, b in work) / steps,
         "bound": max(set(bounds), key=bounds.count) if bounds else "-",
         "work": f"{len(decode)} steps of {median([p['new'] for p in decode]):.0f} rows; "
                 f"{sizes['weight_bytes'] / 1e6:.2f} MB weights + {kv_mb:.2f} MB K/V per step"},
        {"phase": "1b. sampling: prefill, all of it", "s": prefill_s,
         "limit_s": limit_s(prefill_flops, 0, m["gflops"], m["gbps"]), "bound": "compute",
         "work": f"{len(prefill)} passes, {sum(p['new'] for p in prefill):,} new tokens, "
                 f"{prefill_flops / 1e9:.3f} GFLOP"},
    ]


def measure(model_name: str, quick: bool, micro_batch_tokens: int | None = None) -> dict:
    """The machine's limits, then every phase on one batch, the phases interleaved over the repeats; the
    reference and gradient passes in micro-batches of at most ``micro_batch_tokens`` (None: one per minibatch)."""
    torch.manual_seed(SEED)
    shape = batch_shape(model_name, quick)
    policy = load(model_name, shape)
    sizes = model_sizes(policy)
    machine = machine_limits(policy)
    sampled = sample(policy, shape)  # also the warm-up: first calls allocate and pick kernels
    trajs, temperature = sampled["trajs"], sampled["trajs"][0].temperature
    batch = update_batch(policy, trajs, shape["group"])
    score_and_backward(policy, batch, temperature, micro_batch_tokens)  # warm-up of the gradient passes
    runs = interleaved({"sampling": lambda: sample(policy, shape),
                        "reference": lambda: reference_pass(policy, batch, temperature, micro_batch_tokens),
                        "update": lambda: score_and_backward(policy, batch, temperature, micro_batch_tokens)},
                       repeats(quick))
    rollout_s = median([dt for dt, _ in runs["sampling"]])
    decode_s = [sum(p["s"] for p in r["passes"] if p["width"] == 1) for _, r in runs["sampling"]]
    prefill_s = [sum(p["s"] for p in r["passes"] if p["width"] > 1) for _, r in runs["sampling"]]
    rows = sampling_rows(runs["sampling"][0][1]["passes"], median(decode_s), median(prefill_s), sizes, machine)
    ref_tokens = tokens_read(policy, batch["ids"], batch["attn"], batch["loss_mask"])
    ref_scored = int(batch["loss_mask"].sum())
    grad = runs["update"][0][1]
    n_body, n_base = sizes["n_body"], sizes["n_body"] - sizes["n_lora"]  # the reference runs without the adapter
    for phase, s, body, tokens, scored in [
            ("2. reference pass (no grad, adapter off)", median([dt for dt, _ in runs["reference"]]), n_base,
             ref_tokens, ref_scored),
            ("3. scoring forward with grad (+ loss)", median([r["forward_s"] for _, r in runs["update"]]), n_body,
             grad["tokens"], grad["scored"]),
            ("4. backward of the GRPO loss", median([r["backward_s"] for _, r in runs["update"]]), n_body,
             grad["tokens"], grad["scored"])]:
        flops = pass_flops(body, sizes["n_head"], tokens, scored)
        rows.append({"phase": phase, "s": s, "limit_s": limit_s(flops, 0, machine["gflops"], machine["gbps"]),
                     "bound": "compute", "work": f"{tokens:,} tokens, {scored:,} scored, {flops / 1e9:.3f} GFLOP"})
    for row in rows:
        row["ratio"] = row["s"] / row["limit_s"]
        row["goal_met"] = row["ratio"] <= GOAL
    return {"model": model_name, "shape": shape, "sizes": sizes, "machine": machine, "rows": rows,
            "rollout_s": rollout_s, "decode_share": median(decode_s) / rollout_s,
            "prefill_share": median(prefill_s) / rollout_s,
            "episodes": len(trajs), "length": median([len(t.token_ids) for t in trajs]),
            "micro_batch_tokens": micro_batch_tokens}


def gradient_ab(arms: dict, repeats: int = 2, model_name: str = "smollm2", quick: bool = False) -> list[dict]:
    """Phases 3 and 4 A/B in one process: one epoch of gradient passes (`score_and_backward`, each minibatch in
    one pass) on the profile's batch, inside each arm's context (``arms``: name -> a function returning a
    context manager), the arms interleaved so that a change in the machine's state falls on all of them.
    Prints and returns a row per arm and repeat: forward and backward seconds, the process's kernel and user
    CPU time, minor page faults and peak resident memory (`bench.entropy_ab`, `bench.malloc_ab`)."""
    from agentlab.memory import format_bytes, peak_rss, peak_rss_reset

    shape = batch_shape(model_name, quick)
    policy = load(model_name, shape)
    trajs = sample(policy, shape)["trajs"]
    batch = update_batch(policy, trajs, shape["group"])
    width = max(map(len, arms))
    rows = []
    for rep in range(repeats):
        for name, context in arms.items():
            peak_rss_reset()
            r0 = resource.getrusage(resource.RUSAGE_SELF)
            with context():
                out = score_and_backward(policy, batch, trajs[0].temperature)
            r1 = resource.getrusage(resource.RUSAGE_SELF)
            row = {"arm": name, "repeat": rep, "forward_s": out["forward_s"], "backward_s": out["backward_s"],
                   "sys_s": r1.ru_stime - r0.ru_stime, "user_s": r1.ru_utime - r0.ru_utime,
                   "minor_faults": r1.ru_minflt - r0.ru_minflt, "peak_rss": peak_rss()}
            print(f"{rep} {name:{width}s}  forward {row['forward_s']:6.1f} s  backward {row['backward_s']:6.1f} s  "
                  f"sys {row['sys_s']:6.1f} s  user {row['user_s']:6.1f} s  minor faults {row['minor_faults']:,}  "
                  f"peak RSS {format_bytes(row['peak_rss'])}", flush=True)
            rows.append(row)
    return rows


# ---------------------------------------------------------------------------- report

def report(r: dict, n_repeats: int) -> str:
    m, z, shape = r["machine"], r["sizes"], r["shape"]
    model = "the tiny policy" if r["model"] == "tiny" else "SmolLM2-135M-Instruct"
    shared = "yes" if shape["share_prompts"] else "no"
    passes = (f"micro-batches of at most {r['micro_batch_tokens']:,} tokens" if r["micro_batch_tokens"]
              else "one per minibatch")
    head = (f"{m['cpu']}, {m['threads']} torch thread(s). Memory bandwidth {m['gbps']:.1f} GB/s (read + write, "
            f"best of {COPY_TRIES} copies of {m['copy_mib']:.0f} MiB; last-level cache {m['cache_mib']:.0f} MiB). "
            f"Matmul {m['gflops']:.1f} GFLOP/s in float32 at {m['matmul_shape']}, the model's widest linear "
            f"({m['gflops_square']:.1f} at 1024 x 1024 x 1024, for reference).\n\n"
            f"{model} with LoRA r={shape['lora_r']} (the `{shape['profile']}` profile): N_body {z['n_body']:,} "
            f"({z['n_lora']:,} of them LoRA's), N_head {z['n_head']:,}, K/V {z['kv_bytes']:,} bytes per position. "
            f"Batch: {r['episodes']} GuessNumber episodes ({shape['groups']} groups of {shape['group']}, prompts "
            f"shared: {shared}), {shape['turns']} turns of {shape['tokens']} action tokens, {r['length']:.0f} tokens "
            f"each. Reference and gradient passes: {passes}. Median of {n_repeats} interleaved run(s).")
    body = table(["phase", "work", "seconds", "limit s", "bound by", "measured / limit", f"goal <= {GOAL:g}x"],
                 [[x["phase"], x["work"], x["s"], x["limit_s"], x["bound"], f"{x['ratio']:.1f}x",
                   "met" if x["goal_met"] else "not met"] for x in r["rows"]])
    tail = (f"The rollout took {r['rollout_s']:.2f} s: {100 * r['decode_share']:.0f}% in decode steps' forward passes, "
            f"{100 * r['prefill_share']:.0f}% in prefill; the rest is sampling from the logits, the envs and Python. "
            "Phases 3 and 4 are one epoch of the update's minibatches; an update runs `epochs` of them after one "
            "reference pass.")
    step = r["rows"][0]
    if step["step_bytes"] < m["cache_mib"] * 2**20:
        tail += (f" A decode step reads {step['step_bytes'] / 2**20:.1f} MiB, which fits in the last-level cache: "
                 "memory bandwidth does not bind it, and its limit here is an overestimate.")
    return f"{head}\n\n{body}\n\n{tail}"


def run(quick: bool = False, model: str = "smollm2", json_path: str | None = None,
        micro_batch_tokens: int | None = None) -> str:
    """Measure, print and return the section; with ``json_path`` append one JSON line per phase."""
    measured = measure(model, quick, micro_batch_tokens)
    text = report(measured, repeats(quick))
    print(text, flush=True)
    if json_path:
        out = Path(json_path)
        out.parent.mkdir(parents=True, exist_ok=True)
        keep = {k: measured["machine"][k] for k in ("cpu", "threads", "gbps", "gflops", "gflops_square")}
        with out.open("a") as f:
            for row in measured["rows"]:
                f.write(json.dumps({"model": model, "quick": quick, "micro_batch_tokens": micro_batch_tokens, **keep,
                                    **measured["sizes"], **row}) + "\n")
    return text


def main() -> None:
    from bench.common import go_offline

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=["tiny", "smollm2"], default="smollm2")
    ap.add_argument("--quick", action="store_true", help="2 groups of 2 turns, one run per phase")
    ap.add_argument("--json", default=None, help="append one JSON line per phase to this file")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: as torch starts)")
    ap.add_argument("--micro-batch-tokens", type=int, default=None,
                    help="the update's micro-batch budget, as a preflight plans it (default: one pass a minibatch)")
    args = ap.parse_args()
    go_offline()
    if args.threads:
        torch.set_num_threads(args.threads)
    run(quick=args.quick, model=args.model, json_path=args.json, micro_batch_tokens=args.micro_batch_tokens)


if __name__ == "__main__":
    main()
