"""Maze-v0: the planner, walls, key and door, the shaping reward and the demonstrators."""

from collections import deque

import numpy as np
import pytest

import agentlab
from agentlab.envs.maze import LEVELS, MazeEnv, plan
from agentlab.tasks import Task, load_tasks

STEP = {"north": (-1, 0), "south": (1, 0), "east": (0, 1), "west": (0, -1)}


def grid_distance(rows, start, goal, passable):
    """An independent plain BFS over the cells whose character is in ``passable``."""
    n_rows, n_cols = len(rows), len(rows[0])
    dist, queue = {start: 0}, deque([start])
    while queue:
        r, c = queue.popleft()
        for dr, dc in STEP.values():
            nr, nc = r + dr, c + dc
            if 0 <= nr < n_rows and 0 <= nc < n_cols and (nr, nc) not in dist and rows[nr][nc] in passable:
                dist[(nr, nc)] = dist[(r, c)] + 1
                queue.append((nr, nc))
    return dist.get(goal)


def find(rows, ch):
    return next(((r, c) for r, row in enumerate(rows) for c, x in enumerate(row) if x == ch), None)


def make_task(rows, start, max_steps=20, view=1):
    return Task(id="t", type="maze", query="Reach G.", tools=["move"], max_steps=max_steps,
                data={"grid": rows, "start": list(start), "view": view})


def run_expert(env, task, seed=0):
    env.reset(seed=seed, options={"task": task})
    moves, done = 0, False
    while not done:
        _, _, term, trunc, info = env.step(env.expert_action())
        moves += 1
        done = term or trunc
    return moves, info


@pytest.mark.parametrize("difficulty", range(4))
def test_expert_path_is_the_shortest_path(difficulty):
    env = MazeEnv()
    for seed in range(15):
        task = env.generate_task(np.random.default_rng(seed), difficulty)
        rows, start, goal = task.data["grid"], tuple(task.data["start"]), find(task.data["grid"], "G")
        key = find(rows, "K")
        if key is None:
            expected = grid_distance(rows, start, goal, ".G")
        else:  # the door cuts the way: start -> key with the door shut, then key -> goal with it open
            assert grid_distance(rows, start, goal, ".GK") is None, "the door must block the goal"
            expected = grid_distance(rows, start, key, ".K") + grid_distance(rows, key, goal, ".GKD")
        assert task.answer == expected
        moves, info = run_expert(env, task)
        assert info["success"] and moves == expected <= task.max_steps


def test_levels_grow():
    env = MazeEnv()
    for d, level in LEVELS.items():
        task = env.generate_task(np.random.default_rng(0), d)
        assert len(task.data["grid"]) == level["size"] and task.max_steps == level["max_steps"]
        obs, _ = env.reset(seed=0, options={"task": task})
        window = obs.splitlines()[-(2 * level["view"] + 1):]
        assert all(len(row) == 2 * level["view"] + 1 for row in window)
        assert window[level["view"]][level["view"]] == "@"
    assert [LEVELS[d]["max_steps"] for d in range(4)] == sorted(LEVELS[d]["max_steps"] for d in range(4))
    assert find(env.generate_task(np.random.default_rng(0), 3).data["grid"], "D") is not None


def test_walls_and_edges_block_and_cost_a_bump():
    env = MazeEnv()
    env.reset(seed=0, options={"task": make_task(["..#", ".#G", "..."], (0, 0))})
    obs, reward, term, _, info = env.step("move(north)")  # off the grid
    assert env.unwrapped.pos == (0, 0) and "Bump" in obs and info["valid"] and not term
    assert info["reward_components"]["bump"] == pytest.approx(-0.05) and reward < 0
    env.step("move(east)")
    assert env.pos == (0, 1)
    obs, _, _, _, info = env.step("move(east)")  # into '#'
    assert env.pos == (0, 1) and "Bump" in obs and not info["checks"]["optimal_move"]
    obs, _, _, _, info = env.step("move(south)")  # into '#'
    assert env.pos == (0, 1) and info["reward_components"]["bump"] < 0


def test_key_opens_the_door():
    env = MazeEnv()
    env.reset(seed=0, options={"task": make_task(["K.D.G"], (0, 1))})
    obs, _, _, _, info = env.step("move(east)")
    assert env.pos == (0, 1) and "locked" in obs and info["reward_components"]["bump"] < 0
    obs, _, _, _, info = env.step("move(west)")
    assert env.has_key and "picked up the key" in obs and info["checks"]["optimal_move"]
    assert "K" not in "".join("".join(row) for row in env.grid)
    env.step("move(east)")
    obs, _, _, _, _ = env.step("move(east)")
    assert env.pos == (0, 2) and "unlocked" in obs
    env.step("move(east)")
    _, _, term, _, info = env.step("move(east)")
    assert term and info["success"] and info["reward_components"]["goal"] == 1.0


def test_expert_fetches_the_key_first():
    env = MazeEnv()
    task = make_task(["K.D.G"], (0, 1))
    env.reset(seed=0, options={"task": task})
    assert env.expert_action() == "move(west)"
    moves, info = run_expert(env, task)
    assert info["success"] and moves == 5


def test_closer_is_a_potential_and_cannot_be_farmed():
    """Summed over any walk, `closer` is 0.05 x (start distance - end distance)."""
    env = MazeEnv()
    rng = np.random.default_rng(0)
    for seed in range(20):
        task = env.generate_task(np.random.default_rng(seed), seed % 4)
        env.reset(seed=seed, options={"task": task})
        total, done = 0.0, False
        while not done:
            _, _, term, trunc, info = env.step(f"move({rng.choice(list(STEP))})")
            total += info["reward_components"]["closer"]
            done = term or trunc
        left = len(plan(env.grid, env.pos, env.has_key))
        assert total == pytest.approx(0.05 * (task.answer - left))
    # back and forth forever earns nothing
    env.reset(seed=0, options={"task": make_task(["....", "....", "...G"], (0, 0))})
    total = sum(env.step(a)[1] for a in ["move(east)", "move(west)"] * 4)
    assert total == pytest.approx(0.0)


@pytest.mark.parametrize("text,expected", [
    ("move(north)", (0, 1)), ("move(N)", (0, 1)), ("move(up)", (0, 1)), ("move( 'down' )", (2, 1)),
    ("think: go left\nmove(West)", (1, 0)), ("move(e)", (1, 2)), ("move(right)", (1, 2)),
])
def test_direction_aliases(text, expected):
    env = MazeEnv()
    env.reset(seed=0, options={"task": make_task(["...", "...", "..G"], (1, 1))})
    _, _, _, _, info = env.step(text)
    assert info["valid"] and env.pos == expected


@pytest.mark.parametrize("text", ["move(northeast)", "move()", "move(1)", "move(north, east)", "move(\u00e9)",
                                  "walk(north)", "north"])
def test_bad_moves_are_invalid_not_errors(text):
    env = MazeEnv()
    env.reset(seed=0, options={"task": make_task(["...", "...", "..G"], (1, 1))})
    obs, reward, _, _, info = env.step(text)
    assert not info["valid"] and reward == pytest.approx(-0.1) and env.pos == (1, 1)
    assert "Invalid action" in obs and obs.isascii()


def test_straight_corridors_are_not_charged_as_repeats():
    env = MazeEnv()
    env.reset(seed=0, options={"task": make_task(["....G"], (0, 0))})
    rewards = [env.step("move(east)")[1] for _ in range(4)]
    assert rewards[:3] == pytest.approx([0.05] * 3) and rewards[3] == pytest.approx(1.05)


def test_generation_is_deterministic_and_ascii():
    env = MazeEnv()
    for d in range(4):
        a = env.generate_task(np.random.default_rng(123), d)
        b = env.generate_task(np.random.default_rng(123), d)
        assert a == b
        assert all(row.isascii() and set(row) <= set(".#GKD") for row in a.data["grid"])


def test_imperfect_demonstrator_is_valid_but_slower():
    env = MazeEnv()
    rng = np.random.default_rng(0)
    expert_moves, lazy_moves, lazy_wins = 0, 0, 0
    tasks = [env.generate_task(np.random.default_rng(s), 1) for s in range(30)]
    for task in tasks:
        env.reset(seed=0, options={"task": task})
        done = False
        while not done:
            _, _, term, trunc, info = env.step(env.imperfect_action(rng))
            assert info["valid"] and "bump" not in info["reward_components"]
            lazy_moves += 1
            done = term or trunc
        lazy_wins += info["success"]
        expert_moves += task.answer
    assert lazy_moves > 1.3 * expert_moves
    assert 0 < lazy_wins <= len(tasks)


def test_task_file_and_paraphrase():
    train = load_tasks(MazeEnv.task_file(), "train")
    assert {t.difficulty for t in train} == {0, 1, 2, 3}
    para = load_tasks(MazeEnv.task_file(), "paraphrase")
    evals = {t.id: t for t in load_tasks(MazeEnv.task_file(), "eval")}
    for p in para:
        original = evals[p.id.removesuffix("-para")]
        assert p.data == original.data and p.answer == original.answer
    env = agentlab.make("agentlab/Maze-v0", split="paraphrase")
    obs, _ = env.reset(seed=0)
    assert obs.isascii()
