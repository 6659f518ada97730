"""Per-turn credit side by side: trajectory GRPO, GiGPO, the per-turn baseline and PPO with GAE, at
equal samples, on Maze and GuessNumber with the tiny policy (`agentlab.phenomena.step_credit_runs`).

Every run of a seed starts from the same warm-up and trains on the same tasks; each is measured
greedily on the same 40 held-out tasks, which no run trains on. The table pools the seeds: success
with its 95% Wilson interval over seeds × 40 episodes (the runs are independent, the tasks shared,
so the interval speaks for these 40 tasks; the warm-up's row is one seed's, as every seed's is the
same), the shortest-path share of maze moves (``optimal_move``) or the share of GuessNumber guesses
still possible (``consistent_guess``), and the turns of the episodes that succeeded (fewer: less
wasted). Each run's row is written as it ends, and ``--resume`` skips the rows already there.

    python -m bench.credit --envs maze guess --seeds 0 1 2 --out runs/credit.jsonl
    python -m bench.credit --resume --out runs/credit.jsonl      # continue, or only print the table
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import jsonl_rows, table

HELD_OUT = 40
CREDIT_CHECK = {"maze": "step/optimal_move", "guess": "step/consistent_guess"}


def held_out_row(env: str, seed: int, method: str, policy, cfg, seconds: float) -> dict:
    """``policy`` played greedily on the env's held-out tasks with ``cfg``'s settings, as one table row."""
    from agentlab import metrics as M
    from agentlab import phenomena as P

    env_id, difficulty = P.STEP_CREDIT[env]
    trajs = P.held_out(policy, cfg, P.held_out_tasks(env_id, difficulty, HELD_OUT))
    m = M.episode_metrics(trajs)
    won = [t.num_turns for t in trajs if t.success]
    return {"env": env, "seed": seed, "method": method, "successes": sum(t.success for t in trajs),
            "episodes": len(trajs), "credit": m.get(CREDIT_CHECK[env], float("nan")),
            "turns_when_won": float(np.mean(won)) if won else float("nan"), "invalid_rate": m["invalid_rate"],
            "mean_return": m["mean_return"], "seconds": round(seconds, 1)}


def measure(env: str, seed: int, method: str, cfg, work: Path) -> dict:
    """One run of ``step_credit_runs`` (``cfg``): trained, then played greedily on the held-out tasks."""
    from agentlab.train import load_training_policy, train

    cfg = dataclasses.replace(cfg, out_dir=str(work / cfg.name))
    t0 = time.time()
    result = train(cfg, load_training_policy(cfg), progress=False)
    return held_out_row(env, seed, method, result.policy, cfg, time.time() - t0)


def start_row(env: str, seed: int, cfg) -> dict:
    """The warm-up itself (``cfg.policy``) on the same held-out tasks."""
    from agentlab.policy import load_policy

    return held_out_row(env, seed, "start", load_policy(cfg.policy), cfg, 0.0)


def report(rows: list[dict]) -> str:
    """The pooled table, and each method's success minus GRPO's, seed by seed."""
    from agentlab.metrics import wilson_interval

    out = []
    for env in dict.fromkeys(r["env"] for r in rows):
        mine = [r for r in rows if r["env"] == env]
        seeds = sorted({r["seed"] for r in mine})
        lines = []
        for method in dict.fromkeys(r["method"] for r in mine):
            rs = [r for r in mine if r["method"] == method]
            if method == "start":  # the same warm-up on the same tasks, greedy: one seed's row is all of them
                rs = rs[:1]
            k, n = sum(r["successes"] for r in rs), sum(r["episodes"] for r in rs)
            lo, hi = wilson_interval(k, n)
            grpo = {r["seed"]: r["successes"] / r["episodes"] for r in mine if r["method"] == "GRPO"}
            diffs = [r["successes"] / r["episodes"] - grpo[r["seed"]] for r in rs if r["seed"] in grpo]
            lines.append([method, len(rs), f"{k / n:.3f} [{lo:.2f}, {hi:.2f}]",
                          " ".join(f"{d:+.3f}" for d in diffs) if method != "GRPO" else "",
                          f"{np.nanmean([r['credit'] for r in rs]):.3f}",
                          f"{np.nanmean([r['turns_when_won'] for r in rs]):.2f}",
                          f"{np.mean([r['invalid_rate'] for r in rs]):.3f}",
                          f"{np.mean([r['seconds'] for r in rs]):.0f}"])
        title = f"### {env} (seeds {', '.join(map(str, seeds))}; the same {HELD_OUT} held-out tasks each)"
        out.append(f"{title}\n\n" + table(
            ["run", "seeds", "held-out success [95% CI]", "minus GRPO, per seed", CREDIT_CHECK[env], "turns when won",
             "invalid", "train s"], lines))
    return "\n\n".join(out)


def main() -> None:
    from agentlab.phenomena import step_credit_runs
    from agentlab.profiles import profile

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", nargs="+", default=["maze", "guess"], choices=["maze", "guess"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--methods", nargs="+", default=None, help="default: every run of step_credit_runs")
    ap.add_argument("--out", default="runs/credit.jsonl")
    ap.add_argument("--resume", action="store_true", help="keep the rows in --out and run only the missing ones")
    args = ap.parse_args()
    out, rows = jsonl_rows(args.out, args.resume)
    done = {(r["env"], r["seed"], r["method"]) for r in rows}
    # every config (and so every warm-up) up front: the runs then start from the same folders throughout
    runs = {(env, seed): step_credit_runs(profile("ci"), seed=seed, env=env)
            for env in args.envs for seed in args.seeds}
    methods = args.methods or list(next(iter(runs.values())))
    work = Path(tempfile.mkdtemp(prefix="bench-credit-"))
    for env in args.envs:
        for seed in args.seeds:
            for method in ["start", *methods]:
                if (env, seed, method) in done:
                    continue
                cfgs = runs[env, seed]
                row = (start_row(env, seed, cfgs["GRPO"]) if method == "start"
                       else measure(env, seed, method, cfgs[method], work))
                print(json.dumps(row), flush=True)
                rows.append(row)
                with out.open("a") as f:
                    f.write(json.dumps(row) + "\n")
    print(report(rows))


if __name__ == "__main__":
    main()
