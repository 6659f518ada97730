"""GuessNumber-v0: find a hidden whole number from "higher" / "lower" feedback.

Description:
    The smallest multi-turn problem in the kit. A number is hidden in a range; each guess is
    answered with "higher", "lower" or "correct". Bisecting finds it in ceil(log2(n + 1))
    guesses. First lessons, credit assignment and GAE use it.

Actions:
    ``guess(n)`` with a whole number n.

Observations:
    The task ("Find the hidden number between 1 and 16 ...") then, after each guess, "n is
    too low" or "n is too high", the range still possible ("it is between 9 and 16") and the
    guesses left. Stating the range makes each good guess a function of the last observation
    alone; without it a policy must combine every earlier reply, which the tiny CPU policy did
    not learn to do (bench/RESULTS.md, "Measurements behind design choices").

Rewards (components):
    ``correct`` (outcome, +1.0) when the number is found; ``consistent`` (process, +0.1) for a
    guess inside the range still possible given the feedback so far; ``format`` (-0.1) for an
    invalid action; ``repeat`` (-0.05) for the same guess twice in a row.

Episode end:
    terminated when the number is guessed; truncated after ``max_steps`` guesses.

Info:
    ``checks["consistent_guess"]``: the guess was still possible (step-level success).

Arguments:
    ``difficulty`` 0: 1..16 in 5 guesses; 1: a 32-number range at a random offset in 6;
    2: 100 numbers in 8; 3: 1000 numbers in 11. ``careless`` what the biased demonstrator
    guesses: ``"lowest"`` (default) the lowest number still possible, ``"random"`` any number
    still possible, drawn uniformly (a warm-up from it samples many different games);
    ``"repeat"`` the lowest number on its first guess, then that same guess again every turn (a
    loop: a warm-up from it knows the repeated action that S20's collapse is made of).
    Plus the `TextEnv` arguments.

Version history:
    v0: first version.
"""

from __future__ import annotations

import numpy as np

from agentlab.envs.base import Action, ActionError, Outcome, TextEnv, echo
from agentlab.tasks import Task

PARAPHRASES = [
    "A secret whole number lies between {lo} and {hi}. Guess it within {steps} tries.",
    "Guess my number: it is from {lo} to {hi}, and you get {steps} guesses.",
    "I am thinking of a number in [{lo}, {hi}]. Find it in at most {steps} guesses.",
]
LEVELS = {0: (16, 5), 1: (32, 6), 2: (100, 8), 3: (1000, 11)}  # difficulty -> (range size, max steps)


class GuessNumberEnv(TextEnv):
    name = "GuessNumber"
    description = "A whole number is hidden in a range. Find it; after each guess you are told if it is higher or lower."
    tools = {"guess": "guess(n): guess the whole number n"}
    default_weights = {"correct": 1.0, "consistent": 0.1, "format": -0.1, "repeat": -0.05}
    component_kinds = {"correct": "outcome", "consistent": "process", "format": "format", "repeat": "penalty"}
    default_max_steps = 5
    max_difficulty = 3
    example_action = "guess(8)"

    def __init__(self, *args, careless: str = "lowest", **kwargs):
        super().__init__(*args, **kwargs)
        if careless not in ("lowest", "random", "repeat"):
            raise ValueError(f"careless must be 'lowest', 'random' or 'repeat', got {careless!r}")
        self.careless = careless

    def generate_task(self, rng: np.random.Generator, difficulty: int) -> Task:
        size, steps = LEVELS[int(np.clip(difficulty, 0, self.max_difficulty))]
        lo = 1 if difficulty == 0 else int(rng.integers(1, 100))
        hi = lo + size - 1
        target = int(rng.integers(lo, hi + 1))
        return Task(
            id=f"guess-d{difficulty}-{lo}-{hi}-{target}",
            type="guess",
            query=f"Find the hidden number between {lo} and {hi}. You have {steps} guesses.",
            answer=target,
            tools=["guess"],
            max_steps=steps,
            difficulty=int(difficulty),
            data={"lo": lo, "hi": hi},
        )

    def _start(self) -> str:
        self.lo, self.hi = int(self.task.data["lo"]), int(self.task.data["hi"])
        return self.task.query

    def _act(self, action: Action) -> Outcome:
        try:
            n = int(action.arg)
        except ValueError:
            raise ActionError(f"guess needs a whole number, got {echo(action.arg, 20)!r}") from None
        w, target = self.weights, int(self.task.answer)
        consistent = self.lo <= n <= self.hi
        components = {"consistent": w["consistent"] if consistent else 0.0}
        checks = {"consistent_guess": consistent}
        left = self.max_steps - self.t
        if n == target:
            components["correct"] = w["correct"]
            return Outcome(f"{n} is correct!", components, terminated=True, success=True, checks=checks)
        if n < target:
            self.lo = max(self.lo, n + 1)
            return Outcome(f"{n} is too low: it is between {self.lo} and {self.hi}. {left} left.", components, checks=checks)
        self.hi = min(self.hi, n - 1)
        return Outcome(f"{n} is too high: it is between {self.lo} and {self.hi}. {left} left.", components, checks=checks)

    def state_key(self) -> str:
        # the replies "17 is too low" and "5 left" differ between paths to the same interval
        return f"{self.lo}-{self.hi}"

    def paraphrase(self, task: Task, rng: np.random.Generator) -> Task:
        text = PARAPHRASES[int(rng.integers(len(PARAPHRASES)))]
        query = text.format(lo=task.data["lo"], hi=task.data["hi"], steps=task.max_steps)
        return Task(**{**task.to_dict(), "query": query})

    def expert_action(self) -> str:
        return f"guess({(self.lo + self.hi) // 2})"

    def imperfect_action(self, rng: np.random.Generator) -> str:
        """A biased demonstrator: guesses the lowest number still possible (lazy, the same game every
        time) or, with ``careless="random"``, any number still possible, or with ``"repeat"`` the
        lowest number once and then the same guess on every later turn."""
        if self.careless == "repeat" and self._last_action is not None:
            return self._last_action
        if self.careless == "random":
            return f"guess({int(rng.integers(self.lo, self.hi + 1))})"
        return f"guess({self.lo})"

