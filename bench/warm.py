"""The SFT warm-up: where each env's warmed tiny policy starts RL, between the untrained model and the expert.

RL has something to learn only when the starting policy acts but is far from perfect. For
each env this section warms the ``ci`` profile's tiny policy on that env alone
(`warm_policy_path(envs=[env])` with the env's `WarmUp` plan, cached, so only the first run pays
for SFT) and scores, on the env's whole eval split (every difficulty level), with the
profile's per-turn token budget on the env (`Profile.turn_tokens`):

* the warmed policy, greedy (one episode per task) and sampled at temperature 1;
* the untrained tiny model, sampled: the "random policy" of a language model;
* the env's biased demonstrator alone (`run_expert(biased=True)`): the habit the careless share of
  the warm-up shows, i.e. what a policy that copied only that habit would score;
* the env's scripted expert: the ceiling of the env.

One more row scores the warm start of the GRPO demo (GuessNumber with a lazier mix,
`agentlab.demo.LAZY_SHARE`), which is not the env's plan and not counted in the verdict.

Every rate comes with its number of episodes and a 95% Wilson interval (`agentlab.evaluate`).
The warmed policy sits *clearly* between the two when its greedy interval lies wholly above
the untrained model's and wholly below the expert's.
"""

from __future__ import annotations

import json

from bench.common import by_level, env_ids, progress, rate, table

SAMPLES_PER_TASK = 2


def same_actions(result, other) -> float:
    """Share of tasks on which ``result`` took exactly the actions of ``other`` (one episode per task each)."""
    pairs = list(zip(result.trajectories, other.trajectories))
    assert all(a.task_id == b.task_id for a, b in pairs)
    return sum(a.actions == b.actions for a, b in pairs) / len(pairs)


def plan_text(plan: dict) -> str:
    """A warm-up plan as the policy's ``sft.json`` records it, in a few words."""
    levels = ",".join(str(d) for d in sorted(set(plan["levels"])))
    return f"{plan['episodes']} ep. (levels {levels}), {plan['steps']} steps, {plan['imperfect_share']:.0%} biased"


def run(quick: bool = False) -> str:
    """Warm (or reuse) one policy per env and the demo's, score the four policies, return the RESULTS.md section."""
    from agentlab.demo import DEMO_ENV, LAZY_SHARE
    from agentlab.evaluate import evaluate, run_expert, split_tasks
    from agentlab.policy import load_policy
    from agentlab.profiles import profile
    from agentlab.tiny import build_tiny
    from agentlab.warmup import warm_policy_path

    prof = profile("ci")
    untrained = load_policy(str(build_tiny(prof, verbose=False)))
    rows, verdicts = [], []
    # each env's own plan, then the demo's lazier start (reported, not counted in the verdict)
    starts = [(env_id, None) for env_id in env_ids(real_data=False)] + [(DEMO_ENV, LAZY_SHARE)]
    for env_id, share in progress(starts, "warm"):
        path = warm_policy_path(prof, envs=[env_id], progress=False, imperfect_share=share)
        report = json.loads((path / "sft.json").read_text())
        warm = load_policy(str(path))
        tasks = split_tasks(env_id)[:: 4 if quick else 1]  # quick: every 4th task, still every level
        budget = prof.turn_tokens(env_id)
        greedy = evaluate(warm, env_id, tasks=tasks, max_new_tokens=budget)
        sampled = evaluate(warm, env_id, tasks=tasks, episodes=SAMPLES_PER_TASK * len(tasks), greedy=False,
                           max_new_tokens=budget)
        random_ = evaluate(untrained, env_id, tasks=tasks, greedy=False, max_new_tokens=budget)
        expert = run_expert(env_id, tasks=tasks)
        biased = run_expert(env_id, tasks=tasks, biased=True)
        name = env_id.split("/")[-1] + ("" if share is None else " (demo start)")
        above = greedy.success_ci95[0] > random_.success_ci95[1]
        below = greedy.success_ci95[1] < expert.success_ci95[0]
        if share is None:
            verdicts.append((name, above, below))
        rows.append([name, plan_text(report["warm_up"][env_id]), f"{report['demo_seconds'] + report['sft_seconds']:.0f}",
                     f"{report['loss_last']:.2f}", budget, rate(greedy), by_level(greedy), rate(sampled),
                     rate(random_), rate(biased), rate(expert),
                     f"{same_actions(greedy, biased):.2f} / {same_actions(greedy, expert):.2f}",
                     f"{greedy.invalid_rate:.2f}",
                     ("yes" if above and below else "no") + ("" if share is None else " (not counted)")])
        print(f"  {name}: greedy {rate(greedy)} ({by_level(greedy)}), sampled {rate(sampled)}, "
              f"untrained {rate(random_)}, biased demonstrator {rate(biased)}, expert {rate(expert)}", flush=True)
    clear = [n for n, above, below in verdicts if above and below]
    not_above = [n for n, above, _ in verdicts if not above]
    not_below = [n for n, _, below in verdicts if not below]
    n = len(tasks)
    goal = "met" if len(clear) == len(verdicts) else "missed"
    body = [
        f"The `ci` profile's tiny policy warmed on each env alone, with the env's warm-up plan (`WarmUp` in the "
        f"env's file: distinct demonstrations, the levels they cycle through, SFT steps of {prof.sft_batch} "
        f"episodes, and the share acted by the env's deliberately imperfect demonstrator). Success on the eval "
        f"split ({n} tasks, every level) with a 95% interval: greedy once per task, sampled {SAMPLES_PER_TASK} "
        f"times per task, the untrained model sampled once per task, the env's biased demonstrator and its "
        f"scripted expert once per task. "
        f"Warm-up s is the build time recorded in the policy's `sft.json` (demonstrations + SFT, when it was "
        f"built); tokens is the per-turn budget on the env.",
        "",
        table(["env", "warm-up plan", "warm-up s", "SFT loss at the end", "tokens per turn", "warmed, greedy",
               "greedy by level 0 / 1 / 2 / 3", "warmed, sampled", "untrained model", "biased demonstrator", "expert",
               "greedy episode = biased / = expert", "invalid actions (greedy)", "clearly between"], rows),
        "",
        "*Greedy episode = biased / = expert*: the share of tasks on which the greedy episode took exactly the "
        "actions of the biased demonstrator, and of the expert. Where the first is near 1, SFT taught greedy "
        "decoding the careless habit and nothing else, so its success can be no better than that habit's "
        "(the biased demonstrator column).",
        "",
        f"*{DEMO_ENV.split('/')[-1]} (demo start)*: the warm-up the GRPO demo and the course's {DEMO_ENV.split('/')[-1]} "
        f"notebooks start from, {LAZY_SHARE:.0%} of its demonstrations lazy (`agentlab.demo.LAZY_SHARE`), so that "
        f"greedy decoding plays the lazy habit and RL has it to train away. It is not the env's plan and is not "
        f"counted below.",
        "",
        f"**Goal {goal}**: the warmed policy is clearly between the untrained model and the expert (its greedy "
        f"interval above the one's and below the other's) on {len(clear)} of {len(verdicts)} envs: "
        f"{', '.join(clear) or 'none'}.",
    ]
    if not_above:
        body.append(f"Not clearly above the untrained model: {', '.join(not_above)}.")
    if not_below:
        body.append(f"Not clearly below the expert: {', '.join(not_below)}.")
    return "\n".join(body)
