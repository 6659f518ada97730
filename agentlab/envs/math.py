"""Math-v0: multi-step arithmetic and word problems, every intermediate step checked.

Description:
    A problem ("Compute 7 + 4 * 5." or a short word problem about apples, prices, trains)
    is solved in steps. Each step is a claim ``expression = value``; the env evaluates the
    expression itself and checks that the claim is true and that it is useful: its value is
    one of the task's key intermediate values (listed in the task data). Then the agent
    gives the final answer. This is the kit's example of checkable intermediate steps (S2)
    and of the three-layer reward (S11): outcome 60%, process 30%, format and efficiency 10%.

Actions:
    ``step(expression = value)``, e.g. ``step(4 * 5 = 20)``. Expressions may hold numbers,
    ``+ - * / // %``, parentheses and unary minus, at most 200 characters; the value is a
    number. The env evaluates with exact fractions, never with eval/exec.
    ``answer(n)`` gives the final answer, a number, and ends the episode.

Observations:
    The problem, then after each step whether the claim is true and whether it is a key step
    ("Correct: 4 * 5 = 20, a key step (1 of 2 found)."). A false claim is not corrected: the
    env does not leak the value.

Rewards (components), and the three layers of a perfect episode (sum 1.0):
    outcome 0.6 -- ``correct`` (+0.6) for the right final answer; ``wrong`` (-0.2) otherwise.
    process 0.3 -- ``step_ok``: the weight is the budget for the whole episode, split evenly
    over the key steps, each paid the first time a true claim reaches its value (so a task
    with 3 key steps pays 0.1 per step, 0.3 in all; repeating a step pays nothing). A false
    claim costs ``step_wrong`` (-0.05).
    format and efficiency 0.1 -- ``efficient`` (+0.1) with a correct answer when every key
    step was written and no turn was spent on anything else (turns = key steps + 1).
    ``format`` (-0.1) for an invalid action; ``repeat`` (-0.05) for the same action twice in
    a row. A step whose left side is a bare number ("20 = 20") proves nothing and is invalid.

Episode end:
    terminated by ``answer``; truncated after ``max_steps`` turns (key steps + 3).

Info:
    ``checks["step_correct"]``: a step's claim was true (only on ``step`` turns);
    ``checks["step_useful"]``: it reached a new key value.

Arguments:
    ``difficulty`` 0: two-step expressions such as a + b * c with one-digit numbers;
    1: three-step expressions; 2: word problems (apples, prices, trains, ...) with 3-4
    steps; 3: chains of five steps with two-digit numbers. Plus the `TextEnv` arguments.

Version history:
    v0: first version.
"""

from __future__ import annotations

import ast
import operator
import re
import zlib
from fractions import Fraction

import numpy as np

from agentlab.envs.base import Action, ActionError, Outcome, TextEnv, echo
from agentlab.tasks import Task

# ---------------------------------------------------------------------------- a safe evaluator

MAX_EXPR_CHARS = 200
MAX_MAGNITUDE = 10**12  # any intermediate value beyond this is refused
BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
          ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?")  # ASCII digits only (\d would take any script's)


def evaluate(text: str) -> Fraction:
    """The exact value of an arithmetic expression, or `ActionError` saying why not.

    The text is parsed into a syntax tree and only number literals, the operators above,
    parentheses and unary signs are walked; names, calls, attributes, ``**`` and everything
    else are refused before anything runs.
    """
    if len(text) > MAX_EXPR_CHARS:
        raise ActionError(f"the expression is longer than {MAX_EXPR_CHARS} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise ActionError(f"'{echo(text, 30)}' is not an arithmetic expression") from None
    return _walk(tree.body)


def _walk(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        if node.value != node.value or abs(node.value) > MAX_MAGNITUDE:  # nan, inf, 1e999, 10**99
            raise ActionError(f"numbers must be at most {MAX_MAGNITUDE} in size")
        value = Fraction(repr(node.value))  # "0.1" stays one tenth, not its binary neighbour
    elif isinstance(node, ast.UnaryOp) and type(node.op) in UNARY:
        value = UNARY[type(node.op)](_walk(node.operand))
    elif isinstance(node, ast.BinOp) and type(node.op) in BINARY:
        left, right = _walk(node.left), _walk(node.right)
        if right == 0 and type(node.op) in (ast.Div, ast.FloorDiv, ast.Mod):
            raise ActionError("division by zero")
        value = Fraction(BINARY[type(node.op)](left, right))
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        raise ActionError("powers (**) are not allowed; write the product out")
    else:
        raise ActionError("only numbers, + - * / // %, parentheses and unary minus are allowed")
    if abs(value) > MAX_MAGNITUDE:
        raise ActionError(f"a value in the expression is larger than {MAX_MAGNITUDE}")
    return value


def has_operator(text: str) -> bool:
    """Whether an expression computes something (a bare "-3" does not)."""
    tree = ast.parse(text.strip(), mode="eval")
    return any(isinstance(n, ast.BinOp) for n in ast.walk(tree))


def parse_number(text: str) -> Fraction:
    text = text.strip()
    if len(text) > 30 or not NUMBER.fullmatch(text):
        raise ActionError(f"expected a number such as 12 or -3.5, got '{echo(text, 20)}'")
    return Fraction(text)


def show(x: Fraction | int) -> str:
    x = Fraction(x)
    return str(x.numerator) if x.denominator == 1 else str(float(x))


# ---------------------------------------------------------------------------- problems
# Each builder draws numbers and returns (question, key steps as (expression, value), lazy
# steps, lazy answer). Values are whole numbers; divisions are exact by construction.
# The "lazy" solution is the imperfect demonstrator's: it reads expressions left to right,
# ignoring precedence and parentheses, and in word problems it stops one step early.

def left_to_right(tokens: list) -> tuple[list[tuple[str, int]], int]:
    """The lazy reading of ``a op b op c ...``: combine from the left, whatever the precedence."""
    acc, steps = tokens[0], []
    for op, x in zip(tokens[1::2], tokens[2::2]):
        if op == "/" and acc % x:
            op = "//"
        new = {"+": acc + x, "-": acc - x, "*": acc * x, "/": acc // x, "//": acc // x}[op]
        steps.append((f"{acc} {op} {x}", new))
        acc = new
    return steps, acc


def expression_problem(rng: np.random.Generator, difficulty: int) -> dict:
    r = lambda lo, hi: int(rng.integers(lo, hi + 1))  # noqa: E731
    lo, hi = (2, 9) if difficulty < 3 else (3, 19)
    a, b, c, d, e, f = (r(lo, hi) for _ in range(6))
    if difficulty == 0:
        form = int(rng.integers(3))
        if form == 0:
            text, tokens = f"{a} + {b} * {c}", [a, "+", b, "*", c]
            keys = [(f"{b} * {c}", b * c), (f"{a} + {b * c}", a + b * c)]
        elif form == 1:
            text, tokens = f"{a} * {b} - {c}", [a, "*", b, "-", c]
            keys = [(f"{a} * {b}", a * b), (f"{a * b} - {c}", a * b - c)]
        else:
            text, tokens = f"({a} + {b}) * {c}", [a, "+", b, "*", c]
            keys = [(f"{a} + {b}", a + b), (f"{a + b} * {c}", (a + b) * c)]
    elif difficulty == 1:
        form = int(rng.integers(3))
        if form == 0:
            s = a * b + c * d
            text, tokens = f"{a} * {b} + {c} * {d}", [a, "*", b, "+", c, "*", d]
            keys = [(f"{a} * {b}", a * b), (f"{c} * {d}", c * d), (f"{a * b} + {c * d}", s)]
        elif form == 1:
            text, tokens = f"({a} + {b}) * {c} - {d}", [a, "+", b, "*", c, "-", d]
            keys = [(f"{a} + {b}", a + b), (f"{a + b} * {c}", (a + b) * c), (f"{(a + b) * c} - {d}", (a + b) * c - d)]
        else:  # (a * b + c) / d with d dividing the top: pick the quotient q and solve for c
            q = r(2, 9)
            c = d * q - a * b
            while c <= 0:
                q += 1
                c = d * q - a * b
            text, tokens = f"({a} * {b} + {c}) / {d}", [a, "*", b, "+", c, "/", d]
            keys = [(f"{a} * {b}", a * b), (f"{a * b} + {c}", a * b + c), (f"{a * b + c} / {d}", q)]
    else:  # difficulty 3: five steps
        if rng.random() < 0.5:
            ab, cd, ef = a * b, c * d, e * f
            text, tokens = f"{a} * {b} + {c} * {d} - {e} * {f}", [a, "*", b, "+", c, "*", d, "-", e, "*", f]
            keys = [(f"{a} * {b}", ab), (f"{c} * {d}", cd), (f"{e} * {f}", ef),
                    (f"{ab} + {cd}", ab + cd), (f"{ab + cd} - {ef}", ab + cd - ef)]
        else:
            s1 = a + b
            s2 = s1 * c
            s3 = s2 - d
            s4 = s3 * e
            text = f"(({a} + {b}) * {c} - {d}) * {e} + {f}"
            tokens = [a, "+", b, "*", c, "-", d, "*", e, "+", f]
            keys = [(f"{a} + {b}", s1), (f"{s1} * {c}", s2), (f"{s2} - {d}", s3), (f"{s3} * {e}", s4),
                    (f"{s4} + {f}", s4 + f)]
    lazy, lazy_answer = left_to_right(tokens)
    return {"kind": "expr", "text": text, "keys": keys, "lazy": lazy, "lazy_answer": lazy_answer}


# Word problems: (phrasings, builder). A builder maps numbers to key steps.
WORD = {
    "apples": (
        ["{name} buys {a} bags with {b} apples in each. {name} eats {c} apples and shares the rest equally "
         "among {d} friends. How many apples does each friend get?",
         "There are {a} bags of {b} apples. After {c} apples are eaten, the rest go to {d} friends in equal "
         "shares. How many apples per friend?"],
        lambda a, b, c, d: [(f"{a} * {b}", a * b), (f"{a * b} - {c}", a * b - c),
                            (f"{a * b - c} / {d}", (a * b - c) // d)],
    ),
    "shop": (
        ["Pens cost {a} dollars and notebooks cost {b} dollars. {name} buys {c} pens and {d} notebooks and "
         "pays with a 100 dollar bill. How much change does {name} get?",
         "{name} pays for {c} pens at {a} dollars each and {d} notebooks at {b} dollars each with 100 dollars. "
         "What is the change?"],
        lambda a, b, c, d: [(f"{c} * {a}", c * a), (f"{d} * {b}", d * b), (f"{c * a} + {d * b}", c * a + d * b),
                            (f"100 - {c * a + d * b}", 100 - c * a - d * b)],
    ),
    "train": (
        ["A train runs {a} hours at {b} km per hour, then {c} hours at {d} km per hour. How many km does it "
         "travel in all?",
         "How far does a train go if it travels at {b} km/h for {a} hours and then at {d} km/h for {c} hours?"],
        lambda a, b, c, d: [(f"{a} * {b}", a * b), (f"{c} * {d}", c * d), (f"{a * b} + {c * d}", a * b + c * d)],
    ),
    "farm": (
        ["A farm has {a} rows of {b} trees, and each tree gives {c} kg of fruit. The farmer keeps {d} kg and "
         "sells the rest. How many kg are sold?",
         "{a} rows with {b} trees each give {c} kg of fruit per tree. If {d} kg are kept, how many kg are "
         "sold?"],
        lambda a, b, c, d: [(f"{a} * {b}", a * b), (f"{a * b} * {c}", a * b * c),
                            (f"{a * b * c} - {d}", a * b * c - d)],
    ),
}
NAMES = ["Ana", "Ben", "Chen", "Dara", "Eli", "Farah", "Gus", "Hana"]


def word_problem(rng: np.random.Generator) -> dict:
    r = lambda lo, hi: int(rng.integers(lo, hi + 1))  # noqa: E731
    kind = sorted(WORD)[int(rng.integers(len(WORD)))]
    if kind == "apples":  # choose the share first so the division is exact
        d, share, b = r(2, 6), r(2, 9), r(4, 12)
        a = r(2, 6)
        c = a * b - d * share
        while c <= 0:
            a += 1
            c = a * b - d * share
        nums = {"a": a, "b": b, "c": c, "d": d}
    elif kind == "shop":
        nums = {"a": r(2, 9), "b": r(2, 9), "c": r(2, 5), "d": r(2, 5)}
    elif kind == "train":
        nums = {"a": r(2, 5), "b": r(4, 12) * 10, "c": r(1, 4), "d": r(4, 12) * 10}
    else:
        nums = {"a": r(2, 9), "b": r(2, 9), "c": r(2, 9), "d": r(1, 20)}
    nums["name"] = NAMES[int(rng.integers(len(NAMES)))]
    keys = WORD[kind][1](nums["a"], nums["b"], nums["c"], nums["d"])
    return {"kind": "word", "template": kind, "nums": nums, "text": WORD[kind][0][0].format(**nums),
            "keys": keys, "lazy": keys[:-1], "lazy_answer": keys[-2][1]}


FRAMES = ["Compute {text}.", "What is {text}?", "Work out {text} step by step.", "Find the value of {text}."]


# ---------------------------------------------------------------------------- the env

class MathEnv(TextEnv):
    name = "Math"
    description = (
        "Solve the problem in steps. Write each intermediate result as step(expression = value); "
        "the env checks it. Then give the final number with answer(n)."
    )
    tools = {
        "step": "step(expr = value): claim one intermediate result, e.g. step(4 * 5 = 20)",
        "answer": "answer(n): give the final answer and end the episode",
    }
    default_weights = {"correct": 0.6, "step_ok": 0.3, "efficient": 0.1, "step_wrong": -0.05, "wrong": -0.2,
                       "format": -0.1, "repeat": -0.05}
    component_kinds = {"correct": "outcome", "wrong": "outcome", "step_ok": "process", "step_wrong": "process",
                       "efficient": "format", "format": "format", "repeat": "penalty"}
    default_max_steps = 5
    max_difficulty = 3
    example_action = "step(4 * 5 = 20)"

    def generate_task(self, rng: np.random.Generator, difficulty: int) -> Task:
        difficulty = int(np.clip(difficulty, 0, self.max_difficulty))
        p = word_problem(rng) if difficulty == 2 else expression_problem(rng, difficulty)
        query = FRAMES[0].format(text=p["text"]) if p["kind"] == "expr" else p["text"]
        keys = [(expr, int(v)) for expr, v in p["keys"]]
        data = {
            "kind": p["kind"],
            "text": p["text"],
            "steps": [f"{expr} = {v}" for expr, v in keys],
            "keys": [v for _, v in keys],
            "lazy_steps": [f"{expr} = {int(v)}" for expr, v in p["lazy"]],
            "lazy_answer": int(p["lazy_answer"]),
        }
        if p["kind"] == "word":
            data.update(template=p["template"], nums=p["nums"])
        return Task(
            id=f"math-d{difficulty}-{zlib.crc32(query.encode()):08x}",
            type="math",
            query=query,
            answer=keys[-1][1],
            tools=["step", "answer"],
            max_steps=len(keys) + 3,
            difficulty=difficulty,
            data=data,
        )

    def _start(self) -> str:
        self.keys = [int(v) for v in self.task.data["keys"]]
        self.found = [False] * len(self.keys)  # which key values a true claim has reached
        self.claims: list[str] = []  # the true claims so far, as written by the env
        return f"{self.task.query}\nWrite each step as step(expression = value), then answer(n)."

    def _act(self, action: Action) -> Outcome:
        w = self.weights
        if action.tool == "answer":
            given = parse_number(action.arg)
            if given == Fraction(self.task.answer):
                components = {"correct": w["correct"]}
                if all(self.found) and self.t == len(self.keys) + 1:
                    components["efficient"] = w["efficient"]
                return Outcome(f"{show(given)} is correct!", components, terminated=True, success=True)
            return Outcome(f"{show(given)} is wrong.", {"wrong": w["wrong"]}, terminated=True, success=False)

        lhs, rhs = self._split_claim(action.arg)
        value, claimed = evaluate(lhs), parse_number(rhs)
        if value != claimed:
            return Outcome(f"Wrong: {echo(lhs.strip())} is not {show(claimed)}.", {"step_wrong": w["step_wrong"]},
                           checks={"step_correct": False, "step_useful": False})
        claim = f"{echo(lhs.strip())} = {show(value)}"
        self.claims.append(claim)
        new = next((i for i, v in enumerate(self.keys) if not self.found[i] and v == value), None)
        if new is None:
            note = "a key step you already have" if value in self.keys else "but not a step toward the answer"
            return Outcome(f"Correct: {claim}, {note}.", {"step_ok": 0.0},
                           checks={"step_correct": True, "step_useful": False})
        self.found[new] = True
        pay = w["step_ok"] / len(self.keys)
        return Outcome(f"Correct: {claim}, a key step ({sum(self.found)} of {len(self.keys)} found).",
                       {"step_ok": pay}, checks={"step_correct": True, "step_useful": True})

    @staticmethod
    def _split_claim(arg: str) -> tuple[str, str]:
        text = arg.replace("==", "=")
        if text.count("=") != 1:
            raise ActionError("a step is one claim 'expression = value', e.g. step(4 * 5 = 20)")
        lhs, rhs = text.split("=")
        evaluate(lhs)  # refuses anything that is not arithmetic
        if not has_operator(lhs):
            raise ActionError("the left side must compute something, e.g. 4 * 5, not a bare number")
        return lhs, rhs

    def paraphrase(self, task: Task, rng: np.random.Generator) -> Task:
        data = task.data
        if data["kind"] == "word":
            query = WORD[data["template"]][0][1].format(**data["nums"])
        else:
            query = FRAMES[1 + int(rng.integers(len(FRAMES) - 1))].format(text=data["text"])
        return Task(**{**task.to_dict(), "query": query})

    def expert_action(self) -> str:
        for i, done in enumerate(self.found):
            if not done:
                return f"step({self.task.data['steps'][i]})"
        return f"answer({self.task.answer})"

    def imperfect_action(self, rng: np.random.Generator) -> str:
        """A lazy solver: reads expressions left to right (ignoring precedence and brackets)
        and stops word problems one step early. Its claims are true arithmetic, so every action
        is valid; on some forms ((a + b) * c, chains) the lazy reading is right anyway."""
        written = {c.replace(" ", "") for c in self.claims}
        for s in self.task.data["lazy_steps"]:
            if s.replace(" ", "") not in written:
                return f"step({s})"
        return f"answer({self.task.data['lazy_answer']})"
