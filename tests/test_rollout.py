"""Rollout: token provenance, batching, logprobs, JSONL (the rollout issue's checks)."""

import numpy as np
import pytest
import torch

import agentlab.rollout
from agentlab.envs import make
from agentlab.policy import load_policy
from agentlab.rollout import (ACTION, OBSERVATION, PROMPT, SamplingSettings, load_jsonl, make_envs, pad_batch, play,
                              rollout, save_jsonl)

ENVS = ["agentlab/GuessNumber-v0", "agentlab/WebSearch-v0", "agentlab/Math-v0"]


@pytest.fixture(scope="module")
def policy(tiny_path):
    return load_policy(str(tiny_path))


@pytest.fixture(scope="module")
def sampled(policy):
    envs = make_envs("agentlab/GuessNumber-v0", 6)
    gen = torch.Generator().manual_seed(0)
    return rollout(envs, policy, SamplingSettings(temperature=1.0, max_new_tokens=8), seeds=range(6), generator=gen)


def test_old_logprobs_equal_a_fresh_forward_pass(policy, sampled):
    batch = pad_batch(sampled, policy.pad_id)
    with torch.no_grad():
        fresh = policy.token_logprobs(batch["ids"], batch["attn"])  # (B, L-1)
    mask = batch["loss_mask"].bool()
    assert mask.sum() > 20
    assert torch.allclose(fresh[mask], batch["old_logp"][mask], atol=1e-4)


@pytest.mark.parametrize("env_id", ENVS)
def test_batched_greedy_equals_one_env_at_a_time(policy, env_id):
    settings = SamplingSettings(greedy=True, max_new_tokens=10)
    seeds = list(range(5))
    batched = rollout(make_envs(env_id, 5), policy, settings, seeds=seeds)
    for seed, traj in zip(seeds, batched):
        alone = rollout(make_envs(env_id, 1), policy, settings, seeds=[seed])[0]
        assert alone.actions == traj.actions
        assert alone.token_ids == traj.token_ids


def test_a_model_without_kv_cache_gives_the_same_episodes(policy):
    """Training mode with gradient checkpointing (as TRL sets it) turns the model's cache off:
    rollout then re-reads the history each turn and must produce the very same episodes."""
    settings = SamplingSettings(greedy=True, max_new_tokens=10)
    cached = rollout(make_envs("agentlab/GuessNumber-v0", 4), policy, settings, seeds=range(4))
    policy.model.activation_checkpointing_enable()
    policy.model.train()
    try:
        uncached = rollout(make_envs("agentlab/GuessNumber-v0", 4), policy, settings, seeds=range(4))
    finally:
        policy.model.activation_checkpointing_disable()
        policy.model.eval()
    assert [t.token_ids for t in uncached] == [t.token_ids for t in cached]
    for a, b in zip(uncached, cached):
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-4


def test_action_tokens_decode_to_what_the_envs_received(policy, sampled):
    for traj in sampled:
        for turn, action in enumerate(traj.actions):
            toks = traj.action_token_ids(turn)
            if toks and toks[-1] == policy.eot_id:
                toks = toks[:-1]
            assert policy.tokenizer.decode(toks) == action


def test_only_action_tokens_carry_loss(policy, sampled):
    for traj in sampled:
        assert len(traj.token_ids) == len(traj.roles) == len(traj.logprobs) == len(traj.turn_index)
        assert traj.roles[0] == PROMPT and set(traj.roles) <= {PROMPT, OBSERVATION, ACTION}
        for role, m, k, lp in zip(traj.roles, traj.loss_mask, traj.turn_index, traj.logprobs):
            assert m == (role == ACTION)
            assert (k >= 0) == (role == ACTION)
            assert role == ACTION or lp == 0.0
        # every turn's action tokens are contiguous and in order
        spans = traj.turn_spans()
        assert all(a < b <= c for (a, b), (c, _) in zip(spans, spans[1:]))


def test_finished_envs_drop_out_and_turns_are_bounded(policy, monkeypatch):
    """Envs with turn limits 1..6 finish at different turns: each turn's batch holds only the
    envs still running, and an env truncated at its limit played exactly that many turns."""
    batch_sizes = []
    sample_turn = agentlab.rollout._sample_turn

    def recording(decoder, logits, *args, **kwargs):
        batch_sizes.append(len(logits))
        return sample_turn(decoder, logits, *args, **kwargs)

    monkeypatch.setattr(agentlab.rollout, "_sample_turn", recording)
    limits = [1, 2, 3, 4, 5, 6]
    envs = [make("agentlab/GuessNumber-v0", max_steps=k) for k in limits]
    trajs = rollout(envs, policy, SamplingSettings(temperature=1.0, max_new_tokens=8), seeds=range(6),
                    generator=torch.Generator().manual_seed(0))
    assert batch_sizes == [sum(t.num_turns > k for t in trajs) for k in range(max(limits))]
    for traj, limit in zip(trajs, limits):
        assert traj.terminated != traj.truncated
        assert traj.num_turns == limit if traj.truncated else 1 <= traj.num_turns <= limit
        assert len(traj.rewards) == len(traj.actions) == len(traj.components) == len(traj.infos)


def test_an_action_without_end_of_turn_is_invalid(policy):
    traj = rollout(make_envs("agentlab/GuessNumber-v0", 1), policy, SamplingSettings(max_new_tokens=1),
                   seeds=[0], generator=torch.Generator().manual_seed(0))[0]
    cut = [i for i, a in enumerate(traj.action_token_ids(0)) if a != policy.eot_id]
    if cut:  # one token and not end-of-turn: the turn must count as invalid
        assert traj.infos[0]["valid"] is False and traj.rewards[0] < 0


def test_jsonl_round_trip_is_lossless(sampled, tmp_path):
    save_jsonl(sampled, tmp_path / "t.jsonl")
    back = load_jsonl(tmp_path / "t.jsonl")
    assert [t.to_dict() for t in back] == [t.to_dict() for t in sampled]


def test_sampling_is_reproducible_with_a_generator(policy):
    run = lambda: rollout(make_envs("agentlab/GuessNumber-v0", 3), policy, SamplingSettings(max_new_tokens=8),
                          seeds=[1, 2, 3], generator=torch.Generator().manual_seed(5))
    assert [t.token_ids for t in run()] == [t.token_ids for t in run()]


def test_a_sampling_stream_is_uniform_and_depends_on_key_and_count_alone():
    from agentlab.rollout import stream_uniform

    draws = np.array([stream_uniform(12345, n) for n in range(20_000)])
    assert draws.min() >= 0.0 and draws.max() < 1.0
    counts = np.histogram(draws, bins=10, range=(0, 1))[0]
    assert np.all(np.abs(counts - 2000) < 200), counts  # 4.5 standard deviations of a bin's count
    assert [stream_uniform(12345, n) for n in range(5)] == list(draws[:5])  # no state kept between calls
    neighbour = np.array([stream_uniform(12346, n) for n in range(20_000)])  # keys one apart: unrelated streams
    assert abs(np.corrcoef(draws, neighbour)[0, 1]) < 0.03 and not np.isin(neighbour, draws).any()


def test_inverse_cdf_picks_tokens_at_their_weights_and_never_a_zero_weight():
    from agentlab.rollout import _inverse_cdf, stream_uniform

    weights = torch.tensor([[0.4, 0.0, 0.2, 0.0, 0.1, 0.0]])  # cut as top-p leaves them: they sum to 0.7
    u = torch.tensor([stream_uniform(7, n) for n in range(30_000)], dtype=torch.float64)
    tokens = _inverse_cdf(weights.expand(len(u), -1), u)
    freq = torch.bincount(tokens, minlength=6).double() / len(u)
    assert torch.allclose(freq, weights[0].double() / 0.7, atol=0.01), freq
    edge = _inverse_cdf(weights, torch.tensor([1 - 2 ** -53], dtype=torch.float64))
    assert edge.tolist() == [4]  # the last token with weight, not the zero-weight one after it


def test_episode_streams_give_an_episode_the_same_tokens_however_it_is_batched(policy):
    settings = SamplingSettings(temperature=1.0, max_new_tokens=8)
    seeds, keys = list(range(6)), [101, 202, 303, 404, 505, 606]

    def run(sizes: list[int], keyed: bool):
        gen, out, s = torch.Generator().manual_seed(5), [], 0
        for size in sizes:
            out += rollout(make_envs("agentlab/GuessNumber-v0", size), policy, settings, seeds=seeds[s:s + size],
                           generator=None if keyed else gen, keys=keys[s:s + size] if keyed else None)
            s += size
        return out

    whole = run([6], keyed=True)
    assert [t.sample_key for t in whole] == keys
    for sizes in ([2, 1, 3], [1] * 6):
        split = run(sizes, keyed=True)
        assert [t.token_ids for t in split] == [t.token_ids for t in whole], sizes
        assert np.allclose(sum((t.logprobs for t in split), []), sum((t.logprobs for t in whole), []), atol=1e-4)
    # one stream for the batch: the same split changes what the episodes sample
    assert [t.token_ids for t in run([2, 1, 3], keyed=False)] != [t.token_ids for t in run([6], keyed=False)]
    with pytest.raises(ValueError, match="one key per env"):
        rollout(make_envs("agentlab/GuessNumber-v0", 2), policy, settings, seeds=[0, 1], keys=[1])


def test_observation_tokens_are_the_template_continuation(policy):
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
            {"role": "assistant", "content": "guess(3)"}, {"role": "user", "content": "3 is too low"}]
    full = policy.encode(policy.render(msgs, add_generation_prompt=True))
    built = policy.prompt_ids("S", "U") + policy.encode("guess(3)") + [policy.eot_id] + policy.observation_ids("3 is too low")
    assert built == full


def test_play_records_a_scripted_episode_as_the_env_saw_it():
    env = make("agentlab/GuessNumber-v0")
    task = env.generate_task(np.random.default_rng(0), 0)
    expert = play(env, lambda e: e.expert_action(), task)
    assert expert.terminated and not expert.truncated and expert.success
    assert [m["role"] for m in expert.messages] == ["system", "user"] + ["assistant", "user"] * expert.num_turns
    assert expert.total_reward == pytest.approx(sum(sum(c.values()) for c in expert.components))
    # a list of actions is played in order and the recording stops when it runs out, ended or not
    partial = play(env, expert.actions[:1], task)
    assert partial.actions == expert.actions[:1] and not (partial.terminated or partial.truncated)
    wrong = [f"guess({n})" for n in range(1, 17) if f"guess({n})" not in expert.actions][:5]
    cut = play(env, wrong, task)
    assert cut.truncated and not cut.terminated and not cut.success and cut.num_turns == task.max_steps


def test_the_spare_room_cache_gives_the_library_caches_episodes_bit_for_bit(policy, monkeypatch):
    """`SpareRoomLayer` writes each token in place where transformers' `DynamicLayer` copies the
    cache: the same sampled tokens and the same logprobs, exactly, over episodes long enough to
    outgrow the buffer several times, with finished rows dropping out and a group's prompt shared."""
    def sample():
        envs = [make("agentlab/Maze-v0", max_steps=steps) for steps in (3, 3, 6, 6, 10, 10, 10, 10)]  # rows leave early
        return rollout(envs, policy, SamplingSettings(max_new_tokens=12), seeds=[1, 1, 2, 2, 1, 1, 2, 2],
                       generator=torch.Generator().manual_seed(3))

    policy.share_prompts = True
    try:
        spare = sample()
        monkeypatch.setattr(agentlab.rollout, "SpareRoomLayer", agentlab.rollout.DynamicLayer)
        library = sample()
    finally:
        policy.share_prompts = False
    assert max(len(t.token_ids) for t in spare) > 3 * 128  # the buffer grew at least twice
    assert len({t.num_turns for t in spare}) > 1  # rows left the batch at different turns
    assert [t.token_ids for t in spare] == [t.token_ids for t in library]
    assert [t.logprobs for t in spare] == [t.logprobs for t in library]


def test_a_groups_prompt_read_once_gives_the_same_episodes(policy):
    """With ``share_prompts`` each distinct prompt is read once and its cache copied to the rows
    that start with it: greedy episodes are the same tokens, and sampled logprobs still equal a fresh pass."""
    settings = SamplingSettings(greedy=True, max_new_tokens=10)
    seeds = [0, 0, 0, 3, 3, 5]
    plain = rollout(make_envs("agentlab/Math-v0", 6), policy, settings, seeds=seeds)
    policy.share_prompts = True
    try:
        shared = rollout(make_envs("agentlab/Math-v0", 6), policy, settings, seeds=seeds)
        sampled = rollout(make_envs("agentlab/Math-v0", 6), policy, SamplingSettings(max_new_tokens=10), seeds=seeds,
                          generator=torch.Generator().manual_seed(0))
    finally:
        policy.share_prompts = False
    assert [t.token_ids for t in shared] == [t.token_ids for t in plain]
    batch = pad_batch(sampled, policy.pad_id)
    with torch.no_grad():
        fresh = policy.token_logprobs(batch["ids"], batch["attn"])  # (B, L-1), every row in full
    mask = batch["loss_mask"].bool()
    assert torch.allclose(fresh[mask], batch["old_logp"][mask], atol=1e-4)
