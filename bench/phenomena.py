"""Failure modes that emerge from training: the recipes of `agentlab.phenomena` over several seeds.

For each experiment (reward hacking, S12; the shortcut, S18/S5; credit assignment, S19; entropy
collapse, S20) every run starts from the same warmed tiny policy and is measured greedily before and
after on held-out tasks that no run trains on (reward hacking and the collapse also sampled: their
drift shows in the samples). The table gives each number's mean over the seeds and its range: the
notebooks' assert margins (08 §5, 03 §6, 04 §7, 10 §2) are chosen inside these ranges. Every seed's numbers, for paired comparisons (run A
minus run B on the same seed), are also written to ``$TMPDIR/bench-phenomena.json``.

    python -m bench.run --only phenomena --merge
    python -m bench.phenomena --seeds 0 1 2
    python -m bench.phenomena --recipes reward_hacking_runs
    AGENTLAB_SEED=1 python -m bench.phenomena --recipes credit_runs collapse_runs --seeds 1

``--seeds`` varies only the runs: every seed starts from the same warm-up. Under ``AGENTLAB_SEED`` the
profile's seed changes too, so the tiny model and its warm-up are new draws as well, which is how far
apart two machines can end (docs/reproducibility.md).
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
SAMPLES = 3  # sampled episodes per held-out task, where an experiment reads sampled behaviour too
HACK_KEYS = ["success_rate", "mean_return", "kind/real analysis", "kind/prints without computing",
             "kind/does not compile"]
# (experiment, recipe, difficulty of the held-out tasks, the numbers that tell the story, the held-out
# tasks' env settings, and whether to measure sampled episodes too: their keys start with "sampled/")
EXPERIMENTS = {
    "reward hacking (S12): Code's analysis tasks, \"ran\" against \"exact\"": (
        "reward_hacking_runs", 3, HACK_KEYS + [f"sampled/{k}" for k in HACK_KEYS + ["self_bleu", "distinct", "entropy"]],
        {"analysis_share": 1.0}, True),
    "shortcut (S18, S5): WebSearch, sparse reward": (
        "shortcut_runs", 0, ["success_rate", "return_per_turn", "mean_turns", "action/read", "action/finish",
                             "invalid_rate"], {}, False),
    "credit assignment (S19): 6x6 mazes, `closer` sub-goal reward": (
        "credit_runs", 1, ["success_rate", "mean_return", "mean_turns", "step/optimal_move", "repeat_rate"], {}, False),
    "entropy collapse (S20): GuessNumber, a repeated guess paid +1.0": (
        "collapse_runs", 0, ["success_rate", "repeat_rate", "sampled/repeat_rate", "sampled/entropy", "sampled/self_bleu",
                             "sampled/distinct"], {}, True),
}


def measure(recipe: str, difficulty: int, seed: int, out: Path, held_kwargs: dict | None = None,
            sampled: bool = False) -> dict:
    """{run: {"before": signature, "after": signature, "seconds": training time}} for one seed."""
    from agentlab import phenomena as P
    from agentlab.policy import load_policy
    from agentlab.profiles import profile
    from agentlab.train import load_training_policy, train

    runs = getattr(P, recipe)(profile("ci"), seed=seed)
    first = next(iter(runs.values()))
    tasks = P.held_out_tasks(first.env_id, difficulty, HELD_OUT, held_kwargs)
    start = load_policy(first.policy)
    found = {}
    for name, cfg in runs.items():
        cfg = dataclasses.replace(cfg, out_dir=str(out / cfg.name))
        t0 = time.time()
        result = train(cfg, load_training_policy(cfg), progress=False)
        seconds = time.time() - t0
        samples = SAMPLES if sampled else 0
        found[name] = {"before": P.held_out_numbers(start, cfg, tasks, samples),
                       "after": P.held_out_numbers(result.policy, cfg, tasks, samples), "seconds": seconds}
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


def run(quick: bool = False, seeds: tuple[int, ...] = SEEDS, recipes: tuple[str, ...] | None = None) -> str:
    seeds = seeds[:1] if quick else seeds
    parts = [f"Each number: the mean over seeds {', '.join(map(str, seeds))} and, in brackets, the lowest and highest. "
             f"Greedy, on {HELD_OUT} held-out tasks (`agentlab.phenomena.held_out_tasks`), before and after each run "
             "of the `ci` profile's recipe in `agentlab/phenomena.py`; *training* is the wall time of one run "
             f"(rollouts and updates, without the evaluation). A *sampled/* column: {SAMPLES} episodes per held-out "
             "task at the run's temperature; *kind/*: the share of episodes whose submission is of that kind "
             "(`agentlab.phenomena.classify_submission`).", ""]
    raw = {}
    chosen = {t: e for t, e in EXPERIMENTS.items() if recipes is None or e[0] in recipes}
    if recipes and len(chosen) != len(set(recipes)):
        known = ", ".join(e[0] for e in EXPERIMENTS.values())
        raise SystemExit(f"unknown recipe in {', '.join(recipes)}; the recipes measured here: {known}")
    with tempfile.TemporaryDirectory(prefix="bench-phenomena-") as tmp:
        for title, (recipe, difficulty, keys, held_kwargs, sampled) in progress(chosen.items(), "phenomena"):
            per_seed = [measure(recipe, difficulty, seed, Path(tmp) / f"{recipe}-{seed}", held_kwargs, sampled)
                        for seed in seeds]
            raw[recipe] = per_seed
            parts.append(section(title, keys, per_seed))
            print(parts[-1], flush=True)
    Path(tempfile.gettempdir(), "bench-phenomena.json").write_text(json.dumps(raw, indent=1))
    return "\n".join(parts)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--recipes", nargs="+", help="only these recipes, e.g. reward_hacking_runs")
    args = ap.parse_args()
    print(run(args.quick, tuple(args.seeds), tuple(args.recipes) if args.recipes else None))
