"""Math-v0: the safe evaluator, step checking and the three-layer reward split."""

from fractions import Fraction

import numpy as np
import pytest

import agentlab
from agentlab.envs.base import ActionError
from agentlab.envs.math import MAX_MAGNITUDE, MathEnv, evaluate
from agentlab.tasks import Task, load_tasks


def make_task(expr="7 + 4 * 5", steps=("4 * 5 = 20", "7 + 20 = 27"), answer=27):
    keys = [int(s.split("=")[1]) for s in steps]
    return Task(id="t", type="math", query=f"Compute {expr}.", answer=answer, tools=["step", "answer"],
                max_steps=len(steps) + 3, data={"kind": "expr", "text": expr, "steps": list(steps), "keys": keys,
                                                "lazy_steps": ["7 + 4 = 11", "11 * 5 = 55"], "lazy_answer": 55})


def play(env, actions):
    out = []
    for a in actions:
        out.append(env.step(a))
        if out[-1][2] or out[-1][3]:
            break
    return out


# ---------------------------------------------------------------------------- the evaluator

@pytest.mark.parametrize("text,value", [
    ("3 * 4", 12), ("7 + 4 * 5", 27), ("(7 + 4) * 5", 55), ("-3 + 10", 7), ("- (2 - 5)", 3), ("7 // 2", 3),
    ("-7 // 2", -4), ("-3 % 5", 2), ("10 / 4", Fraction(5, 2)), ("0.1 + 0.2", Fraction(3, 10)), ("+5", 5),
    ("1_000 * 2", 2000),
])
def test_evaluator_is_exact(text, value):
    assert evaluate(text) == value


@pytest.mark.parametrize("text", [
    "__import__('os').system('ls')", "open('/etc/passwd')", "x + 1", "(1).__class__", "2 ** 10", "9 ** 9 ** 9",
    "pow(2, 3)", "[1, 2]", "lambda: 1", "1 if 1 else 2", "3 < 4", "1 & 3", "2 << 40", "True + 1", "3j * 2",
    "'a' * 3", "1 / 0", "5 % 0", "5 // 0", "1e999", "1e300 * 10", "nan", "10 ** 13", f"{MAX_MAGNITUDE + 1}",
    f"{MAX_MAGNITUDE} * 2", "999999 * 999999 * 999999", "(" * 150 + "1" + ")" * 150, "1 + " * 100 + "1",
    "", "   ", "1 +", "print(1)", "a.b", "{}", "...",
])
def test_evaluator_refuses(text):
    with pytest.raises(ActionError):
        evaluate(text)


# ---------------------------------------------------------------------------- the reward layers

def test_three_layer_split_of_a_perfect_episode():
    """Every eval task: the expert's episode pays outcome 0.6 + process 0.3 + format/efficiency 0.1."""
    env = MathEnv()
    for i, task in enumerate(load_tasks(MathEnv.task_file(), "eval")):
        env.reset(seed=i, options={"task": task})
        by_kind, done = {}, False
        while not done:
            _, _, term, trunc, info = env.step(env.expert_action())
            for name, v in info["reward_components"].items():
                by_kind[env.component_kinds[name]] = by_kind.get(env.component_kinds[name], 0.0) + v
            done = term or trunc
        assert info["success"]
        assert by_kind["outcome"] == pytest.approx(0.6)
        assert by_kind["process"] == pytest.approx(0.3)
        assert by_kind["format"] == pytest.approx(0.1)
        assert env.t == len(task.data["keys"]) + 1


def test_outcome_mode_keeps_outcome_and_format_only():
    env = MathEnv(reward_mode="outcome")
    env.reset(seed=0, options={"task": make_task()})
    total = sum(r for _, r, *_ in play(env, ["step(4 * 5 = 20)", "step(7 + 20 = 27)", "answer(27)"]))
    assert total == pytest.approx(0.7)


def test_answer_without_steps_earns_the_outcome_only():
    env = MathEnv()
    env.reset(seed=0, options={"task": make_task()})
    (_, reward, term, _, info), = play(env, ["answer(27)"])
    assert term and info["success"] and info["reward_components"] == {"correct": 0.6}


def test_wrong_answer_ends_the_episode_with_a_penalty():
    env = MathEnv()
    env.reset(seed=0, options={"task": make_task()})
    (obs, reward, term, _, info), = play(env, ["answer(55)"])
    assert term and not info["success"] and reward == pytest.approx(-0.2) and "wrong" in obs
    assert "27" not in obs


def test_step_checks():
    env = MathEnv(max_steps=10)
    env.reset(seed=0, options={"task": make_task()})
    obs, reward, _, _, info = env.step("step(4 * 5 = 21)")
    assert info["valid"] and not info["checks"]["step_correct"] and reward == pytest.approx(-0.05)
    assert "20" not in obs  # a false claim is not corrected for free
    _, reward, _, _, info = env.step("step(4*5 = 20)")
    assert info["checks"] == {"step_correct": True, "step_useful": True} and reward == pytest.approx(0.15)
    _, reward, _, _, info = env.step("step(5 * 4 = 20)")  # the same key value again pays nothing
    assert info["checks"] == {"step_correct": True, "step_useful": False} and reward == 0.0
    _, reward, _, _, info = env.step("step(7 + 4 = 11)")  # true but useless
    assert info["checks"]["step_correct"] and not info["checks"]["step_useful"] and reward == 0.0
    _, reward, _, _, info = env.step("step((7 + 20) == 27)")
    assert info["checks"]["step_useful"] and reward == pytest.approx(0.15)
    _, reward, term, _, info = env.step("answer(27.0)")
    assert term and info["success"] and "efficient" not in info["reward_components"]  # turns were wasted


def test_identical_repeated_step_pays_the_repeat_penalty():
    env = MathEnv()
    env.reset(seed=0, options={"task": make_task()})
    env.step("step(4 * 5 = 20)")
    _, reward, _, _, info = env.step("step(4 * 5 = 20)")
    assert info["reward_components"]["repeat"] == pytest.approx(-0.05) and reward == pytest.approx(-0.05)


@pytest.mark.parametrize("text", [
    "step(20 = 20)", "step(-20 = -20)", "step(4 * 5)", "step(4 * 5 = 20 = 20)", "step(4 * 5 = 4 * 5)",
    "step(__import__('os').system('echo hi') = 0)", "step(2 ** 99999 = 1)", "step(4 * 5 = twenty)",
    "answer(twenty-seven)", "answer()", "answer(27, 28)", "answer(1e3)", "answer(\u0663)", "step(\u0663 + 1 = 4)",
    "step(" + "9" * 300 + " * 2 = 1)", "answer(" + "9" * 500 + ")",
])
def test_bad_claims_are_invalid_and_ascii(text):
    env = MathEnv()
    env.reset(seed=0, options={"task": make_task()})
    obs, reward, _, _, info = env.step(text)
    assert not info["valid"] and reward == pytest.approx(-0.1) and "Invalid action" in obs
    assert obs.isascii() and not any(env.found)


# ---------------------------------------------------------------------------- tasks and demonstrators

@pytest.mark.parametrize("difficulty", range(4))
def test_generated_steps_are_true_and_lead_to_the_answer(difficulty):
    env = MathEnv()
    for seed in range(40):
        task = env.generate_task(np.random.default_rng(seed), difficulty)
        assert task == env.generate_task(np.random.default_rng(seed), difficulty)  # deterministic
        for step, key in zip(task.data["steps"], task.data["keys"]):
            lhs, rhs = step.split("=")
            assert evaluate(lhs) == int(rhs) == key
        assert task.data["keys"][-1] == task.answer
        if task.data["kind"] == "expr":
            assert evaluate(task.data["text"]) == task.answer
        assert task.query.isascii() and task.max_steps == len(task.data["keys"]) + 3
    sizes = {len(env.generate_task(np.random.default_rng(s), difficulty).data["keys"]) for s in range(40)}
    assert sizes <= {0: {2}, 1: {3}, 2: {3, 4}, 3: {5}}[difficulty]


def test_lazy_demonstrator_is_valid_and_systematically_wrong_on_precedence():
    env = MathEnv()
    env.reset(seed=0, options={"task": make_task()})
    assert env.imperfect_action(np.random.default_rng(0)) == "step(7 + 4 = 11)"
    rng, wins, episodes = np.random.default_rng(0), 0, 0
    for task in load_tasks(MathEnv.task_file(), "eval"):
        env.reset(seed=0, options={"task": task})
        done = False
        while not done:
            _, _, term, trunc, info = env.step(env.imperfect_action(rng))
            assert info["valid"]
            assert info["checks"].get("step_correct", True)
            done = term or trunc
        wins += info["success"]
        episodes += 1
    assert 0.05 < wins / episodes < 0.6


def test_paraphrase_keeps_the_problem():
    env = MathEnv()
    rng = np.random.default_rng(0)
    for d in range(4):
        task = env.generate_task(np.random.default_rng(d), d)
        p = env.paraphrase(task, rng)
        assert p.query != task.query and p.answer == task.answer and p.data == task.data
    env = agentlab.make("agentlab/Math-v0", split="paraphrase")
    obs, _ = env.reset(seed=0)
    assert obs.isascii()
