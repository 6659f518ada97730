"""agentlab inside TRL's `GRPOTrainer`, and agentlab trajectories as Hugging Face datasets.

agentlab trains on one process. To train on many GPUs, with DeepSpeed or FSDP, or with vLLM
generating, hand agentlab's environments and rewards to TRL. The env stays the judge: every
reward TRL sees is computed by an agentlab env from its own reward components.

    ds = build_dataset("agentlab/GuessNumber-v0")          # prompt (system + first observation) + task
    funcs = reward_funcs("agentlab/GuessNumber-v0")        # one function per reward component

    # single turn: TRL samples one action per prompt; the env scores it as the episode's first move
    GRPOTrainer(model, reward_funcs=funcs, train_dataset=ds, args=GRPOConfig(...))

    # multi-turn: agentlab plays whole episodes inside TRL; observations are masked out of the loss
    GRPOTrainer(model, reward_funcs=funcs, train_dataset=ds, args=GRPOConfig(...),
                rollout_func=EpisodeRollout("agentlab/GuessNumber-v0"))

    ds = to_dataset(trajectories); trajectories = from_dataset(ds)   # lossless (defined in agentlab.rollout)

What TRL 1.16 can express, read from its `grpo_trainer.py`:

- ``reward_funcs``: callables ``f(prompts, completions, completion_ids, **columns) -> list[float]``,
  one scalar per completion. TRL logs each as ``rewards/<function name>/mean`` and sums them
  (weights 1) into the reward that GRPO normalises within each group.
- ``rollout_func(prompts, trainer) -> {"prompt_ids", "completion_ids", "logprobs", ...}``:
  replaces TRL's generation. ``env_mask`` (1 = model token, 0 = env token) keeps env text out
  of the loss, and every other key reaches the reward functions as a column. `EpisodeRollout`
  uses it to run agentlab's batched multi-turn rollout with the model being trained.
- ``environment_factory``: a class whose public methods TRL offers as tools through the chat
  template's tool-calling format; TRL runs the tool loop itself (and can generate with vLLM).
  `tool_environment` builds such a class from an agentlab env. It needs a model and chat
  template that support tool calling (the tiny CPU model does not).

What TRL cannot express: per-turn rewards. Its advantage is one number per completion, spread
over every token of it; there is no per-turn return, no critic and no GAE. A multi-turn episode
therefore trains on its outcome: each reward function returns the episode's total of its
component (the sum of that component over turns). Turn-level credit assignment (PPO with GAE,
``agentlab.train`` with ``algo="ppo"``; GiGPO and the per-turn baseline, ``grpo.advantage``) stays
in agentlab.
"""

from __future__ import annotations

import functools
import json
import warnings
from contextlib import contextmanager
from typing import Any, Callable, Sequence

from agentlab.envs import env_class, full_id, make
from agentlab.policy import Policy

# the dataset round trip lives beside save_jsonl; imported here too, where TRL users look for it
from agentlab.rollout import (ACTION, PROMPT, SamplingSettings, Trajectory, from_dataset, rollout,  # noqa: F401
                              to_dataset)
from agentlab.tasks import Task, load_tasks

TASK_COLUMN = "task"  # dataset column: the task as JSON text (task data differ in shape between tasks)
TASK_KEY = "agentlab_task"  # the same JSON on the prompt's user message: TRL hands a rollout_func only prompts


# ---------------------------------------------------------------------------- the dataset of prompts

def task_prompt(env, task: Task | dict) -> list[dict]:
    """The chat an agentlab episode starts from: the env's system prompt, then its first observation."""
    obs, _ = env.reset(options={"task": task})
    return [{"role": "system", "content": env.system_prompt}, {"role": "user", "content": obs}]


def build_dataset(env_id: str, split: str = "train", limit: int | None = None, difficulty: int | None = None,
                  tasks: Sequence[Task | dict] | None = None, env_kwargs: dict | None = None):
    """A TRL training set from an agentlab task file: one row per task.

    Columns: ``prompt`` (conversational: system prompt + first observation, exactly what
    agentlab's rollout shows the policy), ``task`` (the task as JSON text; reward functions
    and environments read it), ``task_id`` and ``env_id``. The user message also carries the
    task under ``agentlab_task`` because TRL passes a ``rollout_func`` only the prompts; chat
    templates ignore keys they do not use. ``difficulty`` keeps one level (None: all); ``limit``
    then keeps the first N tasks; ``tasks`` replaces the task file's split.
    """
    from datasets import Dataset

    env_id = full_id(env_id)
    if tasks is None:
        tasks = load_tasks(env_class(env_id).task_file(), split)
    tasks = [t if isinstance(t, Task) else Task.from_dict(t) for t in tasks]
    tasks = [t for t in tasks if difficulty is None or t.difficulty == difficulty][:limit]
    if not tasks:
        raise ValueError(f"no tasks to build a dataset from (split {split!r}, difficulty {difficulty}, limit {limit})")
    env = make(env_id, **(env_kwargs or {}))
    rows = []
    for task in tasks:
        text = json.dumps(task.to_dict())
        prompt = [{**m, TASK_KEY: None} for m in task_prompt(env, task)]
        prompt[-1][TASK_KEY] = text
        rows.append({"prompt": prompt, TASK_COLUMN: text, "task_id": task.id, "env_id": env_id})
    return Dataset.from_list(rows)


def task_of_prompt(prompt: list[dict]) -> dict:
    """The task a `build_dataset` prompt carries (for a rollout, which sees only prompts)."""
    for message in prompt:
        if isinstance(message, dict) and message.get(TASK_KEY):
            return json.loads(message[TASK_KEY])
    raise ValueError(
        f"this prompt carries no agentlab task (no {TASK_KEY!r} key on any message). Build the training set "
        "with agentlab.integrations.trl.build_dataset(env_id) so that each prompt says which task it is."
    )


# ---------------------------------------------------------------------------- rewards

def completion_text(completion: Any) -> str:
    """The action in a TRL completion: a plain string, or the last assistant message's content."""
    if isinstance(completion, str):
        return completion
    for message in reversed(list(completion)):
        if message.get("role") == "assistant":
            content = message.get("content") or ""
            if isinstance(content, list):  # typed content blocks
                content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
            return content
    return ""


class EnvScorer:
    """Scores TRL completions with an agentlab env, one episode record per completion.

    A record is ``{"components": {name: total}, "success", "valid", "turns"}``. It comes from,
    in this order: the episode an `EpisodeRollout` played (``agentlab_components`` columns),
    the episode a `tool_environment` instance played (``environments``), or a replay: a fresh
    episode on the row's ``task`` whose first action is the completion. Replays are memoised,
    so the N component functions of one batch cost one replay per completion (``replays``
    counts them). A completion that did not end with ``eot_id`` (it hit the token limit) is
    replayed as an empty action, which pays the format penalty, as in agentlab's rollout.
    """

    def __init__(self, env_id: str, env_kwargs: dict | None = None, eot_id: int | None = None):
        self.env_id = full_id(env_id)
        self.env = make(self.env_id, **(env_kwargs or {}))
        self.components = list(env_class(self.env_id).default_weights)
        self.eot_id = eot_id
        self.replays = 0
        self._warned: set[str] = set()
        self._replay_cached = functools.lru_cache(maxsize=4096)(self._replay)

    def _replay(self, task_json: str, action: str) -> tuple:
        self.replays += 1
        self.env.reset(options={"task": json.loads(task_json)})
        _, _, terminated, _, info = self.env.step(action)
        return tuple(info["reward_components"].items()), bool(info["valid"]), bool(terminated and info.get("success"))

    def replay(self, task: str | dict, completion: Any, completion_ids: Sequence[int] | None = None) -> dict:
        """The record of one completion played as the first action on ``task``."""
        task_json = task if isinstance(task, str) else json.dumps(task)
        finished = self.eot_id is None or completion_ids is None or (
            len(completion_ids) > 0 and int(completion_ids[-1]) == self.eot_id)
        components, valid, success = self._replay_cached(task_json, completion_text(completion) if finished else "")
        return {"components": dict(components), "success": success, "valid": float(valid and finished), "turns": 1}

    def records(self, completions: list, completion_ids: list | None, columns: dict) -> list[dict]:
        """One episode record per completion, from whichever source the batch has (see the class)."""
        if columns.get("agentlab_components") is not None:
            return [{"components": c, "success": s, "valid": v, "turns": n} for c, s, v, n in zip(
                columns["agentlab_components"], columns["agentlab_success"], columns["agentlab_valid"],
                columns["agentlab_turns"], strict=True)]
        envs = columns.get("environments")
        if envs and all(isinstance(e, ToolEpisode) for e in envs):
            return [e.episode for e in envs]
        tasks = columns.get(TASK_COLUMN)
        if tasks is None:
            raise ValueError(
                f"the agentlab reward needs the {TASK_COLUMN!r} column to know each completion's task, and the "
                f"batch has only {sorted(columns)}. Build the dataset with build_dataset({self.env_id!r}) and "
                "keep GRPOConfig(remove_unused_columns=False) (the default)."
            )
        ids = completion_ids if completion_ids is not None else [None] * len(completions)
        out = [self.replay(t, c, i) for t, c, i in zip(tasks, completions, ids, strict=True)]
        self._check_names(out)
        return out

    def _check_names(self, records: list[dict]) -> None:
        unknown = {k for r in records for k in r["components"]} - set(self.components) - self._warned
        if unknown:
            self._warned |= unknown
            warnings.warn(f"{self.env_id} paid reward component(s) {sorted(unknown)} that are not in its "
                          "default_weights; no TRL reward function reports them")


def reward_funcs(env_id: str, env_kwargs: dict | None = None, eot_id: int | None = None) -> list[Callable]:
    """agentlab's verifiable reward as TRL ``reward_funcs``: one function per reward component.

    Each function is named after its component (TRL logs ``rewards/correct/mean`` and so on)
    and returns, per completion, that component's value; their sum is the env's reward, so
    keep TRL's ``reward_weights`` at 1 (the env's weights are already in the values). The
    first function also logs ``agentlab/success`` and ``agentlab/valid`` through TRL's
    ``log_metric``. All share one `EnvScorer`, reachable as ``funcs[0].scorer``.
    """
    scorer = EnvScorer(env_id, env_kwargs, eot_id)
    return [_component_reward(scorer, name, log_stats=(i == 0)) for i, name in enumerate(scorer.components)]


def _component_reward(scorer: EnvScorer, name: str, log_stats: bool) -> Callable:
    def reward(prompts, completions, completion_ids=None, **columns) -> list[float]:
        records = scorer.records(completions, completion_ids, columns)
        log_metric = columns.get("log_metric")
        if log_stats and log_metric is not None and records:
            log_metric("agentlab/success", sum(r["success"] for r in records) / len(records))
            log_metric("agentlab/valid", sum(r["valid"] for r in records) / len(records))
        return [float(r["components"].get(name, 0.0)) for r in records]

    reward.__name__ = reward.__qualname__ = name
    reward.scorer = scorer
    return reward


# ---------------------------------------------------------------------------- multi-turn: rollout_func

def split_trajectory(traj: Trajectory) -> dict:
    """One agentlab episode as a TRL sample: prompt tokens, then the completion = every action and
    the observations between them (env_mask 0), ending with the last action's tokens."""
    n_prompt = next((i for i, r in enumerate(traj.roles) if r != PROMPT), len(traj.roles))
    actions = [i for i, r in enumerate(traj.roles) if r == ACTION]
    if not actions:
        raise ValueError(f"trajectory {traj.task_id!r} has no action tokens; there is nothing to train on")
    end = actions[-1] + 1  # the env's reply to the last action is not part of the sample
    return {
        "prompt_ids": list(traj.token_ids[:n_prompt]),
        "completion_ids": list(traj.token_ids[n_prompt:end]),
        "logprobs": list(traj.logprobs[n_prompt:end]),
        "env_mask": [int(r == ACTION) for r in traj.roles[n_prompt:end]],
    }


def episode_batch(trajs: Sequence[Trajectory]) -> dict[str, list]:
    """What a TRL ``rollout_func`` returns for these episodes: token lists plus ``agentlab_*``
    columns (component totals, success, valid-action rate, turns) for `reward_funcs`."""
    samples = [split_trajectory(t) for t in trajs]
    out = {key: [s[key] for s in samples] for key in ("prompt_ids", "completion_ids", "logprobs", "env_mask")}
    out["agentlab_components"] = [t.component_totals() for t in trajs]  # the outcome TRL can train on
    out["agentlab_success"] = [bool(t.success) for t in trajs]
    out["agentlab_valid"] = [sum(bool(i.get("valid")) for i in t.infos) / max(1, t.num_turns) for t in trajs]
    out["agentlab_turns"] = [t.num_turns for t in trajs]
    return out


@contextmanager
def _generation_model(trainer):
    """The trainer's model, unwrapped for generation (DDP / DeepSpeed / FSDP), in eval mode and without
    activation checkpointing (sampling needs its KV cache)."""
    from trl.distributed import DistributedBackend

    if DistributedBackend(trainer.accelerator).is_zero3:  # sharded weights: TRL's helper gathers them
        from trl.models import unwrap_model_for_generation

        unwrapped = unwrap_model_for_generation(
            trainer.model_wrapped, trainer.accelerator, gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
            gradient_checkpointing_kwargs=trainer.args.activation_checkpointing_kwargs)
    else:  # the same steps by transformers' current names (TRL's helper reads a deprecated one and warns)
        unwrapped = _unwrapped(trainer)
    with unwrapped as model:
        was_training = model.training
        model.eval()
        try:
            yield model
        finally:
            model.train(was_training)


@contextmanager
def _unwrapped(trainer):
    model = trainer.accelerator.unwrap_model(trainer.model_wrapped)
    checkpointing = model.is_activation_checkpointing
    if checkpointing:
        model.activation_checkpointing_disable()
    try:
        yield model
    finally:
        if checkpointing:
            model.activation_checkpointing_enable(trainer.args.activation_checkpointing_kwargs)


@contextmanager
def trl_deprecations_hidden():
    """TRL 1.16 (the newest) unwraps the model for its own generation (``mode="single"``) through
    transformers' deprecated ``is_gradient_checkpointing``, ``gradient_checkpointing_disable`` and
    ``_enable``: three FutureWarnings every step that no argument avoids. Inside this block exactly
    those are hidden; agentlab's own rollout (`EpisodeRollout`) uses the current names."""
    with warnings.catch_warnings():
        for name in ("is_gradient_checkpointing", "gradient_checkpointing_disable", "gradient_checkpointing_enable"):
            warnings.filterwarnings("ignore", message=f"`{name}` is deprecated", category=FutureWarning)
        yield


def turn_tokens(env_id: str, max_new_tokens: int | None = None) -> int:
    """Tokens per turn: ``max_new_tokens``, or the env's ``action_tokens`` (which fit its expert's
    longest action) when it is None."""
    return max_new_tokens or env_class(env_id).action_tokens


class EpisodeRollout:
    """A TRL ``rollout_func`` that plays whole agentlab episodes with the model being trained.

    TRL calls it with the prompts of this process's batch (each repeated ``num_generations``
    times, in groups) and the trainer. For each prompt it reads the task (`task_of_prompt`),
    runs agentlab's batched multi-turn `rollout` with TRL's temperature and top-p, and returns
    one sample per episode: the completion holds every action and the observations between
    them, with ``env_mask`` 0 on observation tokens so only the policy's tokens carry loss.
    Token provenance is agentlab's: action ids exactly as sampled, logprobs from sampling.

    ``max_new_tokens`` caps each turn (None: the env's ``action_tokens``, which fits its expert's
    longest action); the whole completion is kept within the trainer's
    ``max_completion_length`` (an episode that would pass it ends as truncated). The episodes
    of the last call are kept in ``last_trajectories`` (e.g. for `to_dataset`).

    Rewards: see the module docstring. TRL gets one scalar per episode, the sum of its
    per-turn rewards; the per-turn values survive only in ``last_trajectories``.
    Generation uses the training model, not vLLM: with ``use_vllm=True`` this raises.
    """

    def __init__(self, env_id: str, env_kwargs: dict | None = None, max_new_tokens: int | None = None):
        self.env_id = full_id(env_id)
        self.env_kwargs = dict(env_kwargs or {})
        self.max_new_tokens = turn_tokens(self.env_id, max_new_tokens)
        self.last_trajectories: list[Trajectory] = []
        self.played: list[dict] = []  # every episode this process played: task, return, success

    def __call__(self, prompts: list, trainer) -> dict[str, list]:
        if getattr(trainer, "use_vllm", False):
            raise ValueError(
                "EpisodeRollout samples with the training model itself and cannot use vLLM; set "
                "GRPOConfig(use_vllm=False), or use tool_environment(...) with environment_factory, which TRL "
                "drives with vLLM."
            )
        tasks = [task_of_prompt(p) for p in prompts]
        envs = [make(self.env_id, **self.env_kwargs) for _ in tasks]
        settings = SamplingSettings(temperature=trainer.temperature, top_p=trainer.top_p,
                                    max_new_tokens=self.max_new_tokens)
        tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
        try:
            with _generation_model(trainer) as model:
                policy = Policy(model, tokenizer)
                prompt_len = max(len(policy.encode(policy.render(
                    [{"role": m["role"], "content": m["content"]} for m in p], add_generation_prompt=True)))
                    for p in prompts)
                limit = getattr(model.config, "max_position_embeddings", None) or 10**9
                budget = min(limit, prompt_len + trainer.max_completion_length)
                self.last_trajectories = rollout(envs, policy, settings, tasks=tasks, max_context=budget)
        finally:
            for env in envs:  # an env served over OpenEnv holds a session until closed
                env.close()
        self.played += [{"task_id": t.task_id, "return": t.total_reward, "success": t.success}
                        for t in self.last_trajectories]
        return episode_batch(self.last_trajectories)


# ---------------------------------------------------------------------------- multi-turn: environment_factory

class ToolEpisode:
    """Base of the classes `tool_environment` builds: one agentlab episode driven by TRL tool calls.

    TRL offers every public method of the class as a tool, so only ``reset`` and the env's
    tools are public; the episode so far is the ``episode`` property (properties are not tools).
    """

    _env_id: str = ""
    _env_kwargs: dict = {}

    def __init__(self):
        self._env = make(self._env_id, **self._env_kwargs)
        self._start_episode()

    def _start_episode(self) -> None:
        self._totals: dict[str, float] = {}
        self._turns, self._valid, self._success, self._done = 0, 0, False, True

    def reset(self, task: str | dict | None = None, **row) -> None:
        """Start an episode on the row's task; the prompt already shows the first observation."""
        if task is None:
            raise ValueError(f"{type(self).__name__}.reset needs the {TASK_COLUMN!r} column of the row; build the "
                             "dataset with agentlab.integrations.trl.build_dataset")
        self._env.reset(options={"task": json.loads(task) if isinstance(task, str) else task})
        self._start_episode()
        self._done = False
        return None

    def _act(self, action: str) -> str:
        if self._done:
            return "The episode is over: give your final reply without calling a tool."
        obs, _, terminated, truncated, info = self._env.step(action)
        for k, v in info["reward_components"].items():
            self._totals[k] = self._totals.get(k, 0.0) + float(v)
        self._turns += 1
        self._valid += int(bool(info["valid"]))
        self._done = bool(terminated or truncated)
        self._success = bool(terminated and info.get("success"))
        return obs

    @property
    def episode(self) -> dict:
        """The episode record `EnvScorer` reads: component totals, success, valid-action rate, turns."""
        return {"components": dict(self._totals), "success": self._success,
                "valid": self._valid / max(1, self._turns), "turns": self._turns}


def _tool_method(name: str, description: str) -> Callable:
    def tool(self, arg: str) -> str:
        return self._act(f"{name}({arg})")

    what = description.split(":", 1)[-1].strip() or f"call {name}"
    tool.__name__ = tool.__qualname__ = name
    tool.__doc__ = (f"{what[0].upper()}{what[1:]}.\n\nArgs:\n    arg: the argument of {name}(...), as text\n\n"
                    "Returns:\n    The environment's reply.")
    return tool


def tool_environment(env_id: str, env_kwargs: dict | None = None) -> type[ToolEpisode]:
    """A class for TRL's ``environment_factory``: the env's tools as methods, e.g. ``guess(arg)``.

    TRL resets one instance per rollout with the dataset row (``reset(task=..., ...)``), lets
    the model call the tools until it answers without one, and passes the instances to the
    reward functions, where `reward_funcs` reads each episode's component totals. The class
    defines no ``get_reward``: that would add the episode return a second time. Needs a chat
    template with tool calling (an instruct model); agentlab's ``think:`` text is not seen.
    """
    cls = env_class(env_id)
    namespace: dict[str, Any] = {"_env_id": full_id(env_id), "_env_kwargs": dict(env_kwargs or {}),
                                 "__doc__": f"{cls.name} as TRL tools. {cls.description}"}
    for name, description in cls.tools.items():
        namespace[name] = _tool_method(name, description)
    return type(f"{cls.name}Tools", (ToolEpisode,), namespace)
