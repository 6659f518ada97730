"""Maze-v0: walk to a goal in a text gridworld that you only see a few cells of.

Description:
    A grid of floor ``.`` and walls ``#`` hides a goal ``G``. The agent sees only the cells
    around it (a 3x3 or 5x5 window, ``@`` in the middle) plus a hint of where the goal lies
    ("Goal: 2 south, 1 east."), so a wall between it and the goal must be walked around from
    memory of earlier turns. At the top level a door ``D`` cuts the way to the goal and opens
    only for an agent holding the key ``K`` (stepping on the key picks it up). Episodes grow
    with the grid, which makes the env the kit's horizon curriculum (S17) and its testbed for
    credit assignment over long trajectories (S19).

Actions:
    ``move(d)`` with d one of north, south, east, west (also n/s/e/w and up/down/right/left,
    any case). Walking into a wall or a locked door is allowed but leaves you in place.

Observations:
    The task, then after each move what happened ("You moved east.", "Bump: wall to the
    east."), the goal hint (and the key hint while a key lies on the floor) and the window:

        You moved east. Goal: 2 south, 1 east.
        #.#
        .@.
        ..G

    Cells outside the grid are drawn as walls.

Rewards (components):
    ``goal`` (outcome, +1.0) on reaching the goal. ``closer`` (process, 0.05 per cell): paid
    +0.05 when the shortest-path distance to the goal (through the key when one is needed)
    shrinks and -0.05 when it grows. Because it is the change of a potential it sums over an
    episode to 0.05 x (start distance - end distance): walking back and forth earns nothing,
    so the shaping cannot be farmed. ``bump`` (penalty, -0.05) for walking into a wall or a
    locked door. ``format`` (-0.1) for an invalid action. ``repeat`` (penalty) is 0.0 by
    default: TextEnv charges it for the same action twice in a row, and ``move(east)`` twice
    is what a straight corridor needs; a repeated bump already pays ``bump`` each time.

Episode end:
    terminated on reaching the goal; truncated after ``max_steps`` moves.

Info:
    ``checks["optimal_move"]``: the move shortened the shortest path by one (step-level
    success).

Arguments:
    ``difficulty`` 0: an open 4x4 grid, 3x3 view, 10 moves; 1: a 6x6 grid with scattered
    walls, 3x3 view, 20 moves; 2: an 8x8 maze with a few loops, 5x5 view, 40 moves; 3: a
    10x10 maze with a key and a locked door, 5x5 view, 80 moves. Plus the `TextEnv`
    arguments.

Version history:
    v0: first version.
"""

from __future__ import annotations

import zlib
from collections import deque

import numpy as np

from agentlab.envs.base import Action, ActionError, Outcome, TextEnv, echo
from agentlab.tasks import Task

# difficulty -> grid size, layout kind, view radius (1: 3x3, 2: 5x5), max moves
LEVELS = {
    0: {"size": 4, "kind": "open", "view": 1, "max_steps": 10},
    1: {"size": 6, "kind": "walls", "view": 1, "max_steps": 20},
    2: {"size": 8, "kind": "maze", "view": 2, "max_steps": 40},
    3: {"size": 10, "kind": "keydoor", "view": 2, "max_steps": 80},
}
MOVES = {"north": (-1, 0), "east": (0, 1), "south": (1, 0), "west": (0, -1)}  # BFS tries them in this order
ALIASES = {
    "n": "north", "up": "north", "s": "south", "down": "south",
    "e": "east", "right": "east", "w": "west", "left": "west",
}
HABIT_ORDER = ("north", "east", "south", "west")  # the lazy demonstrator's favourite directions
PARAPHRASES = [
    "Find your way to G on a {n}x{n} grid; you have {steps} moves.{extra}",
    "Get to the goal square G within {steps} moves. The grid is {n} by {n}.{extra}",
    "Navigate a {n}x{n} map to G in no more than {steps} moves.{extra}",
]
KEY_NOTE = " A locked door D blocks the way: step on the key K first."

Pos = tuple[int, int]


# ---------------------------------------------------------------------------- grid rules

def cell(grid: list[list[str]], pos: Pos) -> str:
    """The cell at ``pos``; outside the grid counts as wall."""
    r, c = pos
    if 0 <= r < len(grid) and 0 <= c < len(grid[0]):
        return grid[r][c]
    return "#"


def move(grid: list[list[str]], pos: Pos, has_key: bool, direction: str) -> tuple[Pos, bool, str]:
    """One move by the rules: returns (new position, holding the key, event).

    event is "moved", "wall", "locked", "key" (picked it up) or "door" (unlocked it).
    The planner uses this very function, so the expert and the env cannot disagree.
    """
    dr, dc = MOVES[direction]
    nxt = (pos[0] + dr, pos[1] + dc)
    here = cell(grid, nxt)
    if here == "#":
        return pos, has_key, "wall"
    if here == "D":
        return (nxt, has_key, "door") if has_key else (pos, has_key, "locked")
    if here == "K" and not has_key:
        return nxt, True, "key"
    return nxt, has_key, "moved"


def plan(grid: list[list[str]], pos: Pos, has_key: bool) -> list[str] | None:
    """Shortest list of moves from (pos, has_key) to the goal: BFS over (cell, key) states."""
    start = (pos, has_key)
    if cell(grid, pos) == "G":
        return []
    parent: dict = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        for d in MOVES:
            p, k, _ = move(grid, state[0], state[1], d)
            nxt = (p, k)
            if nxt in parent:
                continue
            parent[nxt] = (state, d)
            if cell(grid, p) == "G":
                path = []
                while parent[nxt] is not None:
                    nxt, step = parent[nxt]
                    path.append(step)
                return path[::-1]
            queue.append(nxt)
    return None


def reachable(grid: list[list[str]], start: Pos, blocked: str = "#D") -> dict[Pos, int]:
    """Plain BFS distances from ``start`` over cells not in ``blocked`` (for generation)."""
    dist = {start: 0}
    queue = deque([start])
    while queue:
        r, c = queue.popleft()
        for dr, dc in MOVES.values():
            nxt = (r + dr, c + dc)
            if nxt not in dist and cell(grid, nxt) not in blocked:
                dist[nxt] = dist[(r, c)] + 1
                queue.append(nxt)
    return dist


def offset_words(frm: Pos, to: Pos) -> str:
    """ "2 south, 1 east" from one cell to another."""
    dr, dc = to[0] - frm[0], to[1] - frm[1]
    parts = []
    if dr:
        parts.append(f"{abs(dr)} {'south' if dr > 0 else 'north'}")
    if dc:
        parts.append(f"{abs(dc)} {'east' if dc > 0 else 'west'}")
    return ", ".join(parts) or "here"


# ---------------------------------------------------------------------------- layouts

def carve_maze(rng: np.random.Generator, n: int) -> list[list[str]]:
    """A perfect maze by randomised depth-first search over the cells at even coordinates.

    With an even size the last row and column have no cells of their own; a few of their
    squares are opened next to the maze to leave dead-end nooks and the odd loop.
    """
    grid = [["#"] * n for _ in range(n)]
    cells = [(r, c) for r in range(0, n, 2) for c in range(0, n, 2)]
    first = cells[int(rng.integers(len(cells)))]
    grid[first[0]][first[1]] = "."
    stack = [first]
    while stack:
        r, c = stack[-1]
        options = [(r + 2 * dr, c + 2 * dc, dr, dc) for dr, dc in MOVES.values()
                   if 0 <= r + 2 * dr < n and 0 <= c + 2 * dc < n and grid[r + 2 * dr][c + 2 * dc] == "#"]
        if not options:
            stack.pop()
            continue
        nr, nc, dr, dc = options[int(rng.integers(len(options)))]
        grid[r + dr][c + dc] = "."
        grid[nr][nc] = "."
        stack.append((nr, nc))
    if n % 2 == 0:
        for i in range(n - 1):
            if grid[n - 2][i] == "." and rng.random() < 0.3:
                grid[n - 1][i] = "."
            if grid[i][n - 2] == "." and rng.random() < 0.3:
                grid[i][n - 1] = "."
    return grid


def braid(rng: np.random.Generator, grid: list[list[str]], k: int) -> None:
    """Knock out ``k`` walls that separate two floor cells, so the maze has loops."""
    n = len(grid)
    walls = [(r, c) for r in range(n) for c in range(n) if grid[r][c] == "#"
             and ((cell(grid, (r - 1, c)) == "." and cell(grid, (r + 1, c)) == ".")
                  or (cell(grid, (r, c - 1)) == "." and cell(grid, (r, c + 1)) == "."))]
    for i in rng.permutation(len(walls))[:k]:
        r, c = walls[int(i)]
        grid[r][c] = "."


def pick(rng: np.random.Generator, options: list) -> Pos:
    return options[int(rng.integers(len(options)))]


def make_layout(rng: np.random.Generator, level: dict) -> tuple[list[list[str]], Pos]:
    """A grid with a goal (and key and door at the top level) and a start cell."""
    n, kind = level["size"], level["kind"]
    for _ in range(1000):  # rejection sampling; the rng makes it deterministic
        if kind == "open":
            grid = [["."] * n for _ in range(n)]
        elif kind == "walls":
            grid = [["#" if rng.random() < 0.25 else "." for _ in range(n)] for _ in range(n)]
        else:
            grid = carve_maze(rng, n)
            if kind == "maze":
                braid(rng, grid, 2)
        floor = [(r, c) for r in range(n) for c in range(n) if grid[r][c] == "."]
        if len(floor) < 2:
            continue
        start = pick(rng, floor)
        dist = reachable(grid, start)
        far = [p for p, d in dist.items() if d >= {"open": 2, "walls": 4}.get(kind, n)]
        if not far:
            continue
        goal = pick(rng, far)
        grid[goal[0]][goal[1]] = "G"
        if kind == "keydoor" and not add_key_and_door(rng, grid, start, goal):
            continue
        steps = plan(grid, start, False)
        if steps is not None and len(steps) <= level["max_steps"] - 4:
            return grid, start
    raise RuntimeError(f"could not build a maze for {level}")  # not reached with these levels


def add_key_and_door(rng: np.random.Generator, grid: list[list[str]], start: Pos, goal: Pos) -> bool:
    """Lock a corridor cell on the way to the goal and drop the key on this side of it."""
    path, pos = [], start
    for d in plan(grid, start, False) or []:
        pos, _, _ = move(grid, pos, False, d)
        path.append(pos)
    corridor = [p for p in path[len(path) // 3: -2]
                if sum(cell(grid, (p[0] + dr, p[1] + dc)) != "#" for dr, dc in MOVES.values()) == 2]
    if not corridor:
        return False
    door = pick(rng, corridor)
    grid[door[0]][door[1]] = "D"
    side = reachable(grid, start, blocked="#DG")
    if goal in side:  # a loop goes around the door
        return False
    spots = [p for p, d in side.items() if d >= 3 and p not in path]
    if not spots:
        return False
    key = pick(rng, spots)
    grid[key[0]][key[1]] = "K"
    return True


# ---------------------------------------------------------------------------- the env

class MazeEnv(TextEnv):
    name = "Maze"
    description = (
        "You walk on a grid and see only the cells around you: @ is you, # a wall, . floor, "
        "G the goal, K a key, D a locked door (step on K to take the key). Reach G."
    )
    tools = {"move": "move(d): step one cell, d is north, south, east or west"}
    default_weights = {"goal": 1.0, "closer": 0.05, "bump": -0.05, "format": -0.1, "repeat": 0.0}
    component_kinds = {"goal": "outcome", "closer": "process", "bump": "penalty", "format": "format",
                       "repeat": "penalty"}
    default_max_steps = 10
    max_difficulty = 3
    example_action = "move(east)"

    def generate_task(self, rng: np.random.Generator, difficulty: int) -> Task:
        difficulty = int(np.clip(difficulty, 0, self.max_difficulty))
        level = LEVELS[difficulty]
        grid, start = make_layout(rng, level)
        rows = ["".join(row) for row in grid]
        n, steps = level["size"], level["max_steps"]
        extra = KEY_NOTE if level["kind"] == "keydoor" else ""
        layout = "/".join(rows) + f"@{start[0]},{start[1]}"
        return Task(
            id=f"maze-d{difficulty}-{zlib.crc32(layout.encode()):08x}",
            type="maze",
            query=f"Reach G on a {n}x{n} grid within {steps} moves.{extra}",
            answer=len(plan(grid, start, False)),  # shortest path length
            tools=["move"],
            max_steps=steps,
            difficulty=difficulty,
            data={"grid": rows, "start": list(start), "view": level["view"]},
        )

    def _start(self) -> str:
        self.grid = [list(row) for row in self.task.data["grid"]]
        self.pos: Pos = (int(self.task.data["start"][0]), int(self.task.data["start"][1]))
        self.has_key = False
        self.goal = next((r, c) for r, row in enumerate(self.grid) for c, ch in enumerate(row) if ch == "G")
        self.dist = len(plan(self.grid, self.pos, self.has_key) or [])  # moves left on the shortest path
        return f"{self.task.query}\n{self._look()}"

    def _look(self) -> str:
        """The hints and the window around the agent."""
        hints = [f"Goal: {offset_words(self.pos, self.goal)}."]
        key = next(((r, c) for r, row in enumerate(self.grid) for c, ch in enumerate(row) if ch == "K"), None)
        if key is not None:
            hints.append(f"Key: {offset_words(self.pos, key)}.")
        elif self.has_key:
            hints.append("You hold the key.")
        v = int(self.task.data.get("view", 1))
        rows = []
        for dr in range(-v, v + 1):
            rows.append("".join("@" if (dr, dc) == (0, 0) else cell(self.grid, (self.pos[0] + dr, self.pos[1] + dc))
                                for dc in range(-v, v + 1)))
        return " ".join(hints) + "\n" + "\n".join(rows)

    def _act(self, action: Action) -> Outcome:
        word = action.arg.strip().strip("'\"").strip().lower()
        direction = ALIASES.get(word, word)
        if direction not in MOVES:
            raise ActionError(f"move needs north, south, east or west, got '{echo(action.arg, 20)}'")
        w = self.weights
        before = self.dist
        self.pos, self.has_key, event = move(self.grid, self.pos, self.has_key, direction)
        if event in ("key", "door"):  # the key leaves the floor; an unlocked door stays open
            self.grid[self.pos[0]][self.pos[1]] = "."
        after = self.dist = len(plan(self.grid, self.pos, self.has_key) or [])
        components = {"closer": w["closer"] * (before - after)}
        if event in ("wall", "locked"):
            components["bump"] = w["bump"]
        checks = {"optimal_move": after == before - 1}
        if self.pos == self.goal:
            components["goal"] = w["goal"]
            return Outcome("You reached the goal!", components, terminated=True, success=True, checks=checks)
        said = {
            "moved": f"You moved {direction}.",
            "wall": f"Bump: wall to the {direction}.",
            "locked": f"The door to the {direction} is locked; find the key.",
            "key": f"You moved {direction} and picked up the key.",
            "door": f"You unlocked the door and moved {direction}.",
        }[event]
        return Outcome(f"{said} {self._look()}", components, checks=checks)

    def state_key(self) -> str:
        # the reply starts with how the agent got here ("You moved east."), which the state is not;
        # the grid's checksum tells an opened door or a picked-up key apart
        layout = zlib.crc32("".join("".join(row) for row in self.grid).encode())
        return f"{self.pos[0]},{self.pos[1]} key={int(self.has_key)} grid={layout:08x}"

    def paraphrase(self, task: Task, rng: np.random.Generator) -> Task:
        text = PARAPHRASES[int(rng.integers(len(PARAPHRASES)))]
        extra = KEY_NOTE if any("D" in row for row in task.data["grid"]) else ""
        query = text.format(n=len(task.data["grid"]), steps=task.max_steps, extra=extra)
        return Task(**{**task.to_dict(), "query": query})

    def expert_action(self) -> str:
        steps = plan(self.grid, self.pos, self.has_key)
        return f"move({steps[0] if steps else 'north'})"

    def imperfect_action(self, rng: np.random.Generator) -> str:
        """A demonstrator with a habit: half the time it takes the first open direction in the
        order north, east, south, west instead of the planned move. Never bumps, so every
        action is valid and useful-looking, but it wastes moves in a systematic way."""
        if rng.random() < 0.5:
            for d in HABIT_ORDER:
                if move(self.grid, self.pos, self.has_key, d)[2] not in ("wall", "locked"):
                    return f"move({d})"
        return self.expert_action()
