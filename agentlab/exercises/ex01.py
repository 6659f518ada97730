"""Exercises of notebook 01 (text environments): the episode loop, a task entry, a registration."""

from __future__ import annotations

import gymnasium as gym

from agentlab.envs import make
from agentlab.exercises import exercise
from agentlab.tasks import TaskFileError, validate_task

# ---------------------------------------------------------------------------- 01.run_episode


def _reference_episode(env, policy, seed):
    obs, _ = env.reset(seed=seed)
    total, turns = 0.0, 0
    while True:
        obs, reward, terminated, truncated, info = env.step(policy(obs))
        total, turns = total + reward, turns + 1
        if terminated or truncated:
            return total, turns, bool(info["success"])


def _loop_until_terminated(env, policy, seed=None):
    obs, _ = env.reset(seed=seed)
    total, turns, terminated = 0.0, 0, False
    while not terminated:  # forgets truncation: steps past the step limit
        obs, reward, terminated, truncated, info = env.step(policy(obs))
        total, turns = total + reward, turns + 1
    return total, turns, bool(info["success"])


def _last_reward_only(env, policy, seed=None):
    obs, _ = env.reset(seed=seed)
    turns = 0
    while True:
        obs, reward, terminated, truncated, info = env.step(policy(obs))
        turns += 1
        if terminated or truncated:
            return reward, turns, bool(info["success"])


def _success_is_terminated(env, policy, seed=None):
    obs, _ = env.reset(seed=seed)
    total, turns = 0.0, 0
    while True:
        obs, reward, terminated, truncated, info = env.step(policy(obs))
        total, turns = total + reward, turns + 1
        if terminated or truncated:
            return total, turns, bool(terminated)


def _episode_cases():
    """(description, env factory, policy factory, seed): an ending of each kind."""
    def guess_env():
        return make("agentlab/GuessNumber-v0")

    def web_env():
        return make("agentlab/WebSearch-v0", require_evidence=False)

    return [
        ("GuessNumber with the scripted expert (ends by success)", guess_env, lambda env: lambda obs: env.expert_action(), 3),
        ("GuessNumber always guessing 1 (ends at the step limit)", guess_env, lambda env: lambda obs: "guess(1)", 0),
        ("GuessNumber with a malformed action every turn", guess_env, lambda env: lambda obs: "eight", 1),
        ("WebSearch finishing at once with a wrong answer (ends by failure)", web_env,
         lambda env: lambda obs: "finish(no idea)", 2),
    ]


@exercise(
    "01.run_episode",
    "write run_episode(env, policy, seed=None) -> (total_reward, turns, success): reset, then step with "
    "policy(obs) until the episode ends",
    wrong=[_loop_until_terminated, _last_reward_only, _success_is_terminated],
)
def check_run_episode(run_episode) -> str | None:
    for what, new_env, new_policy, seed in _episode_cases():
        env = new_env()
        want = _reference_episode(env, new_policy(env), seed)
        env = new_env()
        try:
            got = run_episode(env, new_policy(env), seed)
        except RuntimeError as err:
            if "episode is over" in str(err):
                return (f"on '{what}' your loop kept stepping after the episode ended. An episode ends when "
                        "terminated OR truncated is True: truncated marks the step limit.")
            raise
        if not isinstance(got, tuple) or len(got) != 3:
            return f"return a tuple (total_reward, turns, success), got {got!r}"
        total, turns, success = got
        if turns != want[1]:
            return f"on '{what}' the episode lasts {want[1]} turns, you counted {turns}."
        if abs(float(total) - want[0]) > 1e-9:
            return (f"on '{what}' the total reward is {want[0]:+.3f}, you returned {float(total):+.3f}: "
                    "add up the reward of every step, not only the last one.")
        if bool(success) != want[2]:
            return (f"on '{what}' success is {want[2]}, you returned {bool(success)}. terminated only says the "
                    "episode ended by itself (a wrong finish(...) terminates too): read info['success'].")
    return None


# ---------------------------------------------------------------------------- 01.make_task


def _task_without_type():
    return {"id": "my-task", "query": "Find the hidden number between 1 and 16.", "answer": 11, "max_steps": 4,
            "reward_weights": {"correct": 2.0}, "data": {"lo": 1, "hi": 16}}


def _task_with_unknown_weight():
    return {"id": "my-task", "type": "guess", "query": "Find the hidden number between 1 and 16.", "answer": 11,
            "max_steps": 4, "reward_weights": {"win": 2.0}, "data": {"lo": 1, "hi": 16}}


def _task_without_data():
    return {"id": "my-task", "type": "guess", "query": "Find the hidden number between 1 and 16.", "answer": 11,
            "max_steps": 4, "reward_weights": {"correct": 2.0}}


def _task_with_text_steps():
    return {"id": "my-task", "type": "guess", "query": "Find the hidden number between 1 and 16.", "answer": 11,
            "max_steps": "4", "reward_weights": {"correct": 2.0}, "data": {"lo": 1, "hi": 16}}


@exercise(
    "01.make_task",
    "write make_task() -> dict: a GuessNumber task entry, hidden number 11 in 1..16, at most 4 guesses, "
    "a correct guess worth 2.0",
    wrong=[_task_without_type, _task_with_unknown_weight, _task_without_data, _task_with_text_steps],
)
def check_make_task(make_task) -> str | None:
    entry = make_task()
    try:
        validate_task(entry)
    except TaskFileError as err:
        return f"load_tasks would reject this entry: {err}"
    env = make("agentlab/GuessNumber-v0")
    known = set(env.default_weights)
    unknown = set(entry.get("reward_weights") or {}) - known
    if unknown:
        return (f"reward_weights names {sorted(unknown)}, which GuessNumber does not have, so it is ignored; "
                f"its components are {sorted(known)}.")
    if entry.get("answer") != 11:
        return f"the hidden number (the task's 'answer') should be 11, got {entry.get('answer')!r}."
    try:
        _, info = env.reset(options={"task": entry})
    except (KeyError, TypeError) as err:
        return (f"the env could not start this task ({type(err).__name__}: {err}); GuessNumber reads its range "
                "from data: {'lo': 1, 'hi': 16}.")
    if (env.lo, env.hi) != (1, 16):
        return f"the range should be 1..16, the task gives {env.lo}..{env.hi} (data['lo'], data['hi'])."
    if info["max_steps"] != 4:
        return f"the episode should allow 4 guesses, it allows {info['max_steps']} (field 'max_steps')."
    while True:
        _, reward, terminated, truncated, info = env.step(env.expert_action())
        if terminated or truncated:
            break
    if not info["success"] or info["reward_components"].get("correct") != 2.0:
        return (f"the expert's winning guess earned correct={info['reward_components'].get('correct')}; "
                "set reward_weights to {'correct': 2.0}.")
    return None


# ---------------------------------------------------------------------------- 01.register_variant


def _register_default():
    if "learner/WebSearchDefault-v0" not in gym.registry:  # forgets kwargs: the constraint stays on
        gym.register(id="learner/WebSearchDefault-v0", entry_point="agentlab.envs.websearch:WebSearchEnv")
    return "learner/WebSearchDefault-v0"


def _register_nothing():
    return "learner/NeverRegistered-v0"


@exercise(
    "01.register_variant",
    "write register_variant() -> str: register a Gymnasium id for WebSearch with require_evidence=False "
    "and return the id",
    wrong=[_register_default, _register_nothing],
)
def check_register_variant(register_variant) -> str | None:
    env_id = register_variant()
    if not isinstance(env_id, str):
        return f"return the id you registered, as a string; got {env_id!r}."
    if env_id not in gym.registry:
        return f"{env_id!r} is not in gymnasium.registry: call gymnasium.register(id=..., entry_point=..., kwargs=...)."
    env = gym.make(env_id)
    base = env.unwrapped
    if type(base).__name__ != "WebSearchEnv":
        return f"{env_id!r} builds a {type(base).__name__}; point entry_point at agentlab.envs.websearch:WebSearchEnv."
    if base.require_evidence:
        return ("the env still has require_evidence=True: pass kwargs={'require_evidence': False} to "
                "gymnasium.register so the variant differs only in its registration.")
    env.reset(seed=0)
    _, _, terminated, _, info = env.step("finish(a guess)")
    if not (terminated and info["valid"]):
        return "an immediate finish(...) should end the episode in your variant, but it was refused."
    return None
