"""The live training dashboard's cost: what share of the training loop's time it takes.

A `TrainingDashboard` is attached as a callback to a short GRPO run on the `ci` profile
(GuessNumber, the warmed tiny policy with a LoRA adapter), exactly as a notebook attaches it.
Headless there is no browser to paint, so what is timed is all the work the dashboard does in
the loop: storing the metrics, checking the alarms and rebuilding the panels (matplotlib
figures rendered to PNG). A wrapper times every call; the share is that time over the loop's
wall time. The dashboard redraws at most every ``min_interval`` seconds (0.5 s by default);
the run also times ``min_interval=0`` (a redraw after every update), the worst case.
"""

from __future__ import annotations

import tempfile
import time

from bench.common import median, repeats, table

GOAL = 0.10  # the dashboard may take at most 10% of the loop's time


class Timed:
    """Wraps a callback and adds up the seconds spent inside it."""

    def __init__(self, callback):
        self.callback, self.seconds, self.calls = callback, 0.0, 0

    def __call__(self, *args, **kwargs):
        t = time.perf_counter()
        self.callback(*args, **kwargs)
        self.seconds += time.perf_counter() - t
        self.calls += 1

    def close(self):
        t = time.perf_counter()
        if hasattr(self.callback, "close"):
            self.callback.close()
        self.seconds += time.perf_counter() - t


def one_run(min_interval: float, updates: int) -> dict:
    from agentlab.policy import LoraSettings, load_policy
    from agentlab.profiles import profile
    from agentlab.train import TrainConfig, train
    from agentlab.warmup import profile_policy_source
    from agentlab.widgets import TrainingDashboard

    policy = load_policy(profile_policy_source(profile("ci"), envs=["agentlab/GuessNumber-v0"]),
                         lora=LoraSettings(r=8, alpha=16))
    dash = Timed(TrainingDashboard(min_interval=min_interval))
    with tempfile.TemporaryDirectory() as out:
        cfg = TrainConfig(profile="ci", updates=updates, eval_every=updates, checkpoint_every=updates,
                          name="bench-dashboard", out_dir=out)
        t = time.perf_counter()
        train(cfg, callbacks=[dash], progress=False, policy=policy)
        wall = time.perf_counter() - t
    return {"wall": wall, "dashboard": dash.seconds, "draws": dash.callback.draws, "calls": dash.calls}


def run(quick: bool) -> str:
    updates = 3 if quick else 8
    rows, shares = [], {}
    for interval in (0.5, 0.0):
        runs = [one_run(interval, updates) for _ in range(repeats(quick))]
        share = median([r["dashboard"] / r["wall"] for r in runs])
        shares[interval] = share
        r = runs[0]
        rows.append([f"{interval:g} s", updates, f"{median([x['wall'] for x in runs]):.1f}",
                     f"{median([x['dashboard'] for x in runs]):.2f}", r["draws"], f"{100 * share:.1f}%"])
    out = [table(["min_interval", "updates", "loop s", "dashboard s", "redraws", "share of loop"], rows), ""]
    met = "met" if shares[0.5] < GOAL else f"missed by {100 * (shares[0.5] - GOAL):.1f} points"
    out.append(f"Goal: the dashboard takes under {100 * GOAL:.0f}% of the loop. Default interval: "
               f"**{100 * shares[0.5]:.1f}%** (goal {met}); redrawing after every update: {100 * shares[0.0]:.1f}%.")
    return "\n".join(out)
