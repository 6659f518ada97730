"""The SFT warm-up (agentlab.sft, agentlab.warmup): demonstrations follow each env's plan, the loss reads action tokens only,
the cached policy's recipe is the sum of its envs' plans, and every expert action fits the
per-turn token budget the policy is evaluated with."""

import dataclasses
import json

import numpy as np
import pytest
import torch

from agentlab import sft, warmup
from agentlab.envs import ENV_IDS, env_class, make
from agentlab.evaluate import split_tasks
from agentlab.policy import load_policy
from agentlab.profiles import profile
from agentlab.rollout import ACTION, pad_batch
from agentlab.warmup import WarmUp, warm_up_plan

GUESS, MAZE = "agentlab/GuessNumber-v0", "agentlab/Maze-v0"


@pytest.fixture(scope="module")
def policy(tiny_path):
    return load_policy(str(tiny_path))


def test_demonstrations_follow_each_envs_plan(policy):
    demos = warmup.demonstrations(policy, [GUESS, MAZE], seed=0, episodes=60)
    guess, maze = demos[:60], demos[60:]
    assert all(d.env_id == GUESS for d in guess) and all(d.env_id == MAZE for d in maze)
    plan = warm_up_plan(MAZE)
    assert [d.difficulty for d in maze] == [plan.levels[i % len(plan.levels)] for i in range(60)]
    assert {d.difficulty for d in guess} == set(warm_up_plan(GUESS).levels)
    # GuessNumber's biased demonstrator opens with the lowest number, the expert with the middle one.
    lazy = np.mean([d.actions[0] == "guess(1)" for d in guess])
    share = warm_up_plan(GUESS).imperfect_share
    assert abs(lazy - share) < 0.2, (lazy, share)
    experts = warmup.demonstrations(policy, [GUESS], seed=0, episodes=40, imperfect_share=0.0)
    assert all(d.actions[0] == "guess(8)" and d.success for d in experts)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_a_demonstration_is_tokenised_as_its_chat_renders(policy, env_id):
    """The tokens SFT trains on are the chat template's rendering of the episode's messages (the
    last reply left out: an ended episode has no next turn), so SFT and rollout see one format."""
    env = make(env_id)
    for difficulty in (0, env.max_difficulty):
        demo = sft.demonstration(policy, env, np.random.default_rng(difficulty), 0.5, difficulty)
        rendered = policy.encode(policy.render(demo.messages[:-1]))
        assert demo.token_ids == rendered
        actions = [policy.tokenizer.decode(demo.action_token_ids(k)[:-1]) for k in range(demo.num_turns)]
        assert actions == demo.actions and demo.terminated != demo.truncated
    env.close()


def test_sft_loss_is_the_mean_nll_of_action_tokens(policy):
    demos = warmup.demonstrations(policy, [GUESS], seed=1, episodes=4)
    batch = pad_batch(demos, policy.pad_id)
    mask = batch["loss_mask"]
    roles = [torch.tensor(d.roles[1:]) for d in demos]
    for row, r in zip(mask, roles):
        assert torch.equal(row[: len(r)].bool(), r == ACTION) and not row[len(r):].any()
    with torch.no_grad():
        logp = policy.token_logprobs(batch["ids"], batch["attn"])  # (B, L-1), every position
        expected = -(logp * mask).sum() / mask.sum()
        assert torch.allclose(sft.sft_loss(policy, batch), expected, atol=1e-5)


def test_warm_recipe_sums_the_plans_and_changes_with_them(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTLAB_CACHE", str(tmp_path))
    calls = []

    def no_training(policy, demos, steps, *args, **kwargs):  # what SFT was asked to do, not done
        calls.append((len(demos), steps))
        return [2.0, 1.0]

    monkeypatch.setattr(warmup, "sft", no_training)
    prof = profile("ci")
    path = warmup.warm_policy_path(prof, envs=[GUESS, MAZE], progress=False)
    plans = [warm_up_plan(e) for e in (GUESS, MAZE)]
    report = json.loads((path / "sft.json").read_text())
    assert calls == [(sum(p.episodes for p in plans), sum(p.steps for p in plans))]
    assert report["steps"] == sum(p.steps for p in plans) and report["envs"] == [GUESS, MAZE]
    assert warmup.warm_policy_path(prof, envs=[GUESS, MAZE], progress=False) == path and len(calls) == 1  # cached
    monkeypatch.setitem(warmup.WARM_UPS, MAZE, dataclasses.replace(plans[1], steps=plans[1].steps + 1))
    assert warmup.warm_policy_path(prof, envs=[GUESS, MAZE], progress=False) != path  # a new plan, a new policy


def test_a_plan_may_set_its_own_sft_batch(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTLAB_CACHE", str(tmp_path))
    batches = []

    def no_training(policy, demos, steps, batch_size, *args, **kwargs):  # the batch SFT was asked for, no SFT
        batches.append(batch_size)
        return [2.0, 1.0]

    monkeypatch.setattr(warmup, "sft", no_training)
    prof = profile("ci")
    own = dataclasses.replace(warm_up_plan(GUESS), episodes=8, steps=2, batch=4)
    path = warmup.warm_policy_path(prof, envs=[GUESS], progress=False, plan=own)
    default = warmup.warm_policy_path(prof, envs=[GUESS], progress=False, plan=dataclasses.replace(own, batch=None))
    assert batches == [4, prof.sft_batch] and path != default  # each batch its own cached policy
    assert json.loads((path / "sft.json").read_text())["batch"] == 4
    monkeypatch.setitem(warmup.WARM_UPS, MAZE, dataclasses.replace(warm_up_plan(MAZE), batch=8))
    with pytest.raises(ValueError, match="different SFT batches"):  # one SFT run cannot take two batch sizes
        warmup.warm_policy_path(prof, envs=[GUESS, MAZE], progress=False)


def test_warm_up_share_can_be_replaced(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTLAB_CACHE", str(tmp_path))
    openings = []

    def no_training(policy, demos, *args, **kwargs):  # the first guesses demonstrated, no SFT
        openings.append({d.actions[0] for d in demos})
        return [2.0, 1.0]

    monkeypatch.setattr(warmup, "sft", no_training)
    prof = profile("ci")
    paths = {share: warmup.warm_policy_path(prof, envs=[GUESS], progress=False, imperfect_share=share)
             for share in (None, 0.0, 1.0)}
    assert len(set(paths.values())) == 3  # each share its own cached policy
    assert openings[1] == {"guess(8)"} and openings[2] == {"guess(1)"}  # all expert, all lazy (level 0: 1..16)
    assert openings[0] == {"guess(8)", "guess(1)"}  # the env's plan mixes the two
    report = json.loads((paths[1.0] / "sft.json").read_text())
    assert report["warm_up"][GUESS]["imperfect_share"] == 1.0
    with pytest.raises(ValueError, match="between 0 and 1"):
        warmup.warm_policy_path(prof, envs=[GUESS], progress=False, imperfect_share=60)


def test_warm_up_plans_are_sane():
    assert set(warmup.WARM_UPS) <= set(ENV_IDS)  # a plan under a misspelt id would never be used
    for env_id in ENV_IDS:
        plan = warm_up_plan(env_id)
        assert isinstance(plan, WarmUp) and plan.episodes > 0 and plan.steps > 0
        assert 0.0 <= plan.imperfect_share <= 1.0
        assert set(plan.levels) <= set(range(env_class(env_id).max_difficulty + 1)), env_id


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_every_expert_action_fits_the_turn_budget(policy, env_id):
    """An action that does not end within the budget is invalid, so a budget shorter than the
    expert's actions would cap the warmed policy's success below what it learned."""
    budget = profile("ci").turn_tokens(env_id)
    env = make(env_id)
    longest = 0
    for task in split_tasks(env_id, "eval"):
        env.reset(seed=0, options={"task": task})
        while True:
            action = env.expert_action()
            longest = max(longest, len(policy.encode(action)) + 1)  # + end-of-turn
            _, _, term, trunc, _ = env.step(action)
            if term or trunc:
                break
    env.close()
    assert longest <= budget, f"{env_id}: the expert needs {longest} tokens per turn, the budget is {budget}"


def test_an_experiments_plan_is_cut_to_a_pretrained_models_size(tmp_path, monkeypatch, tiny_path):
    """A phenomenon's warm-up (hundreds of SFT steps, set on the tiny policy) runs as written on ``ci`` and
    at `PRETRAINED_WARM_UP`'s size on ``real-cpu``, keeping its levels and biased share."""
    from agentlab.phenomena import SHORTCUT_WARM_UP

    monkeypatch.setenv("AGENTLAB_CACHE", str(tmp_path))
    asked = []
    monkeypatch.setattr(warmup, "model_source", lambda name: str(tiny_path))  # no real model needed to check the plan
    monkeypatch.setattr(warmup, "demonstrations", lambda *args, plan=None, **kwargs: asked.append(plan) or [])
    monkeypatch.setattr(warmup, "sft", lambda policy, demos, steps, *args, **kwargs: asked.append(steps) or [2.0, 1.0])
    small = warmup.PRETRAINED_WARM_UP
    assert SHORTCUT_WARM_UP.steps > small.steps and SHORTCUT_WARM_UP.episodes > small.episodes
    for name, steps, episodes in (("ci", SHORTCUT_WARM_UP.steps, SHORTCUT_WARM_UP.episodes),
                                  ("real-cpu", small.steps, small.episodes)):
        asked.clear()
        path = warmup.warm_policy_path(profile(name), envs=["agentlab/WebSearch-v0"], progress=False,
                                       plan=SHORTCUT_WARM_UP)
        plan, sft_steps = asked
        assert (plan.steps, plan.episodes, sft_steps) == (steps, episodes, steps), name
        assert (plan.levels, plan.imperfect_share) == (SHORTCUT_WARM_UP.levels, SHORTCUT_WARM_UP.imperfect_share)
        assert json.loads((path / "sft.json").read_text())["steps"] == steps
