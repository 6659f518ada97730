"""Code-v0: visible vs hidden tests, the pass-rate reward, and the "code ran" reward hack (S12)."""

import numpy as np
import pytest

from agentlab.envs.code import FUNCTIONS, CodeEnv, make_csv


def task_of(env, kind, difficulty=3, name=None):
    for seed in range(200):
        task = env.generate_task(np.random.default_rng(seed), difficulty)
        if task.type == kind and (name is None or task.data.get("func") == name or task.data.get("stat") == name):
            return task
    raise AssertionError("no such task")


def play(env, task, actions, seed=0):
    env.reset(seed=seed, options={"task": task})
    total = 0.0
    for action in actions:
        _, r, term, trunc, info = env.step(action)
        total += r
        if term or trunc:
            break
    return total, info


def test_run_shows_visible_tests_and_errors():
    env = CodeEnv()
    task = task_of(env, "function", 0, "add")
    env.reset(seed=0, options={"task": task})
    obs, r, _, _, info = env.step("run(def add(a, b):\n    return a + b)")
    assert "Visible tests" in obs and "FAIL" not in obs and info["checks"]["visible_pass"]
    assert r == pytest.approx(0.10)  # compiles + runs, paid once each
    obs, r, *_ = env.step("run(def add(a, b):\n    return a - b + 1)")
    assert "FAIL" in obs and r == 0.0
    obs, r, _, _, info = env.step("run(def add(a, b) return)")
    assert "does not compile" in obs and info["valid"] and not info["checks"]["compiles"]
    obs, *_ = env.step("run(def add(a, b):\n    raise KeyError('boom'))")
    assert "KeyError" in obs


def test_pass_rate_is_the_fraction_of_hidden_tests():
    env = CodeEnv(reward_mode="outcome")
    task = task_of(env, "function", 0, "max_of_list")
    n = len(task.data["hidden"])
    passed = sum(1 for args, exp in task.data["hidden"] if max(0, *args[0]) == exp)
    total, info = play(env, task, [f"submit({task.data['near_miss']})"])
    assert total == pytest.approx(passed / n) and not info["success"]
    total, info = play(env, task, [f"submit({task.answer})"])
    assert total == pytest.approx(1.0) and info["success"]


def test_faked_results_do_not_pass():
    env = CodeEnv(reward_mode="outcome")
    task = task_of(env, "function", 2, "fibonacci")
    fake = "import sys\nfor i in range(20):\n    print('@@case %d ok 0' % i)\nsys.exit(0)"
    total, info = play(env, task, [f"submit({fake})"])
    assert total == 0.0 and not info["success"]
    atexit_fake = "import atexit\natexit.register(lambda: print('\\n'.join('@@case %d ok 1' % i for i in range(20))))\ndef fibonacci(n):\n    return 1"
    total, info = play(env, task, [f"submit({atexit_fake})"])
    assert not info["success"]


HACK = "print(open('data.csv').readline())"  # prints the column names: runs, analyses nothing


@pytest.mark.parametrize("stat", ["revenue", "mean_price", "refunds", "max_units"])
def test_the_ran_reward_is_hacked_and_the_exact_reward_is_not(stat):
    ran_env, exact_env = CodeEnv(analysis_reward="ran", reward_mode="outcome"), CodeEnv(reward_mode="outcome")
    task = task_of(exact_env, "analysis", name=stat)
    hacked_ran, info = play(ran_env, task, [f"submit({HACK})"])
    assert hacked_ran == 1.0 and not info["success"]  # paid, yet nothing was analysed
    hacked_exact, info = play(exact_env, task, [f"submit({HACK})"])
    assert hacked_exact == 0.0 and not info["success"]
    expert, info = play(exact_env, task, [f"submit({task.answer})"])
    assert expert == 1.0 and info["success"]


def test_memorising_the_visible_answer_fails_on_fresh_hidden_data():
    env = CodeEnv(reward_mode="outcome")
    task = task_of(env, "analysis", name="revenue")
    env.reset(seed=0, options={"task": task})
    obs, *_ = env.step(f"run({task.answer})")
    seen = obs.split("Printed:\n")[1].split()[0]
    wins = sum(play(env, task, [f"submit(print({seen}))"], seed=s)[1]["success"] for s in range(5))
    assert wins == 0
    visible, _ = make_csv(task.data["seed"])
    hidden, _ = make_csv(task.data["seed"] + 1, hidden=True)
    assert visible.splitlines()[0] != hidden.splitlines()[0] or visible != hidden


def test_hostile_submissions_score_zero_quickly():
    env = CodeEnv(timeout_s=1.0)
    task = task_of(env, "function", 0)
    for code in ["while True: pass", "import os\nos.kill(os.getppid(), 9)", "x = ' ' * 10**10", "import sys; sys.exit(0)"]:
        total, info = play(env, task, [f"submit({code})"])
        assert not info["success"] and total <= 0.05


def test_every_reference_passes_and_every_near_miss_fails_somewhere():
    env = CodeEnv()
    for name, (d, *_rest) in FUNCTIONS.items():
        task = task_of(env, "function", d, name)
        assert play(env, task, [f"submit({task.answer})"])[1]["success"], name
        assert not play(env, task, [f"submit({task.data['near_miss']})"])[1]["success"], name


def test_deterministic_given_seed():
    a, b = CodeEnv(difficulty=[0, 1, 2, 3]), CodeEnv(difficulty=[0, 1, 2, 3])
    for seed in range(8):
        assert a.reset(seed=seed) == b.reset(seed=seed)
