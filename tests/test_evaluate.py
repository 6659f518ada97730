"""Tests of agentlab.evaluate: counting by hand on made-up trajectories, the expert as the
ceiling, and the untrained tiny policy end to end (it fails nearly everything, which is fine:
these tests check the bookkeeping, not the policy)."""

from __future__ import annotations

import json
import random

import pytest

from agentlab.evaluate import (
    EvalResult,
    Rate,
    best_of_n,
    best_of_n_pick,
    evaluate,
    evaluate_tasks,
    failure_reason,
    first_try_rate,
    first_try_success,
    pass_at_k,
    pass_at_k_rates,
    run_episodes,
    reflect,
    robustness,
    run_expert,
    sampling,
    split_tasks,
    summarise,
    thinking_budget,
)
from agentlab.policy import load_policy
from agentlab.rollout import Trajectory

TOKENS = 4  # per turn: the untrained policy never ends a turn anyway; keep its episodes short


@pytest.fixture(scope="module")
def policy(tiny_path):
    return load_policy(str(tiny_path))


def traj(success: bool, reward: float = 0.0, task: str = "t", infos: list | None = None) -> Trajectory:
    infos = infos if infos is not None else [{"valid": True, "checks": {}}]
    return Trajectory(env_id="agentlab/GuessNumber-v0", task_id=task, success=success,
                      rewards=[reward / len(infos)] * len(infos), infos=infos, actions=["guess(1)"] * len(infos))


def random_groups(rng: random.Random, tasks: int, n: int) -> list[list[Trajectory]]:
    groups = []
    for i in range(tasks):
        p = rng.random()
        groups.append([traj(rng.random() < p, reward=rng.random(), task=f"t{i}") for _ in range(n)])
    return groups


# ---------------------------------------------------------------------------- counting (no model)

def test_rate_interval_contains_the_rate_and_narrows_with_n():
    for k, n in [(0, 5), (3, 5), (5, 5), (31, 80), (2.5, 4)]:
        r = Rate(k, n)
        lo, hi = r.ci95
        assert lo <= r.rate <= hi
        assert r.to_dict() == {"rate": k / n, "n": n, "ci95": [lo, hi]}
    assert Rate(40, 80).ci95[1] - Rate(40, 80).ci95[0] < Rate(5, 10).ci95[1] - Rate(5, 10).ci95[0]


def test_summarise_rates_step_checks_over_the_steps_that_carry_them():
    a = traj(True, 1.0, "a", [{"valid": True, "checks": {"hit": True}}, {"valid": False, "checks": {}},
                             {"valid": True, "checks": {"hit": False, "read": True}}])
    b = traj(False, 0.0, "b", [{"valid": True, "checks": {"hit": True}}])
    r = summarise("GuessNumber", "eval", [a, b])
    assert (r.episodes, r.tasks, r.actions) == (2, 2, 4)
    assert r.success_rate == 0.5 and r.mean_turns == 2.0 and r.mean_return == 0.5
    assert r.invalid_rate == 0.25
    assert r.step_rates == {"hit": 2 / 3, "read": 1.0}  # not 2/4: "hit" is absent on step 2
    assert r.step_counts == {"hit": 3, "read": 1}
    assert r.env == "agentlab/GuessNumber-v0"


def test_greedy_repeats_of_a_task_are_not_new_evidence():
    trajs = [traj(i % 2 == 0, task=f"t{i % 4}") for i in range(40)]  # 4 tasks, each seen 10 times
    greedy, sampled = summarise("GuessNumber", "eval", trajs, greedy=True), summarise("GuessNumber", "eval", trajs, greedy=False)
    assert greedy.success_rate == sampled.success_rate == 0.5
    width = lambda r: r.success_ci95[1] - r.success_ci95[0]  # noqa: E731
    assert width(greedy) > width(sampled)  # the greedy interval is over 4 tasks, not 40 episodes
    assert greedy.success_ci95 == pytest.approx(Rate(2, 4).ci95)


def test_pass_at_k_is_monotone_and_matches_its_ends():
    rng = random.Random(0)
    for _ in range(20):
        groups = random_groups(rng, tasks=rng.randint(1, 6), n=8)
        rates = pass_at_k_rates(groups, range(1, 9))
        values = [rates[f"pass@{k}"].rate for k in range(1, 9)]
        assert all(x <= y + 1e-12 for x, y in zip(values, values[1:]))
        mean_success = sum(t.success for g in groups for t in g) / (8 * len(groups))
        assert values[0] == pytest.approx(mean_success)
        assert values[-1] == pytest.approx(sum(any(t.success for t in g) for g in groups) / len(groups))
    with pytest.raises(ValueError, match="pass@9"):
        pass_at_k_rates(groups, [9])


def test_best_of_n_is_at_least_first_try_on_the_same_samples():
    rng = random.Random(1)
    for _ in range(20):
        groups = random_groups(rng, tasks=5, n=4)
        for g in groups:  # the env's reward knows the answer: successes score higher
            for t in g:
                t.rewards = [t.rewards[0] + (1.0 if t.success else 0.0)]
        best = sum(best_of_n_pick(g).success for g in groups)
        assert best >= first_try_rate(groups).successes
        assert best == sum(any(t.success for t in g) for g in groups)  # an oracle verifier reaches pass@n
    group = [traj(False, 0.5), traj(True, 0.1), traj(True, 0.9)]
    assert best_of_n_pick(group) is group[2]
    assert best_of_n_pick(group, verifier=lambda t: -t.total_reward) is group[1]
    assert best_of_n_pick([traj(False, 1.0), traj(True, 1.0)]).success is False  # ties: the first


def test_failure_reason_says_how_the_episode_ended():
    t = traj(False, 0.0, infos=[{"valid": True}, {"valid": True}])
    t.truncated = True
    t.messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"},
                  {"role": "assistant", "content": "guess(1)"}, {"role": "user", "content": "higher"}]
    reason = failure_reason(t)
    assert "ran out of turns after 2" in reason and "guess(1)" in reason and "higher" in reason
    t.infos[-1]["valid"] = False
    assert failure_reason(t).startswith("your last action was invalid")


# ---------------------------------------------------------------------------- the expert (ceiling)

@pytest.mark.parametrize("env_id", ["GuessNumber", "Maze", "Math", "Dialog", "WebSearch"])
def test_expert_solves_every_eval_task(env_id):
    r = run_expert(env_id, "eval")
    assert r.episodes == len(split_tasks(env_id, "eval")) == r.tasks
    assert r.success_rate == 1.0 and r.success_ci95[1] == 1.0 and r.success_ci95[0] > 0.9
    assert r.invalid_rate == 0.0
    assert all(0.0 <= rate <= 1.0 for rate in r.step_rates.values())
    assert set(r.step_counts) == set(r.step_rates) and all(c <= r.actions for c in r.step_counts.values())
    json.dumps(r.to_dict())


def test_biased_demonstrator_plays_the_careless_habit():
    # GuessNumber's careless demonstrator guesses the lowest number still possible: 1, 2, 3, ...
    r = run_expert("GuessNumber", "eval", biased=True)
    targets = {task.id: task.answer for task in split_tasks("GuessNumber", "eval")}
    for t in [t for t in r.trajectories if t.difficulty == 0]:  # the range is 1..16, five guesses
        target = targets[t.task_id]
        assert t.actions == [f"guess({n})" for n in range(1, min(target, 5) + 1)], (t.task_id, t.actions)
        assert t.success == (target <= 5) and t.truncated == (target > 5)
    assert r.invalid_rate == 0.0 and r.success_rate < run_expert("GuessNumber", "eval").success_rate


def test_expert_episodes_cycle_through_the_tasks():
    r = run_expert("GuessNumber", "paraphrase", episodes=45)
    assert (r.episodes, r.tasks) == (45, 40)
    assert r.trajectories[40].task_id == r.trajectories[0].task_id


# ---------------------------------------------------------------------------- the tiny policy, end to end

def test_evaluate_returns_rates_with_intervals(policy):
    r = evaluate(policy, "GuessNumber", episodes=6, max_new_tokens=TOKENS)
    assert isinstance(r, EvalResult) and r.episodes == len(r.trajectories) == 6
    lo, hi = r.success_ci95
    assert lo <= r.success_rate <= hi
    assert 0.0 <= r.invalid_rate <= 1.0 and r.mean_turns >= 1
    d = r.to_dict()
    assert "trajectories" not in d and d["success_ci95"] == [lo, hi]
    json.dumps(d)
    eval_ids = [t.id for t in split_tasks("GuessNumber", "eval")[:6]]
    assert [t.task_id for t in r.trajectories] == eval_ids


def test_evaluate_tasks_takes_the_tasks_and_settings_it_is_given(policy):
    import torch

    tasks = split_tasks("GuessNumber", "eval")[:3]
    settings = sampling(False, max_new_tokens=TOKENS)
    r = evaluate_tasks(policy, "GuessNumber", tasks, settings, seed=5)
    assert [t.task_id for t in r.trajectories] == [t.id for t in tasks] and r.greedy is False
    same = evaluate(policy, "GuessNumber", tasks=tasks, greedy=False, max_new_tokens=TOKENS, seed=5)
    assert [t.token_ids for t in same.trajectories] == [t.token_ids for t in r.trajectories]
    # seed=None samples from the caller's generator: the same generator state gives the same episodes
    a, b = (run_episodes(policy, "GuessNumber", tasks, settings, seed=None, generator=torch.Generator().manual_seed(1))
            for _ in range(2))
    assert [t.token_ids for t in a] == [t.token_ids for t in b]


def test_evaluate_shows_episodes_and_successes_only_when_asked(policy, capsys):
    tasks = split_tasks("GuessNumber", "eval")[:2]
    evaluate(policy, "GuessNumber", tasks=tasks, max_new_tokens=TOKENS)
    assert capsys.readouterr().err == ""  # notebooks and tests print nothing new
    r = evaluate(policy, "GuessNumber", tasks=tasks, max_new_tokens=TOKENS, progress=True)
    bar = capsys.readouterr().err
    wins = sum(t.success for t in r.trajectories)
    assert "episodes GuessNumber" in bar and "2/2" in bar and f"success {wins}/2" in bar, bar


def test_sampled_functions_report_consistent_rates(policy):
    common = dict(num_tasks=2, max_new_tokens=TOKENS)
    pk = pass_at_k(policy, "GuessNumber", 4, **common)
    assert list(pk.rates) == ["pass@1", "pass@2", "pass@4"] and len(pk.trajectories) == 8
    values = [r.rate for r in pk.rates.values()]
    assert values == sorted(values)
    bon = best_of_n(policy, "GuessNumber", 3, **common)
    assert set(bon.rates) == {"greedy", "first_try", "best_of_3", "pass@3"}
    assert bon.rates["first_try"].rate <= bon.rates["best_of_3"].rate <= bon.rates["pass@3"].rate
    assert bon.notes["verifier"] == "reward_verifier" and len(bon.trajectories) == 2
    ft = first_try_success(policy, "GuessNumber", 2, **common)
    assert set(ft.rates) == {"first_try", "pass@1", "pass@2"} and ft.tasks == 2
    assert "pass@2" in str(ft) and json.dumps(ft.to_dict())


def test_reflection_reports_both_numbers_and_never_loses_a_solved_task(policy):
    r = reflect(policy, "GuessNumber", num_tasks=4, max_new_tokens=TOKENS)
    first, after = r.rates["first_try"], r.rates["after_reflection"]
    assert first.n == after.n == 4
    assert after.successes >= first.successes
    assert after.successes - first.successes == r.notes["fixed"] == len(r.trajectories)
    assert r.notes["retried"] == 4 - first.successes
    assert all(t.success for t in r.trajectories)


def test_retries_see_their_own_reason(policy):
    tasks = split_tasks("GuessNumber", "eval")[:2]
    trajs = run_episodes(policy, "GuessNumber", tasks, sampling(True, max_new_tokens=TOKENS),
                 prefixes=["Previous attempt failed: A.\n", "Previous attempt failed: B.\n"])
    assert [t.messages[1]["content"].splitlines()[0] for t in trajs] == [
        "Previous attempt failed: A.", "Previous attempt failed: B."]
    assert trajs[0].messages[1]["content"].endswith(tasks[0].query)


def test_thinking_budget_too_short_to_finish_a_turn_is_all_invalid(policy):
    out = thinking_budget(policy, "GuessNumber", budgets=(1, TOKENS), episodes=2)
    assert list(out) == [1, TOKENS]
    assert out[1].invalid_rate == 1.0 and out[1].success_rate == 0.0  # no room for an action and its end


def test_robustness_compares_the_same_tasks_and_renames_sql(policy):
    out = robustness(policy, "SQL", num_tasks=2, max_new_tokens=TOKENS)
    assert list(out) == ["eval", "paraphrase", "renamed"]
    ids = {name: [t.task_id for t in r.trajectories] for name, r in out.items()}
    assert ids["paraphrase"] == [i + "-para" for i in ids["eval"]] and ids["renamed"] == ids["eval"]
    assert "renamed" not in robustness(policy, "GuessNumber", num_tasks=1, max_new_tokens=TOKENS)


def test_training_claims_say_what_failed_what_was_measured_and_where_the_spread_is():
    import pandas as pd

    from agentlab.evaluate import SPREAD_DOC, training_claims

    after = pd.Series({"success_rate": 0.4, "mean_return": 0.123456})
    with training_claims("04 §7", after=after):  # a claim that holds passes through untouched
        assert after["success_rate"] > 0.3
    with pytest.raises(AssertionError) as failed:
        with training_claims("04 §7", after=after, start=0.375):
            assert after["success_rate"] >= 0.375 + 0.1, "on unseen mazes"
    message = str(failed.value)
    assert message.startswith("04 §7: expected `assert after[\"success_rate\"] >= 0.375 + 0.1")
    assert "(on unseen mazes" in message and "mean_return: 0.123" in message and "start = 0.375" in message
    with pytest.raises(AssertionError, match=r"curve = \[0.123, 2\]"):  # lists of numbers are rounded too
        with training_claims("10 §2", curve=[0.123456, 2]):
            assert False
    assert SPREAD_DOC in message and "AGENTLAB_SEED" in message
    with pytest.raises(ValueError):  # only failed asserts are reworded
        with training_claims("04 §7"):
            raise ValueError("not a claim")


def test_a_rate_rises_by_one_task_of_forty_despite_float_sums():
    from agentlab.evaluate import rose

    assert 16 / 40 + 0.025 > 17 / 40  # why the helper exists: the plain comparison misses one task of 40
    assert rose(17 / 40, 16 / 40, by=0.025) and rose(18 / 40, 16 / 40, by=0.025)
    assert not rose(16 / 40, 16 / 40, by=0.025) and not rose(0.4249, 0.4, by=0.025) and not rose(0.3, 0.4, by=-0.05)
    assert rose(29 / 40, 11 / 40, by=0.45) and not rose(28 / 40, 11 / 40, by=0.45)
