"""Rollout throughput at equal work: agentlab's multi-turn rollout vs batched `generate` that re-reads the chat.

The peer is what a user runs without agentlab, and what TRL's multi-turn rollouts do: every
turn, for all live envs at once, render each chat so far with the chat template, encode the
batch (left-padded) and call ``model.generate`` on it (``do_sample=True, top_k=0,
top_p=1.0``), decode, step the envs, append the replies to the chats. The whole history goes
through the model again each turn. agentlab keeps every env's KV cache across turns and feeds
the model only what is new: the end of the last action and the env's reply.

A second table measures `Policy.share_prompts` in the setting it is for: GRPO groups, whose
G episodes start from one prompt. With it on, sampling reads each distinct prompt once and
copies its KV cache, and scoring (the update's forward pass) runs it once per group.

Both sides run the same model, the same GuessNumber tasks (env seeds) and exactly
``TOKENS_PER_TURN`` action tokens per turn: the end-of-turn token is pushed out of reach
(`bench.common.without_end_of_turn`), so every action is cut at the limit, is invalid, and
every episode runs to its step limit, which sets the number of turns. Both sides treat a cut
action alike (the env gets an empty action and the reply is `agentlab.rollout.TOO_LONG`), so
the chats grow by the same text on both.
"""

from __future__ import annotations

import time

import torch

from bench.common import (MODELS, SEED, SMOLLM2, ForwardClock, bench_policy, breakdown, fixed_length_envs,
                          interleaved, median, progress, repeats, seconds, sharing_prompts, table, verdict,
                          without_end_of_turn)

ENV_ID = "agentlab/GuessNumber-v0"
TOKENS_PER_TURN = 24  # the ci profile's max_new_tokens
PROFILED_TURNS = 3  # the torch profiler holds every op's event: a few turns show the same ops in bounded memory
# The goal is judged at the full plan's size for SmolLM2, 8 live envs; fewer envs lower the ratio, since a
# decode step costs about the same for 4 rows as for 8 while the peer's prefill grows with the rows.
GOAL_MODEL, GOAL_TURNS, GOAL_ENVS, GOAL = SMOLLM2, 20, 8, 3.0
GROUP, SHARED_TURNS = 8, 3  # a GRPO group's size, and turns per episode in the shared-prompt table


def cells(quick: bool) -> list[tuple[str, int, int]]:
    """(model, live envs per turn, turns per episode) to measure."""
    if quick:  # each turn count once; SmolLM2 also at 4 envs, to show how the ratio depends on the batch
        return ([("tiny", 8, t) for t in (5, 20, 50)] + [(SMOLLM2, GOAL_ENVS, 5), (SMOLLM2, 4, 20)]
                + [(SMOLLM2, GOAL_ENVS, t) for t in (20, 50)])
    return [(m, n, t) for m, n in (("tiny", 16), (SMOLLM2, GOAL_ENVS)) for t in (5, 20, 50)]


# ---------------------------------------------------------------------------- the two sides

def agentlab_rollout(policy, n_envs: int, turns: int, seed: int = SEED, group: int = 1) -> dict:
    """agentlab's `rollout` over ``n_envs`` envs of ``turns`` turns, ``group`` consecutive envs per task;
    action tokens and where the model's time went."""
    from agentlab.rollout import ACTION, SamplingSettings, rollout

    envs = fixed_length_envs(ENV_ID, n_envs, turns)
    with ForwardClock(policy.model) as clock:
        trajs = rollout(envs, policy, SamplingSettings(max_new_tokens=TOKENS_PER_TURN),
                        seeds=[seed + i // group for i in range(n_envs)], generator=torch.Generator().manual_seed(seed))
    return {"tokens": sum(r == ACTION for t in trajs for r in t.roles), "turns": sum(t.num_turns for t in trajs),
            "context": median([len(t.token_ids) for t in trajs]), "encode_s": 0.0,
            "prefill_s": clock.prefill_s, "decode_s": clock.decode_s, "read": clock.prefill_tokens, "trajs": trajs}


def generate_rollout(policy, n_envs: int, turns: int, seed: int = SEED) -> dict:
    """The peer: each turn, re-render and re-encode every live chat and `generate` for all of them at once."""
    from agentlab.rollout import TOO_LONG

    model, tokenizer, eot = policy.model, policy.tokenizer, policy.eot_id
    envs = fixed_length_envs(ENV_ID, n_envs, turns)
    chats = []
    for i, env in enumerate(envs):
        obs, _ = env.reset(seed=seed + i)
        chats.append([{"role": "system", "content": env.unwrapped.system_prompt}, {"role": "user", "content": obs}])
    torch.manual_seed(seed)
    live, tokens, played, encode_s, context = list(range(n_envs)), 0, 0, 0.0, {}
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"  # generate continues every row from its last column
    try:
        with ForwardClock(model) as clock:
            while live:
                start = time.perf_counter()
                texts = [tokenizer.apply_chat_template(chats[i], add_generation_prompt=True, tokenize=False)
                         for i in live]
                batch = tokenizer(texts, padding=True, return_tensors="pt", add_special_tokens=False)
                encode_s += time.perf_counter() - start
                out = model.generate(**batch, do_sample=True, top_k=0, top_p=1.0, temperature=1.0,
                                     max_new_tokens=TOKENS_PER_TURN, pad_token_id=policy.pad_id, eos_token_id=eot)
                still = []
                for row, i in enumerate(live):
                    ids = out[row, batch["input_ids"].shape[1]:].tolist()  # (new tokens,)
                    ids = ids[:ids.index(eot) + 1] if eot in ids else ids
                    finished = bool(ids) and ids[-1] == eot
                    text = tokenizer.decode(ids[:-1] if finished else ids, skip_special_tokens=False)
                    obs, _, terminated, truncated, _ = envs[i].step(text if finished else "")
                    obs = obs if finished else TOO_LONG.format(n=TOKENS_PER_TURN)
                    chats[i] += [{"role": "assistant", "content": text}, {"role": "user", "content": obs}]
                    tokens, played = tokens + len(ids), played + 1
                    context[i] = int(batch["attention_mask"][row].sum()) + len(ids)
                    if not (terminated or truncated):
                        still.append(i)
                live = still
    finally:
        tokenizer.padding_side = side
    return {"tokens": tokens, "turns": played, "context": median(list(context.values())), "encode_s": encode_s,
            "prefill_s": clock.prefill_s, "decode_s": clock.decode_s, "read": clock.prefill_tokens}


SIDES = {"agentlab": agentlab_rollout, "generate": generate_rollout}


def grouped_rollout(policy, n_tasks: int, share: bool, seed: int = SEED) -> dict:
    """``n_tasks`` groups of ``GROUP`` episodes (one task each), sampled and then scored once without a
    gradient, with `Policy.share_prompts` set to ``share``."""
    from agentlab.rollout import PROMPT, pad_batch

    with sharing_prompts(policy, share):
        sample_s, sampled = seconds(agentlab_rollout, policy, n_tasks * GROUP, SHARED_TURNS, seed, GROUP)
        batch = pad_batch(sampled["trajs"], policy.pad_id)
        score_s, _ = seconds(lambda: policy.score(batch["ids"], batch["attn"], only=batch["loss_mask"]))
    prompt = median([t.roles.count(PROMPT) for t in sampled["trajs"]])
    return {"sample_s": sample_s, "score_s": score_s, "read": sampled["read"], "prompt": prompt}


# ---------------------------------------------------------------------------- measuring

def measure_cell(policy, n_envs: int, turns: int, n_repeats: int) -> dict:
    """Both sides on one cell, interleaved; medians of tokens/s and of each side's time split."""
    runs = interleaved({name: (lambda f=f: f(policy, n_envs, turns)) for name, f in SIDES.items()}, n_repeats)
    row = {"envs": n_envs, "turns": turns}
    for name, results in runs.items():
        wall = [dt for dt, _ in results]
        first = results[0][1]
        row[name] = {"tps": median([r["tokens"] / dt for dt, r in results]), "s": median(wall),
                     "tokens": first["tokens"], "turns": first["turns"] / n_envs, "context": first["context"],
                     "read": first["read"], **{k: median([r[k] / dt for dt, r in results])
                                               for k in ("encode_s", "prefill_s", "decode_s")}}
    row["ratio"] = row["agentlab"]["tps"] / row["generate"]["tps"]
    return row


def measure_shared(policy, model_name: str, quick: bool) -> dict:
    """Sampling and scoring GRPO groups with and without sharing their prompts, interleaved."""
    n_tasks = (2 if model_name == SMOLLM2 else 4) if quick else (4 if model_name == SMOLLM2 else 8)
    runs = interleaved({share: (lambda share=share: grouped_rollout(policy, n_tasks, share))
                        for share in (False, True)}, repeats(quick))
    row = {"model": model_name, "episodes": n_tasks * GROUP}
    for share, results in runs.items():
        row[share] = {k: median([r[k] for _, r in results]) for k in ("sample_s", "score_s")}
        row[share].update({k: results[0][1][k] for k in ("read", "prompt")})
    return row


def measure(quick: bool) -> list[dict]:
    """Every cell, model by model (one model loaded at a time)."""
    rows, n_repeats, plan = [], repeats(quick), cells(quick)
    for model_name in dict.fromkeys(m for m, _, _ in plan):
        policy = bench_policy(model_name)
        with torch.no_grad(), without_end_of_turn(policy.model, policy.eot_id):
            for side in SIDES.values():  # warm-up: first calls allocate and pick kernels
                side(policy, 2, 2)
            for m, n_envs, turns in progress([c for c in plan if c[0] == model_name], f"rollout: {model_name}"):
                row = {"model": m, "params": policy.num_parameters(), **measure_cell(policy, n_envs, turns, n_repeats)}
                print(f"  {m} {n_envs} envs x {turns} turns: agentlab {row['agentlab']['tps']:.0f} tok/s, "
                      f"generate {row['generate']['tps']:.0f} tok/s, ratio {row['ratio']:.2f}x", flush=True)
                rows.append(row)
            shared = measure_shared(policy, model_name, quick)
            print(f"  {model_name} shared prompts: sampling {shared[False]['sample_s'] / shared[True]['sample_s']:.2f}x, "
                  f"scoring {shared[False]['score_s'] / shared[True]['score_s']:.2f}x", flush=True)
            rows.append({"shared": shared})
        if model_name == GOAL_MODEL:
            rows.append({"policy": policy})  # kept for the profile of a missed goal
        else:
            del policy
    return rows


# ---------------------------------------------------------------------------- report

def pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def run(quick: bool = False) -> str:
    """Measure, and return the RESULTS.md section."""
    measured = measure(quick)
    kept = next((r["policy"] for r in measured if "policy" in r), None)
    shared = [r["shared"] for r in measured if "shared" in r]
    rows = [r for r in measured if "policy" not in r and "shared" not in r]
    goal_row = next((r for r in rows if (r["model"], r["turns"], r["envs"]) == (GOAL_MODEL, GOAL_TURNS, GOAL_ENVS)),
                    rows[-1])
    a, g = "agentlab", "generate"
    body = [
        f"GuessNumber with the step limit set to the number of turns, exactly {TOKENS_PER_TURN} action tokens per "
        "turn on both sides (end-of-turn suppressed), sampling at temperature 1 with no top-k / top-p, fp32, no "
        f"LoRA. Median of {repeats(quick)} interleaved run(s) per cell (agentlab, generate, agentlab, ...). "
        "The tiny policy is given 4,096 positions (its config says 768; `bench.common.bench_policy`).",
        "",
        table(["model", "envs", "turns", "agentlab tokens/s", "generate tokens/s", "ratio", "agentlab s",
               "generate s", "action tokens (each side)", "tokens per episode at the end",
               "positions read by prefill (agentlab / generate)"],
              [[MODELS[r["model"]], r["envs"], r["turns"], r[a]["tps"], r[g]["tps"], f"**{r['ratio']:.2f}x**",
                r[a]["s"], r[g]["s"], "%d / %d" % (r[a]["tokens"], r[g]["tokens"]),
                "%d / %d" % (r[a]["context"], r[g]["context"]), f"{r[a]['read']:,} / {r[g]['read']:,}"]
               for r in rows]),
        "",
        "Where each side's time goes (share of its wall time): rendering and encoding the chat as text "
        "(`apply_chat_template` + the tokenizer; agentlab encodes each reply once, inside its rollout's own "
        "bookkeeping), the model reading several tokens per row (\"prefill\": for generate the whole history "
        "every turn, for agentlab only what is new), and sampling one token per row (\"decode\"); the rest is "
        "sampling, the envs and Python.",
        "",
        table(["model", "envs", "turns", "generate: re-encode text", "generate: prefill (re-reading the history)",
               "generate: decode", "agentlab: prefill (new tokens only)", "agentlab: decode"],
              [[MODELS[r["model"]], r["envs"], r["turns"], pct(r[g]["encode_s"]), pct(r[g]["prefill_s"]), pct(r[g]["decode_s"]),
                pct(r[a]["prefill_s"]), pct(r[a]["decode_s"])] for r in rows]),
        "",
        verdict(f"agentlab's rollout speed-up on {MODELS[goal_row['model']]} at {goal_row['turns']} turns "
                f"({goal_row['envs']} envs)", goal_row["ratio"], GOAL),
        "",
        f"**A group's shared prompt** (`Policy.share_prompts`): GRPO groups of {GROUP} episodes of one task each, "
        f"{SHARED_TURNS} turns, sampled by `rollout` and then scored by one `Policy.score` pass over the action "
        "tokens (no gradient), with the prompt run once per episode (off) or once per group (on). Seconds are "
        f"medians of {repeats(quick)} interleaved run(s).",
        "",
        table(["model", "episodes", "prompt tokens", "sampling s (off / on)", "sampling speed-up",
               "positions read by prefill (off / on)", "scoring s (off / on)", "scoring speed-up"],
              [[MODELS[r["model"]], r["episodes"], r[False]["prompt"],
                f"{r[False]['sample_s']:.2f} / {r[True]['sample_s']:.2f}",
                f"{r[False]['sample_s'] / r[True]['sample_s']:.2f}x", f"{r[False]['read']:,} / {r[True]['read']:,}",
                f"{r[False]['score_s']:.2f} / {r[True]['score_s']:.2f}",
                f"{r[False]['score_s'] / r[True]['score_s']:.2f}x"] for r in shared]),
    ]
    if goal_row["ratio"] < GOAL and kept is not None:
        with torch.no_grad(), without_end_of_turn(kept.model, kept.eot_id):
            n_envs, turns, short = goal_row["envs"], goal_row["turns"], min(goal_row["turns"], PROFILED_TURNS)
            body += ["", breakdown(lambda: agentlab_rollout(kept, n_envs, turns), f"agentlab rollout ({n_envs} envs x {turns} turns)",
                                   torch_fn=lambda: agentlab_rollout(kept, n_envs, short),
                                   torch_label=f"shorter rollout ({n_envs} envs x {short} turns)")]
    return "\n".join(body)
