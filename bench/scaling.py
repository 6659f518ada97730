"""How the cost of a GRPO update grows with turns per episode and with group size, agentlab vs the peer.

One update is: sample ``tasks x group`` episodes, then one `agentlab.algos.grpo.update` (a
reference pass, a forward and a backward pass over every episode, one optimiser step).

* agentlab: `rollout` (each env's KV cache kept across turns), then the update, with a
  group's shared prompt read once where the model's profile does so (`Policy.share_prompts`:
  on for SmolLM2, as in `real-cpu`; off for the tiny policy, as in `ci`).
* the peer: batched `generate` that re-renders and re-encodes every live chat each turn
  (`bench.rollout.generate_rollout`), then the same update without prompt sharing. There is no
  multi-turn update in TRL to time instead, so the update is agentlab's code on episodes of
  the same lengths: the two sides differ in how they sample and in reading a shared prompt once.

Both sides sample exactly 24 tokens per turn (end-of-turn out of reach), so every episode
runs to its step limit and every cell does equal work; with all actions invalid every reward
is equal, and the update is told not to skip such groups so that it does its backward pass.
Writes `bench/scaling.png` beside RESULTS.md (seconds per update against turns and against
group size, one line per side and model).
"""

from __future__ import annotations

from pathlib import Path

import torch

from bench.common import (MODELS, SEED, SMOLLM2, bench_policy, progress, seconds, sharing_prompts, table,
                          without_end_of_turn)

PLOT = Path(__file__).resolve().parent / "scaling.png"
LORA_R, LORA_ALPHA, LR = 8, 16, 1e-4


def plan(quick: bool) -> dict[str, dict]:
    """Per model: tasks per update, the turns to sweep (at ``group``), and the group sizes to sweep (at ``at_turns``).

    SmolLM2 stops at 20 turns (10 with --quick): a 50-turn cell would take ~10 minutes on two cores, the peer
    re-reading the whole history every turn."""
    tiny = {"tasks": 2, "group": 8, "turns": [5, 10, 20, 50], "groups": [4, 8, 16], "at_turns": 10}
    if quick:
        return {"tiny": tiny, SMOLLM2: {"tasks": 1, "group": 4, "turns": [5, 10], "groups": [4, 8], "at_turns": 5}}
    return {"tiny": tiny, SMOLLM2: {"tasks": 1, "group": 4, "turns": [5, 10, 20], "groups": [4, 8, 16], "at_turns": 5}}


def timed_update(policy, trajs: list, group: int, share: bool) -> float:
    """Seconds of one `grpo.update` on ``trajs`` with `Policy.share_prompts` set to ``share``."""
    from agentlab.algos import grpo

    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=LR, weight_decay=0.0)
    settings = grpo.GRPOSettings(epochs=1, minibatch_size=len(trajs), drop_zero_variance=False)
    rewards = torch.tensor([t.total_reward for t in trajs])
    with sharing_prompts(policy, share):
        return seconds(grpo.update, policy, optimizer, trajs, rewards, group, settings,
                       generator=torch.Generator().manual_seed(SEED))[0]


def one_cell(policy, tasks: int, group: int, turns: int, share: bool) -> dict:
    """Both sides on ``tasks x group`` episodes of ``turns`` turns: seconds to sample and to update.

    The peer's update runs on agentlab's episodes: the same lengths, so the same work as on its own."""
    from bench.rollout import agentlab_rollout, generate_rollout

    n = tasks * group
    with sharing_prompts(policy, share):
        ours_s, ours = seconds(agentlab_rollout, policy, n, turns, SEED, group)
    trajs = ours["trajs"]
    out = {"agentlab": {"sample_s": ours_s, "update_s": timed_update(policy, trajs, group, share)},
           "peer": {"sample_s": seconds(generate_rollout, policy, n, turns, SEED)[0],
                    "update_s": timed_update(policy, trajs, group, False)}}
    for side in out.values():
        side["total_s"] = side["sample_s"] + side["update_s"]
    out["agentlab"]["tokens"] = sum(len(t.token_ids) for t in trajs) / n
    out["actions"] = ours["tokens"]  # action tokens sampled, the same on both sides
    return out


def measure(quick: bool) -> list[dict]:
    """Every cell of the plan, both sides, one model loaded at a time."""
    from agentlab.policy import LoraSettings

    rows = []
    for model, p in plan(quick).items():
        torch.manual_seed(SEED)
        policy = bench_policy(model, lora=LoraSettings(r=LORA_R, alpha=LORA_ALPHA))
        share = model != "tiny"
        cells = [("turns", p["group"], t) for t in p["turns"]] + [("group", g, p["at_turns"]) for g in p["groups"]]
        with without_end_of_turn(policy.model, policy.eot_id):
            one_cell(policy, 1, 2, 2, share)  # warm-up: first calls allocate and pick kernels
            for sweep, group, turns in progress(cells, f"scaling: {model}"):
                row = {"model": model, "sweep": sweep, "tasks": p["tasks"], "group": group, "turns": turns,
                       **one_cell(policy, p["tasks"], group, turns, share)}
                row["ratio"] = row["peer"]["total_s"] / row["agentlab"]["total_s"]
                print(f"  {model} group {group} x {turns} turns: agentlab {row['agentlab']['total_s']:.1f} s, "
                      f"peer {row['peer']['total_s']:.1f} s ({row['ratio']:.2f}x)", flush=True)
                rows.append(row)
        del policy
    return rows


def plot(rows: list[dict], path: Path = PLOT) -> Path:
    """Seconds per update against turns (left) and group size (right), log-log, one line per model and side."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullLocator

    fig = Figure(figsize=(10, 4))
    for ax, sweep, key, label in zip(fig.subplots(1, 2), ("turns", "group"), ("turns", "group"),
                                     ("turns per episode", "group size (episodes per task)")):
        for model in dict.fromkeys(r["model"] for r in rows):
            cells = [r for r in rows if r["model"] == model and r["sweep"] == sweep]
            for side, style in (("agentlab", "-o"), ("peer", "--s")):
                ax.plot([r[key] for r in cells], [r[side]["total_s"] for r in cells], style,
                        label=f"{MODELS[model]}: {'agentlab' if side == 'agentlab' else 'generate + update'}")
        ax.set(xscale="log", yscale="log", xlabel=label, ylabel="seconds per GRPO update")
        sizes = sorted({r[key] for r in rows if r["sweep"] == sweep})
        ax.set_xticks(sizes, labels=[str(x) for x in sizes])
        ax.xaxis.set_minor_locator(NullLocator())  # only the measured sizes are labelled
        ax.grid(alpha=0.3)
    fig.axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def run(quick: bool = False) -> str:
    """Measure, plot, and return the RESULTS.md section."""
    rows = measure(quick)
    path = plot(rows)
    p = plan(quick)
    return "\n".join([
        "Seconds per GRPO update (sampling + `grpo.update`, one optimiser step over every episode; LoRA r "
        f"{LORA_R}, fp32, 24 tokens per turn, GuessNumber run to its step limit), one run per cell. Turns swept "
        f"at the group size shown; group size swept at {p['tiny']['at_turns']} turns (tiny) and "
        f"{p[SMOLLM2]['at_turns']} turns (SmolLM2). *Peer*: batched `generate` re-reading the chat + the same "
        "update without prompt sharing.",
        "",
        table(["model", "tasks x group", "turns", "tokens per episode", "sampling tokens/s (agentlab / peer)",
               "agentlab s (sample + update)", "peer s (sample + update)", "peer / agentlab"],
              [[MODELS[r["model"]], f"{r['tasks']} x {r['group']}", r["turns"], r["agentlab"]["tokens"],
                f"{r['actions'] / r['agentlab']['sample_s']:.0f} / {r['actions'] / r['peer']['sample_s']:.0f}",
                f"{r['agentlab']['total_s']:.1f} ({r['agentlab']['sample_s']:.1f} + {r['agentlab']['update_s']:.1f})",
                f"{r['peer']['total_s']:.1f} ({r['peer']['sample_s']:.1f} + {r['peer']['update_s']:.1f})",
                f"**{r['ratio']:.2f}x**"] for r in rows]),
        "",
        f"![seconds per update against turns and group size]({path.name})",
        "",
        "Read along the turns: the peer's sampling re-reads the whole history every turn, so its cost grows "
        "with the square of the turns while agentlab's grows with the tokens; the update costs both sides the "
        "same apart from the shared prompt. Along the group size, more rows per decoding step are nearly "
        "free on a CPU that is bound by memory bandwidth (`bench/NOTES.md`), and a shared prompt is read once "
        "per group instead of once per episode.",
    ])
