"""TextEnv: the Gymnasium contract that every agentlab environment follows.

A text environment is a Gymnasium env whose observations and actions are strings:

    obs, info = env.reset(seed=0)                 # obs: the task, in words
    obs, reward, terminated, truncated, info = env.step("guess(8)")

Every action is one tool call, optionally preceded by free-form reasoning, in the env's
``action_format``: the kit's grammar (``"call"``, the default) or a chat template's native tool
call (``"tool_call"``), both parsed by `agentlab.envs.actions.parse_action`:

    think: the number is above 5, halve the range
    guess(8)

An action that does not parse, names an unknown tool, or breaks an environment constraint never
raises: the observation says what was wrong, what is allowed and, for a plain miss of the format
(``10`` for ``guess(10)``), exactly what to write; ``info["valid"]`` is False and the configured
format penalty is paid. ``info["call"]`` holds the parsed call, ``tool(argument)``, whatever the
format it arrived in.

``info`` always holds ``reward_components`` (name -> float, summing to ``reward``), ``valid``
and ``tool``; at the end of an episode also ``success``. ``info["checks"]`` holds the
step-level checks of that step (e.g. "the read after a search opened a useful document"),
which the metrics turn into step-level success rates.

A subclass supplies the task generator, the episode logic and the scripted expert:

    generate_task(rng, difficulty) -> Task
    _start() -> str                       # first observation for self.task
    _act(action: Action) -> Outcome       # apply a parsed, allowed action
    expert_action() -> str                # the scripted expert's next action
    _constraint(action) -> str | None     # optional: why an action is refused now

and ``action_tokens``, the per-turn token budget the expert's longest actions need (a policy
given fewer tokens could not finish them). How the tiny policy is taught an env before RL is
not part of the env: it is planned in `agentlab.warmup`.
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

# The action formats and their parser live in agentlab.envs.actions; imported here, where every env gets them.
from agentlab.envs.actions import (  # noqa: F401
    ECHO_CHARS, FORMATS, MAX_ACTION_CHARS, Action, ActionError, echo, near_miss, parse_action, render_action,
    tool_schemas)
from agentlab.tasks import Task, load_tasks

MAX_OBS_CHARS = 8000  # observations are clipped to this length

REWARD_MODES = ("process", "outcome")
# Kinds of reward component. In "outcome" mode, process components are recorded as 0.0.
COMPONENT_KINDS = ("outcome", "process", "format", "penalty")


class TextSpace(spaces.Text):
    """A `Text` space for free text: samples printable ASCII, contains any short string.

    Gymnasium's `Text` only contains strings over its charset. An agent may write anything,
    and observations quote documents and error messages, so membership is "a str no longer
    than max_length"; sampling still draws from printable characters.
    """

    def __init__(self, max_length: int, seed: int | None = None):
        super().__init__(max_length=max_length, min_length=0, charset=string.printable, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length


# ---------------------------------------------------------------------------- outcome of a step

@dataclass
class Outcome:
    """What `_act` returns: the observation, reward components and whether the episode ended."""

    obs: str
    components: dict[str, float] = field(default_factory=dict)
    terminated: bool = False
    success: bool = False
    checks: dict[str, bool] = field(default_factory=dict)


# ---------------------------------------------------------------------------- the env

class TextEnv(gym.Env):
    """Base class of agentlab's text environments (see the module docstring)."""

    metadata = {"render_modes": ["ansi", "human"], "render_fps": 4}

    # -- set by subclasses
    name: ClassVar[str] = "Base"
    description: ClassVar[str] = ""  # one paragraph for the system prompt
    tools: ClassVar[dict[str, str]] = {}  # tool name -> "tool(arg): what it does"
    default_weights: ClassVar[dict[str, float]] = {}  # reward component -> weight
    component_kinds: ClassVar[dict[str, str]] = {}  # reward component -> one of COMPONENT_KINDS
    default_max_steps: ClassVar[int] = 8
    max_difficulty: ClassVar[int] = 3
    example_action: ClassVar[str] = ""
    # Tokens per turn that the expert's longest actions take with the tiny tokenizer, with room to
    # spare; a profile whose per-turn budget is smaller is raised to this on the env (`turn_tokens`).
    action_tokens: ClassVar[int] = 24
    real_data: ClassVar[bool] = False  # True where tasks come from a real data set rather than a generator
    code_tools: ClassVar[tuple[str, ...]] = ()  # tools whose code may come as a fenced block after the tool's name
    bare_fence: ClassVar[str | None] = None  # the tool a fenced block with no tool name before it means (None: invalid)

    def __init__(
        self,
        tasks: str | list | None = None,
        split: str = "train",
        difficulty: int | list[int] | None = None,
        reward_mode: str = "process",
        weights: dict[str, float] | None = None,
        max_steps: int | None = None,
        render_mode: str | None = None,
        action_format: str = "call",
    ):
        if action_format not in FORMATS:
            raise ValueError(f"action_format must be one of {FORMATS}, got {action_format!r}")
        if reward_mode not in REWARD_MODES:
            raise ValueError(f"reward_mode must be one of {REWARD_MODES}, got {reward_mode!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        unknown = set(weights or {}) - set(self.default_weights)
        if unknown:
            raise ValueError(
                f"{self.name}: unknown reward weight(s) {sorted(unknown)}; known: {sorted(self.default_weights)}"
            )
        self.reward_mode = reward_mode
        self.action_format = action_format  # rollout sets the policy's own (`Policy.action_format`)
        self.render_mode = render_mode
        self.weights_override = dict(weights or {})
        self.max_steps_override = max_steps
        self.split = split
        self.difficulty = difficulty
        # A fixed task list (from a file or given directly) or None for the seeded generator.
        if isinstance(tasks, list):
            self.task_list: list[Task] | None = [t if isinstance(t, Task) else Task.from_dict(t) for t in tasks]
        elif tasks is not None:
            self.task_list = load_tasks(tasks, split=split)
        elif split != "train":
            self.task_list = load_tasks(self.task_file(), split=split)
        else:
            self.task_list = None
        self.observation_space = TextSpace(MAX_OBS_CHARS)
        self.action_space = TextSpace(MAX_ACTION_CHARS)
        self.task: Task | None = None
        self.history: list[tuple[str, str, float]] = []  # (action, observation, reward)
        self.t = 0
        self.done = True

    # -- files and prompts ------------------------------------------------------------------
    @classmethod
    def task_file(cls) -> str:
        from agentlab.tasks import tasks_dir

        return str(tasks_dir() / f"{cls.name.lower()}.json")

    @property
    def system_prompt(self) -> str:
        """The env's instructions in its action format. In ``"tool_call"`` the tools themselves are not
        listed: the chat template renders them from `tool_schemas` (``Policy.prompt_ids(tools=...)``)."""
        if self.action_format == "call":
            tools = "\n".join(f"- {desc}" for desc in self.tools.values())
            return (
                f"{self.description}\n"
                f"Tools:\n{tools}\n"
                f"Answer each turn with exactly one tool call, e.g. {self.example_action}"
            )
        prompt = f"{self.description}\nAnswer each turn with exactly one tool call, e.g.\n{self.example()}"
        if self.code_tools:
            fence = "```"
            prompt += (f"\nCode may instead follow the tool's name as a fenced block:\n{self.code_tools[-1]}\n"
                       f"{fence}python\n...\n{fence}")
            if self.bare_fence:
                prompt += f"\nA fenced block with no tool name before it is sent to {self.bare_fence}."
        return prompt

    def example(self) -> str:
        """The env's example action, written in its action format."""
        if self.action_format == "call":
            return self.example_action
        return render_action(parse_action(self.example_action, self.tools), self.action_format, self.tools)

    @classmethod
    def tool_schemas(cls) -> list[dict]:
        """The tools as JSON schemas, for a chat template's ``tools=`` (`agentlab.envs.actions.tool_schemas`)."""
        return tool_schemas(cls.tools)

    @property
    def weights(self) -> dict[str, float]:
        """Default weights, then the task file's, then this instance's (derived)."""
        w = dict(self.default_weights)
        if self.task is not None:
            w.update({k: v for k, v in self.task.reward_weights.items() if k in w})
        w.update(self.weights_override)
        return w

    @property
    def max_steps(self) -> int:
        if self.max_steps_override is not None:
            return self.max_steps_override
        if self.task is not None and self.task.max_steps:
            return self.task.max_steps
        return self.default_max_steps

    # -- gymnasium API ------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        options = options or {}
        if "task" in options:
            task = options["task"]
            self.task = task if isinstance(task, Task) else Task.from_dict(task)
        elif self.task_list is not None:
            self.task = self.task_list[int(self.np_random.integers(len(self.task_list)))]
        else:
            self.task = self.generate_task(self.np_random, self._pick_difficulty())
        self.history = []
        self.t = 0
        self.done = False
        self._last_action: str | None = None
        obs = self._clip(self._start())
        info = {"task_id": self.task.id, "difficulty": self.task.difficulty, "max_steps": self.max_steps}
        state = self.state_key()
        if state is not None:
            info["state"] = state
        return obs, info

    def step(self, action: str):
        if self.done:
            raise RuntimeError(f"{self.name}: the episode is over; call reset() before step()")
        self.t += 1
        w = self.weights
        tool = None
        try:
            parsed = parse_action(action, self.tools, self.action_format, self.code_tools, self.bare_fence)
            refusal = self._constraint(parsed)
        except ActionError as err:
            parsed, refusal = None, None
            fix = near_miss(action, self.tools, self.action_format)
            outcome = Outcome(self._invalid(f"Invalid action: {err}.", action, fix), {"format": w.get("format", 0.0)})
        if parsed is not None and refusal is not None:
            tool = parsed.tool
            outcome = Outcome(self._invalid(f"Not allowed now: {refusal}.", action), {"format": w.get("format", 0.0)})
        elif parsed is not None:
            tool = parsed.tool
            try:
                outcome = self._act(parsed)
            except ActionError as err:  # the argument did not make sense for this tool
                outcome = Outcome(self._invalid(f"Invalid action: {err}.", action), {"format": w.get("format", 0.0)})
                parsed = None
        valid = parsed is not None and refusal is None
        components = dict(outcome.components)
        if valid:
            key = f"{parsed.tool}({parsed.arg})"
            if key == self._last_action and "repeat" in w:
                components["repeat"] = components.get("repeat", 0.0) + w["repeat"]
            self._last_action = key
        if self.reward_mode == "outcome":
            components = {k: (0.0 if self.component_kinds.get(k) == "process" else v) for k, v in components.items()}
        components = {k: float(v) for k, v in components.items()}
        reward = float(sum(components.values()))
        terminated = bool(outcome.terminated)
        truncated = (not terminated) and self.t >= self.max_steps
        obs = outcome.obs
        if truncated:
            obs += f"\nOut of steps ({self.max_steps})."
        obs = self._clip(obs)
        info: dict[str, Any] = {
            "reward_components": components,
            "valid": valid,
            "tool": tool,
            "checks": dict(outcome.checks),
            "step": self.t,
        }
        if valid:
            info["call"] = str(parsed)
        state = self.state_key()
        if state is not None:
            info["state"] = state
        if terminated or truncated:
            self.done = True
            info["success"] = bool(outcome.success) if terminated else False
        self.history.append((action if isinstance(action, str) else repr(action), obs, reward))
        if self.render_mode == "human":
            print(self.render_text())
        return obs, reward, terminated, truncated, info

    def render(self):
        if self.render_mode == "ansi":
            return self.render_text()
        if self.render_mode == "human":
            print(self.render_text())
        return None

    def render_text(self) -> str:
        """The episode so far as plain text."""
        if self.task is None:
            return f"{self.name}: not started (call reset())"
        lines = [f"{self.name} task {self.task.id} (difficulty {self.task.difficulty}): {self.task.query}"]
        for i, (a, o, r) in enumerate(self.history, 1):
            lines.append(f"[{i}] > {echo(a, 200)}  (reward {r:+.2f})")
            lines.extend(f"      {line}" for line in o.splitlines())
        return "\n".join(lines)

    # -- helpers for subclasses -----------------------------------------------------------------
    def _pick_difficulty(self) -> int:
        d = self.difficulty
        if d is None:
            return 0
        if isinstance(d, (list, tuple)):
            return int(d[int(self.np_random.integers(len(d)))])
        return int(d)

    def _invalid(self, reason: str, action: Any, fix: str | None = None) -> str:
        tools = "; ".join(self.tools.values())
        fix = f"To send that, write exactly:\n{fix}\n" if fix else ""
        return f"{reason} You wrote: {echo(action)!s}\n{fix}Allowed: {tools}. Example: {self.example()}"

    @staticmethod
    def _clip(text: str) -> str:
        return text if len(text) <= MAX_OBS_CHARS else text[: MAX_OBS_CHARS - 4] + "\n..."

    # -- to be supplied by subclasses ---------------------------------------------------------
    def generate_task(self, rng: np.random.Generator, difficulty: int) -> Task:
        raise NotImplementedError

    def _start(self) -> str:
        raise NotImplementedError

    def _act(self, action: Action) -> Outcome:
        raise NotImplementedError

    def _constraint(self, action: Action) -> str | None:
        return None

    def state_key(self) -> str | None:
        """A canonical key for the state the env is in now, where the reply's text is not one (two
        replies can say the same of different states, or differ on the same one). Step-level
        credit (GiGPO) groups turns taken from equal keys. None: the reply's text serves."""
        return None

    def paraphrase(self, task: Task, rng: np.random.Generator) -> Task:
        """The same task asked in other words (for the robustness split)."""
        raise NotImplementedError

    def imperfect_action(self, rng: np.random.Generator) -> str:
        """A systematically biased but valid action, for imperfect SFT demonstrations."""
        return self.expert_action()

    def expert_action(self) -> str:
        raise NotImplementedError
