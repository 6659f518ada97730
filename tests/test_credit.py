"""Per-turn credit without a critic: GiGPO's step groups, the unbiased per-turn baseline and the
biased per-turn-index normalisation, each against a naive loop, a hand-computed batch, and (for
the two baselines) the exact expected gradient of a small game where the policy decides when to stop."""

import math

import numpy as np
import pytest
import torch

from agentlab.advantages import (
    gigpo_advantages,
    group_advantages,
    step_group_advantages,
    turn_baseline_advantages,
    turn_index_advantages,
)
from agentlab.algos import grpo
from agentlab.envs import make
from agentlab.phenomena import stop_or_go_gradient
from agentlab.rollout import Trajectory, play


def random_batch(seed: int, groups: int = 3, group_size: int = 4, max_turns: int = 5, n_states: int = 3):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, max_turns + 1, size=groups * group_size)
    T = int(lengths.max())
    rewards = torch.tensor(rng.normal(size=(len(lengths), T)), dtype=torch.float32)
    mask = torch.tensor([[t < n for t in range(T)] for n in lengths])
    states = [[f"s{rng.integers(n_states)}" for _ in range(n)] for n in lengths]
    return rewards, mask, states, group_size


def naive_returns(r: list[float], gamma: float) -> list[float]:
    out, acc = [], 0.0
    for x in reversed(r):
        acc = x + gamma * acc
        out.append(acc)
    return out[::-1]


def rows_and_returns(rewards, mask, gamma):
    """Each row's real rewards as a list, and their returns by the definition."""
    B, T = rewards.shape
    rows = [[float(rewards[b, t]) for t in range(T) if mask[b, t]] for b in range(B)]
    return rows, [naive_returns(r, gamma) for r in rows]


def naive_step_groups(rewards, mask, states, G, gamma, scale):
    B, T = rewards.shape
    rows, ret = rows_and_returns(rewards, mask, gamma)
    out = torch.zeros(B, T)
    for b in range(B):
        for t in range(len(rows[b])):
            group = range(b - b % G, b - b % G + G)
            peers = [ret[j][k] for j in group for k in range(len(rows[j])) if states[j][k] == states[b][t]]
            if len(peers) < 2:
                continue
            mean = sum(peers) / len(peers)
            std = math.sqrt(sum((p - mean) ** 2 for p in peers) / len(peers))
            out[b, t] = (ret[b][t] - mean) / (std + 1e-6 if scale == "group" else 1.0)
    return out


def naive_turn_baseline(rewards, mask, G, gamma):
    B, T = rewards.shape
    rows, ret = rows_and_returns(rewards, mask, gamma)
    out = torch.zeros(B, T)
    for b in range(B):
        for t in range(len(rows[b])):
            others = [ret[j][t] for j in range(b - b % G, b - b % G + G) if j != b and len(rows[j]) > t]
            out[b, t] = ret[b][t] - (sum(others) / len(others) if others else 0.0)
    return out


def naive_turn_index(rewards, mask, G, gamma):
    B, T = rewards.shape
    rows = [[float(rewards[b, t]) for t in range(T) if mask[b, t]] for b in range(B)]
    out = torch.zeros(B, T)
    for b in range(B):
        group = range(b - b % G, b - b % G + G)
        normed = []
        for k in range(len(rows[b])):
            at_k = [rows[j][k] for j in group if len(rows[j]) > k]
            normed.append(rows[b][k] - sum(at_k) / len(at_k))
        for t, v in enumerate(naive_returns(normed, gamma)):
            out[b, t] = v
    return out


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("scale", ["group", "none"])
def test_step_groups_match_a_naive_loop(seed, scale):
    rewards, mask, states, G = random_batch(seed)
    got = step_group_advantages(rewards, mask, states, G, gamma=0.9, scale=scale)
    torch.testing.assert_close(got, naive_step_groups(rewards, mask, states, G, 0.9, scale), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("seed", range(5))
def test_the_turn_baselines_match_naive_loops(seed):
    rewards, mask, _, G = random_batch(seed)
    torch.testing.assert_close(turn_baseline_advantages(rewards, mask, G, 0.9, scale="none"),
                               naive_turn_baseline(rewards, mask, G, 0.9), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(turn_index_advantages(rewards, mask, G, 0.9, scale="none"),
                               naive_turn_index(rewards, mask, G, 0.9), atol=1e-5, rtol=1e-5)
    scaled = turn_baseline_advantages(rewards, mask, G, 0.9, scale="batch")
    assert abs(float(scaled[mask].std(unbiased=False)) - 1.0) < 1e-3 and (scaled[~mask] == 0).all()


def test_gigpo_is_the_episode_advantage_plus_the_step_one():
    rewards, mask, states, G = random_batch(7)
    episode = group_advantages(torch.where(mask, rewards, 0.0).sum(1), G)
    step = step_group_advantages(rewards, mask, states, G, gamma=0.95)
    got = gigpo_advantages(rewards, mask, states, G, gamma=0.95, step_weight=0.5)
    torch.testing.assert_close(got, torch.where(mask, episode[:, None] + 0.5 * step, 0.0))
    # every state seen once: no step groups, so GiGPO is trajectory GRPO on each turn
    unique = [[f"{b}-{t}" for t in range(len(s))] for b, s in enumerate(states)]
    torch.testing.assert_close(gigpo_advantages(rewards, mask, unique, G), torch.where(mask, episode[:, None], 0.0))


def test_a_hand_computed_group():
    # One group of three: A stops at once and wins 1; B takes a probe (0.2) then wins 1;
    # C takes two probes (0.2, 0.2) then fails (0). gamma = 1.
    r = torch.tensor([[1.0, 0.0, 0.0], [0.2, 1.0, 0.0], [0.2, 0.2, 0.0]])
    m = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]]).bool()
    # returns: A [1], B [1.2, 1], C [0.4, 0.2, 0]
    # unbiased: turn 0 baselines are the other two returns' means; turn 1 only B and C reached
    want = torch.tensor([[1 - (1.2 + 0.4) / 2, 0, 0], [1.2 - (1 + 0.4) / 2, 1 - 0.2, 0], [0.4 - (1 + 1.2) / 2, 0.2 - 1, 0]])
    torch.testing.assert_close(turn_baseline_advantages(r, m, 3, gamma=1.0, scale="none"), want)
    # turn-index: per-turn means 0.4667, 0.6, 0; A: 1-0.4667; B: (0.2-0.4667)+(1-0.6); C: (0.2-0.4667)+(0.2-0.6)+0
    t0, t1 = (1 + 0.2 + 0.2) / 3, (1 + 0.2) / 2
    want_index = torch.tensor([[1 - t0, 0, 0], [0.2 - t0 + 1 - t1, 1 - t1, 0], [0.2 - t0 + 0.2 - t1, 0.2 - t1, 0]])
    torch.testing.assert_close(turn_index_advantages(r, m, 3, gamma=1.0, scale="none"), want_index)
    # step groups: A's only turn and B's second turn start from the same state "x"
    states = [["start"], ["start", "x"], ["start", "y", "x"]]
    step = step_group_advantages(r, m, states, 3, gamma=1.0, scale="none")
    start_mean = (1 + 1.2 + 0.4) / 3
    want_step = torch.tensor([[1 - start_mean, 0, 0], [1.2 - start_mean, 1 - 0.5, 0], [0.4 - start_mean, 0, 0 - 0.5]])
    torch.testing.assert_close(step_group_advantages(r, m, states, 3, gamma=1.0, scale="none"), want_step)
    assert step[2, 1] == 0  # "y" was seen once: nothing to compare with


@pytest.mark.parametrize("p", [0.2, 0.5, 0.8])
def test_the_per_turn_baseline_is_unbiased_and_the_turn_index_one_is_not(p):
    stop, probe, outcome = 0.5, 0.0, 1.0  # going on is worth 1, stopping 0.5: the true gradient says go
    unbiased, true = stop_or_go_gradient(turn_baseline_advantages, p, stop, probe, outcome)
    assert true == pytest.approx(p * (1 - p) * 0.5) and unbiased == pytest.approx(true, abs=1e-6)
    biased, _ = stop_or_go_gradient(turn_index_advantages, p, stop, probe, outcome)
    # every sample that goes on shares the last turn's outcome, so normalising per turn index cancels
    # it: what is left compares the probe (0) with stopping (0.5) and points the wrong way
    assert biased == pytest.approx(0.5 * p * (1 - p) * (probe - stop), abs=1e-6)
    assert biased < 0 < true


def test_envs_with_a_state_key_and_anchor_states():
    # GuessNumber: an invalid guess leaves the interval, so its next turn starts where the first did
    env = make("agentlab/GuessNumber-v0")
    task = env.generate_task(np.random.default_rng(0), 1)
    traj = play(env, ["10", "guess(100)", "guess(108)"], task=task)
    states = grpo.anchor_states(traj)
    assert states[0] == states[1] == f"state:{task.data['lo']}-{task.data['hi']}"
    assert states[2] != states[1]
    # an env without a key: the reply's text is the state
    web = make("agentlab/WebSearch-v0")
    traj = play(web, lambda e: e.expert_action(), task=web.generate_task(np.random.default_rng(0), 0))
    states = grpo.anchor_states(traj)
    assert states[0] == "" and all(s.startswith("reply:") for s in states[1:])
    assert "state" not in traj.infos[0] and traj.start_state is None


def test_maze_state_key_ignores_how_the_agent_arrived():
    env = make("agentlab/Maze-v0")
    task = env.generate_task(np.random.default_rng(0), 1)
    env.reset(options={"task": task})
    start = env.unwrapped.state_key()
    a = env.unwrapped.expert_action()
    _, _, _, _, info = env.step(a)
    back = {"move(north)": "move(south)", "move(south)": "move(north)", "move(east)": "move(west)",
            "move(west)": "move(east)"}[a]
    obs, _, _, _, info_back = env.step(back)
    assert info["state"] != start and info_back["state"] == start and obs.startswith("You moved")


def test_turn_rewards_put_the_shaping_on_the_last_turn():
    a = Trajectory(env_id="e", task_id="t", rewards=[0.1, 0.2, 1.0])
    b = Trajectory(env_id="e", task_id="t", rewards=[])
    r, m = grpo.turn_rewards([a, b], torch.tensor([0.5, -1.0]))
    torch.testing.assert_close(r, torch.tensor([[0.1, 0.2, 0.2], [0.0, 0.0, 0.0]]))
    assert m.tolist() == [[True, True, True], [False, False, False]]


def test_an_unknown_estimator_is_refused_with_the_choices():
    from agentlab.profiles import profile
    from agentlab.train import resolve, train_config

    with pytest.raises(ValueError, match="turn_baseline"):
        resolve(train_config(profile("ci"), "agentlab/Maze-v0", grpo=grpo.GRPOSettings(advantage="gigpoo")))
