"""Exercises of notebook 01 (text environments): the episode loop, a task entry, a registration."""

from __future__ import annotations

import gymnasium as gym

from agentlab.envs import make
from agentlab.exercises import Feedback, exercise, first_mismatch
from agentlab.rollout import play
from agentlab.tasks import TaskFileError, validate_task

# ---------------------------------------------------------------------------- 01.run_episode


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
    """(description, env factory, act(env) -> action, seed): an ending of each kind. The kit's `play`
    calls act(env); the learner's loop gets policy(obs) = act(env), as no policy here reads obs."""
    def guess_env():
        return make("agentlab/GuessNumber-v0")

    def web_env():
        return make("agentlab/WebSearch-v0", require_evidence=False)

    return [
        ("GuessNumber with the scripted expert (ends by success)", guess_env, lambda env: env.expert_action(), 3),
        ("GuessNumber always guessing 1 (ends at the step limit)", guess_env, lambda env: "guess(1)", 0),
        ("GuessNumber with a malformed action every turn", guess_env, lambda env: "eight", 1),
        ("WebSearch finishing at once with a wrong answer (ends by failure)", web_env,
         lambda env: "finish(no idea)", 2),
    ]


def _reference_episode(case) -> tuple[float, int, bool]:
    """The kit's own episode loop, `agentlab.rollout.play`."""
    _, new_env, act, seed = case
    traj = play(new_env(), act, seed=seed)
    return traj.total_reward, traj.num_turns, traj.success


@exercise("01.run_episode", wrong=[_loop_until_terminated, _last_reward_only, _success_is_terminated])
def check_run_episode(run_episode) -> str | None:
    """write run_episode(env, policy, seed=None) -> (total_reward, turns, success): reset, then step with
    policy(obs) until the episode ends"""
    def answer(case):
        what, new_env, act, seed = case
        env = new_env()
        try:
            return run_episode(env, lambda obs: act(env), seed)
        except RuntimeError as err:
            if "episode is over" in str(err):
                raise Feedback(f"on '{what}' your loop kept stepping after the episode ended. An episode ends when "
                               "terminated OR truncated is True: truncated marks the step limit.") from err
            raise

    return first_mismatch(_episode_cases(), answer, _reference_episode, _same_episode, _explain_episode)


def _same_episode(got, want) -> bool:
    return (isinstance(got, tuple) and len(got) == 3 and got[1] == want[1] and abs(float(got[0]) - want[0]) <= 1e-9
            and bool(got[2]) == want[2])


def _explain_episode(case, got, want) -> str:
    what = case[0]
    if not isinstance(got, tuple) or len(got) != 3:
        return f"return a tuple (total_reward, turns, success), got {got!r}"
    total, turns, success = got
    if turns != want[1]:
        return f"on '{what}' the episode lasts {want[1]} turns, you counted {turns}."
    if abs(float(total) - want[0]) > 1e-9:
        return (f"on '{what}' the total reward is {want[0]:+.3f}, you returned {float(total):+.3f}: "
                "add up the reward of every step, not only the last one.")
    return (f"on '{what}' success is {want[2]}, you returned {bool(success)}. terminated only says the "
            "episode ended by itself (a wrong finish(...) terminates too): read info['success'].")


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


@exercise("01.make_task", wrong=[_task_without_type, _task_with_unknown_weight, _task_without_data, _task_with_text_steps])
def check_make_task(make_task) -> str | None:
    """write make_task() -> dict: a GuessNumber task entry, hidden number 11 in 1..16, at most 4 guesses,
    a correct guess worth 2.0"""
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


@exercise("01.register_variant", wrong=[_register_default, _register_nothing])
def check_register_variant(register_variant) -> str | None:
    """write register_variant() -> str: register a Gymnasium id for WebSearch with require_evidence=False
    and return the id"""
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
