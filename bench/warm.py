"""The SFT warm-up: where each env's warmed tiny policy starts RL, between the untrained model and the expert.

RL has something to learn only when the starting policy acts but is far from perfect. For
each env this section warms the ``ci`` profile's tiny policy on that env alone
(`warm_policy_path(envs=[env])`, cached, so only the first run pays for SFT) and scores, on the
env's eval split (every difficulty level):

* the warmed policy, greedy (one episode per task) and sampled at temperature 1;
* the untrained tiny model, sampled — the "random policy" of a language model;
* the env's scripted expert — the ceiling of the env.

Every rate comes with its number of episodes and a 95% Wilson interval (`agentlab.evaluate`).
"""

from __future__ import annotations

import time

from bench.common import progress, table

GREEDY_EPISODES = 32
SAMPLED_EPISODES = 64


def rate(result) -> str:
    lo, hi = result.success_ci95
    return f"{result.success_rate:.2f} [{lo:.2f}, {hi:.2f}]"


def run(quick: bool = False) -> str:
    """Warm (or reuse) one policy per env, score the four policies, and return the RESULTS.md section."""
    from agentlab.envs import ENV_IDS
    from agentlab.evaluate import evaluate, run_expert
    from agentlab.models import build_tiny, load_policy, profile
    from agentlab.sft import warm_policy_path

    prof = profile("ci")
    greedy_n, sampled_n = (8, 16) if quick else (GREEDY_EPISODES, SAMPLED_EPISODES)
    untrained = load_policy(str(build_tiny(prof, verbose=False)))
    rows, verdicts = [], []
    for env_id in progress(ENV_IDS, "warm"):
        start = time.perf_counter()
        warm = load_policy(str(warm_policy_path(prof, envs=[env_id], progress=False)))
        warm_s = time.perf_counter() - start
        greedy = evaluate(warm, env_id, episodes=greedy_n)
        sampled = evaluate(warm, env_id, episodes=sampled_n, greedy=False)
        random_ = evaluate(untrained, env_id, episodes=greedy_n, greedy=False)
        expert = run_expert(env_id, episodes=greedy_n)
        name = env_id.split("/")[-1]
        above = greedy.success_ci95[0] > random_.success_ci95[1] or sampled.success_ci95[0] > random_.success_ci95[1]
        below = greedy.success_ci95[1] < expert.success_ci95[0]
        verdicts.append((name, above, below))
        rows.append([name, rate(greedy), rate(sampled), rate(random_), rate(expert), f"{greedy.invalid_rate:.2f}",
                     f"{greedy.mean_turns:.1f}", f"{warm_s:.0f}"])
        print(f"  {name}: greedy {rate(greedy)}, sampled {rate(sampled)}, untrained {rate(random_)}, "
              f"expert {rate(expert)}", flush=True)
    clear = [n for n, above, below in verdicts if above and below]
    not_above = [n for n, above, _ in verdicts if not above]
    not_below = [n for n, _, below in verdicts if not below]
    body = [
        f"The `ci` profile's tiny policy warmed on each env alone ({prof.sft_steps} SFT steps of {prof.sft_batch} "
        f"episodes, {prof.imperfect_share:.0%} of them from the env's deliberately imperfect demonstrator). "
        f"Success on the eval split with a 95% interval: greedy over {greedy_n} tasks, sampled over {sampled_n} "
        f"episodes, the untrained model sampled over {greedy_n}, the scripted expert over {greedy_n}.",
        "",
        table(["env", "warmed, greedy", "warmed, sampled", "untrained model", "expert", "invalid actions (greedy)",
               "turns (greedy)", "warm-up s (0 = cached)"], rows),
        "",
        f"Clearly between the two (an interval of the warmed policy above the untrained model's, and its greedy "
        f"interval below the expert's): {', '.join(clear) or 'none'}.",
    ]
    if not_above:
        body.append(f"Not clearly above the untrained model: {', '.join(not_above)}. With {greedy_n} episodes the "
                    "untrained model's interval reaches 0.11, so a rate must be about 0.25 or more to clear it. "
                    "Where the greedy invalid-action rate is high the warm-up did not teach the action grammar "
                    "and its arguments; where it is 0 the actions are valid but do not solve the task.")
    if not_below:
        body.append(f"Not clearly below the expert: {', '.join(not_below)}.")
    return "\n".join(body)
