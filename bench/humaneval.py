"""Greedy pass@1 on all 164 HumanEval problems through the kit's env and sandbox, beside the published figure.

    python -m bench.humaneval                                   # Qwen2.5-Coder-0.5B-Instruct, 640 tokens a turn
    python -m bench.humaneval --model qwen2.5-coder-1.5b --out runs/humaneval-1.5b.jsonl

Each problem is one episode of HumanEval-v0 (train and eval splits together, every problem once)
in the model's native action format (`Policy.action_format`), with the env's usual four actions.
Two scores come from the same greedy episodes:

- **single turn**: the first action was a submission (a ``submit`` call or a bare fenced block)
  and the problem's ``check`` passed it. This is the published protocol: one answer, its code
  block scored. Greedy decoding makes the first turn the same whatever follows, so no second
  pass is needed.
- **multi-turn**: the episode succeeded within ``max_steps`` actions, with the env's feedback in
  between: the docstring examples' results after a ``run``, the exact fix after a malformed
  action.

Rows (one per problem) are appended to ``--out`` after each chunk of ``--batch`` problems, so an
interrupted run keeps what it measured and ``--resume`` goes on from there. The markdown section
for bench/RESULTS.md is printed at the end.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections import Counter

from agentlab.metrics import wilson_interval
from bench.common import go_offline, jsonl_rows, table

# Qwen2.5-Coder technical report (Hui et al., arXiv 2409.12186v3), the instruct models' code-generation
# table: HumanEval and HumanEval+ pass@1, greedy, in percent.
PUBLISHED = {"qwen2.5-coder-0.5b": (61.6, 57.3), "qwen2.5-coder-1.5b": (70.7, 66.5)}


def problems() -> list:
    """All 164 problems once, by task id order (the env's splits hold a fifth out for evaluation)."""
    from agentlab.evaluate import split_tasks

    tasks = split_tasks("HumanEval", "train") + split_tasks("HumanEval", "eval")
    return sorted(tasks, key=lambda t: int(t.data["task_id"].split("/")[1]))


def row(traj, budget: int) -> dict:
    """One problem's episode, reduced to what the tables need."""
    first = traj.infos[0] if traj.infos else {}
    tool = first.get("tool") if first.get("valid", False) else "invalid"
    first_tokens = sum(1 for t in traj.turn_index if t == 0)
    return {"task_id": traj.task_id, "single_turn": bool(tool == "submit" and traj.success and traj.num_turns == 1),
            "multi_turn": bool(traj.success), "turns": traj.num_turns, "first_action": tool,
            "first_cut": first_tokens >= budget, "actions": traj.actions}


TOOL_LINE = re.compile(r"^(run|submit)\(.*$", re.MULTILINE)  # a call of the env's own tools written into the code


def tool_calls_in_code(rows: list[dict], timeout_s: float = 5.0) -> tuple[int, int]:
    """(failed first submissions whose code calls ``run(...)`` or ``submit(...)`` at top level, how many of
    those the problem's check passes once those lines are gone): how much of the gap is the model mixing
    the env's tools into its answer. Only the sandbox runs, no model."""
    from agentlab.envs import env_class
    from agentlab.envs.actions import parse_action
    from agentlab.envs.humaneval import passes_check
    from agentlab.envs.humaneval import problems as humaneval_problems

    env, by_id = env_class("HumanEval"), {t.id: t.data["task_id"] for t in problems()}
    found = fixed = 0
    for r in rows:
        if r["first_action"] != "submit" or r["single_turn"]:
            continue
        code = parse_action(r["actions"][0], env.tools, "tool_call", env.code_tools, env.bare_fence).arg
        if TOOL_LINE.search(code):
            found += 1
            fixed += passes_check(humaneval_problems()[by_id[r["task_id"]]], TOOL_LINE.sub("", code), timeout_s)[0]
    return found, fixed


def share(rows: list[dict], key: str) -> str:
    k, n = sum(r[key] for r in rows), len(rows)
    lo, hi = wilson_interval(k, n)
    return f"{k / n:.3f} [{lo:.2f}, {hi:.2f}] ({k}/{n})"


def report(model: str, rows: list[dict], budget: int, seconds: float) -> str:
    published = PUBLISHED.get(model)
    pub = f"{published[0] / 100:.3f} (HumanEval+ {published[1] / 100:.3f})" if published else "not published"
    body = table(["model", "problems", "tokens per turn", "single turn (published protocol)", "multi-turn (≤4 actions)",
                  "published, instruct table", "minutes"],
                 [[model, len(rows), budget, share(rows, "single_turn"), share(rows, "multi_turn"), pub,
                   round(seconds / 60)]])
    firsts = Counter(r["first_action"] for r in rows)
    cut = sum(r["first_cut"] for r in rows)
    found, fixed = tool_calls_in_code(rows)
    lines = [body, "", "First actions: " + ", ".join(f"{k} {v}" for k, v in firsts.most_common())
             + f"; first answers cut at the token budget: {cut}; mean turns "
             + f"{sum(r['turns'] for r in rows) / len(rows):.2f}. Failed first submissions whose code calls "
             + f"`run(...)` or `submit(...)` at top level: {found}, of which the check passes {fixed} "
             + "once those lines are removed (not counted above)."]
    return "\n".join(lines)


def main() -> None:
    from agentlab.evaluate import run_episodes, sampling
    from agentlab.policy import load_policy

    go_offline()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b", help="a packaged model name, folder or .gguf file")
    parser.add_argument("--tokens", type=int, default=640, help="new tokens per turn (the env's own budget is 480)")
    parser.add_argument("--batch", type=int, default=41, help="problems sampled together (164 = 4 x 41)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N problems (a quick look)")
    parser.add_argument("--out", default="runs/humaneval.jsonl")
    parser.add_argument("--resume", action="store_true", help="go on from the rows --out already holds")
    args = parser.parse_args()
    out, rows = jsonl_rows(args.out, args.resume)
    done = {r["task_id"] for r in rows}
    todo = [t for t in problems()[:args.limit] if t.id not in done]
    policy = load_policy(args.model) if todo else None
    settings = sampling(greedy=True, max_new_tokens=args.tokens)
    for start in range(0, len(todo), args.batch):
        chunk = todo[start:start + args.batch]
        t0 = time.time()
        trajs = run_episodes(policy, "HumanEval", chunk, settings, batch_size=len(chunk), seed=0, progress=True)
        each = (time.time() - t0) / len(chunk)
        new = [{"model": args.model, "tokens": args.tokens, "seconds": each, **row(t, args.tokens)} for t in trajs]
        with open(out, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in new)
        rows += new
        print(f"{len(rows)} problems: single turn {sum(r['single_turn'] for r in rows)}, "
              f"multi-turn {sum(r['multi_turn'] for r in rows)}", flush=True)
    print(report(args.model, rows, args.tokens, sum(r["seconds"] for r in rows)))

if __name__ == "__main__":
    main()
