"""Training with reflection retries under the one reflection note, against the wording training used before.

    python -m bench.reflection_note [--updates 8] [--seeds 0 1]

Until December 2026 a training retry (``TrainConfig(reflection=True)``) opened with "A previous
attempt failed. Last feedback: <the env's last reply>", while `agentlab.evaluate.reflect` opened
with "Previous attempt failed: <failure_reason>". Both now use `agentlab.evaluate.reflection_note`.
This runs the demo's GuessNumber recipe with reflection switched on under each wording (same
seed, same warm-up) and prints, per wording: the retries made, the share of retries that
succeeded, and greedy held-out success before and after. Results go to bench/RESULTS.md by hand.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from unittest import mock

from agentlab import train as T
from agentlab.demo import demo_config
from agentlab.metrics import wilson_interval
from agentlab.profiles import profile


def old_note(failed) -> str:
    """The training retry's wording before it became `reflection_note` (kept here as the comparison)."""
    last = failed.messages[-1]
    reason = last["content"] if last["role"] == "user" else "no answer"
    return f"A previous attempt failed. Last feedback: {reason.strip()[:160]}\n"


def one_run(note, updates: int, seed: int) -> dict:
    out = tempfile.mkdtemp(prefix="reflection-note-")
    cfg = demo_config(profile("ci"), out, updates=updates, reflection=True, seed=seed, eval_every=updates)
    t0 = time.time()
    with mock.patch.object(T, "reflection_note", note):
        result = T.train(cfg, T.load_training_policy(cfg), progress=False)
    retries = sum(h["reflection_retries"] for h in result.history)
    fixed = sum(round(h["reflection_success"] * h["reflection_retries"]) for h in result.history if h["reflection_retries"])
    return {"retries": retries, "fixed": fixed, "before": result.evals[0], "after": result.evals[-1],
            "seconds": time.time() - t0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=8)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = parser.parse_args()
    print("| wording | seed | retries | retries that succeeded | held-out greedy success before → after | seconds |")
    print("|---|---|---|---|---|---|")
    for seed in args.seeds:
        for name, note in (("before (env's last reply)", old_note), ("reflection_note", T.reflection_note)):
            r = one_run(note, args.updates, seed)
            lo, hi = wilson_interval(r["fixed"], r["retries"]) if r["retries"] else (float("nan"),) * 2
            share = f"{r['fixed']}/{r['retries']} = {r['fixed'] / max(1, r['retries']):.2f} [{lo:.2f}, {hi:.2f}]"
            b, a = r["before"]["success_rate"], r["after"]["success_rate"]
            print(f"| {name} | {seed} | {r['retries']} | {share} | {b:.2f} → {a:.2f} | {r['seconds']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
