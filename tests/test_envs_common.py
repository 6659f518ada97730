"""The contract every env keeps (docs/design.md): Gymnasium API, info keys, experts, fuzzing."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentlab
from agentlab.envs import ENV_IDS, env_class
from agentlab.tasks import load_tasks


def available_ids():
    ids = []
    for env_id in ENV_IDS:
        try:
            env_class(env_id)
        except (ImportError, AttributeError):  # an env still being written is reported, not hidden
            continue
        ids.append(env_id)
    return ids


IDS = available_ids()


def test_all_seven_envs_exist():
    assert IDS == ENV_IDS, f"missing envs: {sorted(set(ENV_IDS) - set(IDS))}"


@pytest.mark.parametrize("env_id", IDS)
def test_gym_make_and_check_env(env_id):
    env = gym.make(env_id)
    check_env(env.unwrapped, skip_render_check=False)
    obs, info = env.reset(seed=3)
    assert isinstance(obs, str) and obs
    assert env.unwrapped.system_prompt


@pytest.mark.parametrize("env_id", IDS)
def test_info_keys_and_components_sum(env_id):
    env = agentlab.make(env_id)
    rng = np.random.default_rng(0)
    for seed in range(5):
        env.reset(seed=seed)
        done = False
        while not done:
            action = env.expert_action() if rng.random() < 0.7 else "nonsense((("
            _, reward, term, trunc, info = env.step(action)
            assert {"reward_components", "valid", "tool"} <= set(info)
            assert abs(sum(info["reward_components"].values()) - reward) < 1e-9
            done = term or trunc
        assert isinstance(info["success"], bool)


@pytest.mark.parametrize("env_id", IDS)
def test_expert_solves_eval_split(env_id):
    tasks = load_tasks(env_class(env_id).task_file(), split="eval")
    env = agentlab.make(env_id)
    wins = 0
    for i, task in enumerate(tasks):
        env.reset(seed=i, options={"task": task})
        done = False
        while not done:
            _, _, term, trunc, info = env.step(env.expert_action())
            done = term or trunc
        wins += info["success"]
    assert wins / len(tasks) >= 0.99, f"expert success {wins}/{len(tasks)}"


@pytest.mark.parametrize("env_id", IDS)
def test_every_difficulty_level_generates(env_id):
    env = agentlab.make(env_id)
    for d in range(env.max_difficulty + 1):
        task = env.generate_task(np.random.default_rng(d), d)
        assert task.difficulty == d
        env.reset(seed=0, options={"task": task})


@pytest.mark.parametrize("env_id", IDS)
def test_task_file_has_three_splits(env_id):
    for split in ("train", "eval", "paraphrase"):
        assert load_tasks(env_class(env_id).task_file(), split=split)
    def content(t):
        return (t.query, repr(t.answer), repr(sorted(t.data.items())))

    train = {content(t) for t in load_tasks(env_class(env_id).task_file(), "train")}
    evals = [content(t) for t in load_tasks(env_class(env_id).task_file(), "eval")]
    held_out = sum(c not in train for c in evals)
    assert held_out >= 0.5 * len(evals), f"only {held_out}/{len(evals)} eval tasks are held out"


@pytest.mark.parametrize("env_id", IDS)
def test_outcome_mode_pays_no_process_reward(env_id):
    env = agentlab.make(env_id, reward_mode="outcome")
    env.reset(seed=1)
    done = False
    while not done:
        _, _, term, trunc, info = env.step(env.expert_action())
        for name, value in info["reward_components"].items():
            if env.component_kinds.get(name) == "process":
                assert value == 0.0
        done = term or trunc


HOSTILE = st.one_of(
    st.text(max_size=300),
    st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
    st.just(""),
    st.just("x" * 10_000),
    st.sampled_from(["(((", ")))", "guess(", "search()", "finish(", "read(-1)", "'; DROP TABLE x; --",
                     "__import__('os').system('ls')", "think:\n", "run(\x00)", "move(up", "ask()", "\u202e\u0000"]),
    st.builds(lambda tool, arg: f"{tool}({arg})",
              st.sampled_from(["guess", "move", "search", "read", "finish", "schema", "query", "answer",
                               "run", "submit", "step", "ask", "act", "unknown", "GUESS"]),
              st.text(max_size=80)),
)


@pytest.mark.parametrize("env_id", IDS)
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=st.lists(HOSTILE, min_size=1, max_size=8))  # ~2,000 strings per env
def test_fuzz_never_raises(env_id, actions):
    env = agentlab.make(env_id)
    env.reset(seed=0)
    for action in actions:
        obs, reward, term, trunc, info = env.step(action)
        assert isinstance(obs, str) and obs
        assert np.isfinite(reward)
        if not info["valid"]:
            assert "Invalid action" in obs or "Not allowed" in obs
            assert reward <= 0
        if term or trunc:
            env.reset(seed=1)
