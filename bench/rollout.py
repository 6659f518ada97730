"""Rollout throughput: agentlab's batched multi-turn rollout vs the plain Hugging Face loop.

The plain way is what a user writes first: for one env at a time, every turn, render the
whole chat history with the chat template, encode it, call ``model.generate`` (sampling with
``do_sample=True, top_k=0, top_p=1.0``), decode, step the env. agentlab samples the next
action of every live env in one batched call and appends only the new tokens to each
context.

Both sides use the same untrained tiny policy, the same GuessNumber tasks (env seeds) and
exactly ``TOKENS_PER_TURN`` action tokens per turn (the end-of-turn token is suppressed, see
`bench.common.without_end_of_turn`), so every episode runs its five turns on both sides and
action tokens per second compares like with like.
"""

from __future__ import annotations

import torch

from bench.common import (SEED, breakdown, median, progress, repeats, seconds, table, tiny_path, verdict,
                          without_end_of_turn)

ENV_ID = "agentlab/GuessNumber-v0"
TOKENS_PER_TURN = 24  # the ci profile's max_new_tokens
SIZES, QUICK_SIZES = (1, 8, 32, 64), (1, 8, 32)
GOAL_ENVS, GOAL = 32, 5.0


def agentlab_rollout(policy, n_envs: int, seed: int = SEED) -> dict:
    """One batched rollout over ``n_envs`` GuessNumber envs; action tokens and turns."""
    from agentlab.rollout import ACTION, SamplingSettings, make_envs, rollout

    envs = make_envs(ENV_ID, n_envs)
    gen = torch.Generator().manual_seed(seed)
    trajs = rollout(envs, policy, SamplingSettings(max_new_tokens=TOKENS_PER_TURN),
                    seeds=[seed + i for i in range(n_envs)], generator=gen)
    return {"tokens": sum(r == ACTION for t in trajs for r in t.roles), "turns": sum(t.num_turns for t in trajs)}


def plain_episode(model, tokenizer, env, seed: int) -> dict:
    """One episode the plain way: re-render and re-encode the whole chat every turn, then generate."""
    obs, _ = env.reset(seed=seed)
    messages = [{"role": "system", "content": env.unwrapped.system_prompt}, {"role": "user", "content": obs}]
    tokens = turns = 0
    while True:
        inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                               return_dict=True)
        out = model.generate(**inputs, do_sample=True, top_k=0, top_p=1.0, temperature=1.0,
                             max_new_tokens=TOKENS_PER_TURN, pad_token_id=tokenizer.pad_token_id)
        action_ids = out[0, inputs["input_ids"].shape[1]:]  # (new tokens,)
        text = tokenizer.decode(action_ids, skip_special_tokens=True)
        obs, _, terminated, truncated, _ = env.step(text)
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": obs}]
        tokens, turns = tokens + len(action_ids), turns + 1
        if terminated or truncated:
            return {"tokens": tokens, "turns": turns}


def plain_rollout(model, tokenizer, n_envs: int, seed: int = SEED) -> dict:
    """``n_envs`` episodes, one env after the other."""
    from agentlab.envs import make

    torch.manual_seed(seed)
    total = {"tokens": 0, "turns": 0}
    for i in range(n_envs):
        episode = plain_episode(model, tokenizer, make(ENV_ID), seed + i)
        total = {k: total[k] + episode[k] for k in total}
    return total


def measure(policy, sizes, n_repeats: int) -> list[dict]:
    """Median action tokens/s of both sides at each batch size (the sides alternate within a repeat)."""
    model, tokenizer = policy.model, policy.tokenizer
    agentlab_rollout(policy, 2)  # warm-up: first calls allocate and pick kernels
    plain_rollout(model, tokenizer, 1)
    rows = []
    for n in progress(sizes, "rollout: env counts"):
        ours, plain = [], []
        for _ in progress(range(n_repeats), f"rollout: {n} envs"):
            dt, a = seconds(agentlab_rollout, policy, n)
            ours.append((dt, a))
            dt, b = seconds(plain_rollout, model, tokenizer, n)
            plain.append((dt, b))
        row = {"envs": n,
               "agentlab_tps": median([r["tokens"] / dt for dt, r in ours]),
               "plain_tps": median([r["tokens"] / dt for dt, r in plain]),
               "agentlab_s": median([dt for dt, _ in ours]), "plain_s": median([dt for dt, _ in plain]),
               "tokens": (ours[0][1]["tokens"], plain[0][1]["tokens"]),
               "turns": (ours[0][1]["turns"] / n, plain[0][1]["turns"] / n)}
        row["ratio"] = row["agentlab_tps"] / row["plain_tps"]
        print(f"  {n:3d} envs: agentlab {row['agentlab_tps']:8.0f} tok/s, plain {row['plain_tps']:6.0f} tok/s, "
              f"ratio {row['ratio']:.1f}x", flush=True)
        rows.append(row)
    return rows


def run(quick: bool = False) -> str:
    """Measure, and return the RESULTS.md section."""
    from agentlab.policy import load_policy

    policy = load_policy(tiny_path())
    sizes = QUICK_SIZES if quick else SIZES
    n_repeats = repeats(quick)
    with torch.no_grad(), without_end_of_turn(policy.model, policy.eot_id):
        rows = measure(policy, sizes, n_repeats)
        goal_row = next((r for r in rows if r["envs"] == GOAL_ENVS), rows[-1])
        miss = goal_row["ratio"] < GOAL
        profile_md = breakdown(lambda: agentlab_rollout(policy, goal_row["envs"]),
                               f"agentlab rollout of {goal_row['envs']} envs") if miss else ""
    n_params = policy.num_parameters()
    body = [
        f"Untrained tiny policy ({n_params / 1e6:.2f} M parameters, fp32, no LoRA) on {ENV_ID} "
        f"(difficulty 0, 5 turns), exactly {TOKENS_PER_TURN} action tokens per turn on both sides, "
        f"sampling at temperature 1 with no top-k / top-p. Median of {n_repeats} run(s) per cell.",
        "",
        table(["envs", "agentlab tokens/s", "HF generate tokens/s", "ratio", "agentlab s", "HF s",
               "action tokens (agentlab / HF)", "turns per episode (agentlab / HF)"],
              [[r["envs"], r["agentlab_tps"], r["plain_tps"], f"{r['ratio']:.1f}x", r["agentlab_s"], r["plain_s"],
                "%d / %d" % r["tokens"], "%.1f / %.1f" % r["turns"]] for r in rows]),
        "",
        verdict(f"the speed-up at {goal_row['envs']} envs", goal_row["ratio"], GOAL),
    ]
    if profile_md:
        body += ["", profile_md]
    return "\n".join(body)
