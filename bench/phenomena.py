"""Failure modes that emerge from training: the recipes of `agentlab.phenomena` over several seeds.

For each experiment (the shortcut, S18/S5; credit assignment, S19) every run starts from the
same warmed tiny policy and is measured greedily before and after on held-out tasks that no run
trains on. The table gives each number's mean over the seeds and its range: the notebooks'
assert margins (03 §6, 04 §7) are chosen inside these ranges. Every seed's numbers, for paired
comparisons (run A minus run B on the same seed), are also written to
``$TMPDIR/bench-phenomena.json``.

    python -m bench.run --only phenomena --merge
    python -m bench.phenomena --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import progress, table

SEEDS = (0, 1, 2)
HELD_OUT = 40  # held-out tasks per experiment, as in the notebooks
# (experiment, recipe, difficulty of the held-out tasks, the numbers that tell the story)
EXPERIMENTS = {
    "shortcut (S18, S5): WebSearch, sparse reward": (
        "shortcut_runs", 0, ["success_rate", "return_per_turn", "mean_turns", "action/read", "action/finish",
                             "invalid_rate"]),
    "credit assignment (S19): 6x6 mazes, `closer` sub-goal reward": (
        "credit_runs", 1, ["success_rate", "mean_return", "mean_turns", "step/optimal_move", "repeat_rate"]),
}


def measure(recipe: str, difficulty: int, seed: int, out: Path) -> dict:
    """{run: {"before": signature, "after": signature, "seconds": training time}} for one seed."""
    from agentlab import phenomena as P
    from agentlab.policy import load_policy
    from agentlab.profiles import profile
    from agentlab.train import train

    runs = getattr(P, recipe)(profile("ci"), seed=seed)
    first = next(iter(runs.values()))
    tasks = P.held_out_tasks(first.env_id, difficulty, HELD_OUT)
    start = load_policy(first.policy)
    found = {}
    for name, cfg in runs.items():
        cfg = dataclasses.replace(cfg, out_dir=str(out / cfg.name))
        t0 = time.time()
        result = train(cfg, progress=False)
        found[name] = {"before": P.signature(P.held_out(start, cfg, tasks)),
                       "after": P.signature(P.held_out(result.policy, cfg, tasks)),
                       "seconds": time.time() - t0}
    return found


def spread(values: list[float]) -> str:
    return f"{np.mean(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def section(title: str, keys: list[str], per_seed: list[dict]) -> str:
    rows = []
    for name in per_seed[0]:
        for when in ("before", "after"):
            cells = [spread([s[name][when].get(k, 0.0) for s in per_seed]) for k in keys]
            rows.append([name if when == "before" else "", when, *cells])
        rows[-1].append(f"{np.mean([s[name]['seconds'] for s in per_seed]):.0f} s")
        rows[-2].append("")
    return "\n".join([f"### {title}", "", table(["run", "", *keys, "training"], rows), ""])


def run(quick: bool = False, seeds: tuple[int, ...] = SEEDS) -> str:
    seeds = seeds[:1] if quick else seeds
    parts = [f"Each number: the mean over seeds {', '.join(map(str, seeds))} and, in brackets, the lowest and highest. "
             f"Greedy, on {HELD_OUT} held-out tasks (`agentlab.phenomena.held_out_tasks`), before and after each run "
             "of the `ci` profile's recipe in `agentlab/phenomena.py`; *training* is the wall time of one run "
             "(rollouts and updates, without the evaluation).", ""]
    raw = {}
    with tempfile.TemporaryDirectory(prefix="bench-phenomena-") as tmp:
        for title, (recipe, difficulty, keys) in progress(EXPERIMENTS.items(), "phenomena"):
            per_seed = [measure(recipe, difficulty, seed, Path(tmp) / f"{recipe}-{seed}") for seed in seeds]
            raw[recipe] = per_seed
            parts.append(section(title, keys, per_seed))
            print(parts[-1], flush=True)
    Path(tempfile.gettempdir(), "bench-phenomena.json").write_text(json.dumps(raw, indent=1))
    return "\n".join(parts)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    print(run(args.quick, tuple(args.seeds)))
