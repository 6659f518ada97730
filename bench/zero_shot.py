"""The real models zero-shot on every env, each in its own action format: valid actions and success.

    python -m bench.zero_shot                                   # both models, all ten envs, 20 tasks each
    python -m bench.zero_shot --models qwen2.5-coder-0.5b --envs GuessNumber SQL --tasks 20

Each model is loaded as `agentlab eval --policy NAME` loads it and plays in the format its chat
template speaks (`Policy.action_format`): SmolLM2-135M-Instruct in the kit's ``name(argument)``
grammar, Qwen2.5-Coder-0.5B-Instruct in its template's ``<tool_call>`` JSON with the env's tools as
schemas. Greedy, on the first ``--tasks`` eval tasks of each env, easiest levels first (tasks no
warm-up or training run sees), with a per-turn budget of the ``real-cpu`` profile's tokens for the
env and at least ``MIN_TOKENS``. Rows are appended to ``--out`` (JSON lines) as each env finishes, so
an interrupted run keeps what it measured and ``--resume`` skips those; the markdown table for
bench/RESULTS.md is printed at the end.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter

from bench.common import go_offline, jsonl_rows, rate, table

MODELS = ("smollm2-135m", "qwen2.5-coder-0.5b")
MIN_TOKENS = 64  # a native tool call with its tags is about 25 of Qwen's tokens; room for a thought before it


def held_out(env_id: str, n: int) -> list:
    from agentlab.evaluate import split_tasks

    return sorted(split_tasks(env_id), key=lambda t: t.difficulty)[:n]  # stable: the split's order within a level


def first_error(result) -> str:
    """The most common reason an action was refused, as the env worded it (first 70 characters)."""
    reasons = Counter()
    for traj in result.trajectories:
        replies = [m["content"] for m in traj.messages[2:] if m["role"] == "user"]
        for info, reply in zip(traj.infos, replies):
            if not info.get("valid", True):
                reasons[reply.split(" You wrote:")[0][:70]] += 1
    return reasons.most_common(1)[0][0] if reasons else ""


def measure(policy, name: str, env_id: str, n: int) -> dict:
    from agentlab.evaluate import evaluate
    from agentlab.profiles import profile

    budget = max(MIN_TOKENS, profile("real-cpu").turn_tokens(env_id))
    tasks = held_out(env_id, n)
    t0 = time.time()
    result = evaluate(policy, env_id, tasks=tasks, max_new_tokens=budget, batch_size=len(tasks), progress=True)
    return {"model": name, "env": env_id, "format": policy.action_format, "tasks": len(tasks), "budget": budget,
            "success": rate(result), "success_rate": result.success_rate, "valid": 1 - result.invalid_rate,
            "turns": result.mean_turns, "seconds": round(time.time() - t0), "why_invalid": first_error(result)}


def main() -> None:
    from agentlab.envs import ENV_IDS, full_id
    from agentlab.policy import load_policy

    go_offline()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--envs", nargs="+", default=ENV_IDS, help="env ids or short names (default: all ten)")
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--out", default="runs/zero_shot.jsonl")
    parser.add_argument("--resume", action="store_true", help="skip the (model, env) rows --out already holds")
    args = parser.parse_args()
    out, done = jsonl_rows(args.out, args.resume)
    for name in args.models:
        policy = None
        for env_id in map(full_id, args.envs):
            if any(r["model"] == name and r["env"] == env_id for r in done):
                continue
            policy = policy or load_policy(name)
            row = measure(policy, name, env_id, args.tasks)
            print(json.dumps(row), flush=True)
            with open(out, "a") as f:
                f.write(json.dumps(row) + "\n")
            done.append(row)
    rows = [[r["model"], r["format"], r["env"].split("/")[-1], r["tasks"], r["budget"], f"{r['valid']:.2f}",
             r["success"], f"{r['turns']:.1f}", r["seconds"], r["why_invalid"]] for r in done]
    print(table(["model", "format", "env", "tasks", "tokens per turn", "valid actions", "greedy success [95%]",
                 "turns", "seconds", "most common refusal"], rows))


if __name__ == "__main__":
    main()
