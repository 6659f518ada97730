"""Tests of agentlab.train and the algorithms: policies really improve; a run killed with kill -9
resumes exactly; NaN losses and a runaway KL are handled."""

import dataclasses
import json

import pytest
import torch

from agentlab.algos import grpo, losses
from agentlab.policy import LoraSettings, load_policy
from agentlab.train import TrainConfig, TrainingDiverged, load_training_policy, train


def small(tmp_path, name, **kw):
    """A short run on the ci profile (tiny sizes, fixed seeds)."""
    base = dict(env_id="agentlab/GuessNumber-v0", profile="ci", name=name, out_dir=str(tmp_path / name),
                updates=4, tasks_per_update=4, group_size=4, eval_episodes=8, eval_every=100,
                checkpoint_every=2)
    base.update(kw)
    return TrainConfig(**base)


def trainable_state(policy):
    return {n: p.detach().clone() for n, p in policy.model.named_parameters() if p.requires_grad}


def sequence_logp(policy, trajs):
    from agentlab.rollout import pad_batch

    b = pad_batch(trajs, policy.pad_id)
    with torch.no_grad():
        return (policy.token_logprobs(b["ids"], b["attn"]) * b["loss_mask"]).sum(1)  # (N,)


def test_grpo_update_favours_above_average_episodes(warm_path, batch):
    from agentlab.advantages import group_advantages

    policy = load_policy(str(warm_path), lora=LoraSettings(r=8, alpha=16))
    rewards = torch.tensor([t.total_reward for t in batch])
    adv = group_advantages(rewards, 8)
    assert (adv != 0).any(), "the batch must have groups with different rewards"
    before = sequence_logp(policy, batch)
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=2e-3)
    one_step = grpo.GRPOSettings(epochs=1, minibatch_size=len(batch))  # a single gradient step
    stats = grpo.update(policy, opt, batch, rewards, 8, one_step)
    moved = sequence_logp(policy, batch) - before  # (N,)
    assert stats["kl"] == pytest.approx(0.0, abs=1e-6), "at the first step the policy is the reference"
    assert torch.corrcoef(torch.stack([adv, moved]))[0, 1] > 0.2
    assert moved[adv > 0].mean() > moved[adv < 0].mean()


def ppo_start(warm_path):
    """A fresh LoRA adapter on the warmed policy, a value head at 0, and AdamW over both."""
    from agentlab.algos import ppo

    policy = load_policy(str(warm_path), lora=LoraSettings(r=8, alpha=16))
    head = ppo.ValueHead(policy.model.config.hidden_size)
    return policy, head, torch.optim.AdamW(policy.trainable_parameters() + list(head.parameters()), lr=2e-3)


def test_ppo_update_improves_its_surrogate(warm_path, batch):
    from agentlab.algos import ppo

    policy, head, opt = ppo_start(warm_path)
    first = ppo.update(policy, opt, batch, ppo.PPOSettings(epochs=1), value_head=head)
    assert first["explained_variance"] == pytest.approx(0.0, abs=1e-6)  # the head starts at exactly 0
    second = ppo.update(policy, opt, batch, ppo.PPOSettings(epochs=4), value_head=head)
    assert second["v_loss"] < first["v_loss"], "the critic must learn the returns"


def test_ppo_target_kl_ends_the_update_when_the_policy_has_moved_too_far(warm_path, batch):
    from agentlab.algos import ppo

    def run(target_kl):
        torch.manual_seed(0)  # the adapter's initial weights: both runs are the same until the limit bites
        policy, head, opt = ppo_start(warm_path)
        return ppo.update(policy, opt, batch, ppo.PPOSettings(epochs=2, minibatch_size=8, target_kl=target_kl),
                          value_head=head, generator=torch.Generator().manual_seed(0))

    full = len(batch) // 8 * 2  # 2 epochs of minibatches of 8 episodes
    free = run(None)
    assert free["optimizer_steps"] == full
    # Each minibatch's approx_kl is measured before its step: the first sees the sampling policy itself
    # (~0), later ones the moved policy. Half the run's mean is passed by some minibatch, not by the first.
    target = free["approx_kl"] / 2 / 1.5
    limited = run(target)
    steps = limited["optimizer_steps"]
    assert 1 <= steps < full
    # the logs average the steps' minibatches and the one that stopped it, whose approx_kl passed the limit
    assert limited["approx_kl"] * (steps + 1) > 1.5 * target


def test_ppo_critic_learns_a_return_its_state_shows(warm_path, batch):
    """The critic end to end (value positions, GAE returns, the value loss through the trunk): paid on
    the first turn only, the return is 1 before the first action and 0 before the others, which the
    chat shows. Explained variance must go from 0 to above 0.5 in six updates (the margin, from eight
    seeds, and the same run with every value read at one position: bench/NOTES.md). GuessNumber's own
    returns depend on guesses not yet made, so there a critic explains little; this test does not ask it to."""
    from agentlab.algos import ppo

    torch.manual_seed(0)
    first_turn_pays = [dataclasses.replace(t, rewards=[1.0] + [0.0] * (t.num_turns - 1)) for t in batch]
    policy, head, opt = ppo_start(warm_path)
    evs = [ppo.update(policy, opt, first_turn_pays, ppo.PPOSettings(epochs=4), value_head=head)["explained_variance"]
           for _ in range(7)]  # each update reports the values it started from: the 7th, those after six
    assert evs[0] == pytest.approx(0.0, abs=1e-6) and evs[-1] > 0.5, evs


def test_grpo_training_raises_held_out_greedy_success(tmp_path, warm_path):
    """The demo's setting, shortened: the profile's batch (16 tasks x 8), six updates, outcome
    reward. Greedy success on the held-out tasks must rise by at least 25 points."""
    cfg = TrainConfig(env_id="agentlab/GuessNumber-v0", profile="ci", name="learns", out_dir=str(tmp_path / "learns"),
                      policy=str(warm_path), updates=6, eval_every=6, reward_mode="outcome")
    result = fit(cfg, progress=False)
    before, after = result.evals[0], result.evals[-1]
    assert before["distinct_tasks"] == after["distinct_tasks"] >= 8
    assert after["success_rate"] >= before["success_rate"] + 0.25, (before, after)
    assert result.history[-1]["kl"] > 0  # it moved away from the reference


def test_ppo_training_raises_held_out_greedy_success(tmp_path, warm_path):
    """PPO with its default settings (the articles': 4 epochs, clip 0.2, γ 0.99, λ 0.95) on the
    same setting as the GRPO test, four updates (four epochs each cost twice GRPO's two): greedy
    held-out success must rise by at least 25 points."""
    cfg = TrainConfig(env_id="agentlab/GuessNumber-v0", algo="ppo", profile="ci", name="ppo", out_dir=str(tmp_path / "ppo"),
                      policy=str(warm_path), updates=4, eval_every=4, reward_mode="outcome")
    result = fit(cfg, progress=False)
    before, after = result.evals[0], result.evals[-1]
    assert before["distinct_tasks"] == after["distinct_tasks"] >= 8
    assert after["success_rate"] >= before["success_rate"] + 0.25, (before, after)
    assert result.history[0]["explained_variance"] == pytest.approx(0.0, abs=1e-6)  # the value head starts at 0


def fit(cfg: TrainConfig, **kwargs):
    """``train`` from the start the config names, loaded as the command line loads it."""
    return train(cfg, load_training_policy(cfg), **kwargs)


# A training run in a process of its own, so that the test can kill it with SIGKILL (kill -9).
KILLABLE_RUN = """
import json, sys
from agentlab.train import TrainConfig, load_training_policy, train
cfg = TrainConfig(**json.loads(sys.argv[1]))
train(cfg, load_training_policy(cfg), progress=False)
"""


def kill_after_first_checkpoint(cfg: TrainConfig, timeout_s: float = 300) -> None:
    """Start ``cfg`` in a child process and SIGKILL it as soon as its first checkpoint exists."""
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    fields = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in ("grpo", "ppo", "shaping")}  # defaults
    log = Path(cfg.out_dir).with_suffix(".log")
    with open(log, "w") as out:
        child = subprocess.Popen([sys.executable, "-c", KILLABLE_RUN, json.dumps(fields)], stdout=out, stderr=out)
        first = Path(cfg.out_dir) / "checkpoints" / "update-00001"
        deadline = time.monotonic() + timeout_s
        while not first.exists():
            assert child.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.02)
        child.send_signal(signal.SIGKILL)
        child.wait()


def test_killed_run_resumes_as_if_never_stopped(tmp_path, warm_path, capsys):
    """kill -9 after the first update (checkpoint_seconds=0: every update checkpoints), then resume: the
    run continues from its last checkpoint, says so, and ends exactly as a run that was never stopped."""
    full = fit(small(tmp_path, "full", policy=str(warm_path), eval_every=2), progress=False)
    cfg = small(tmp_path, "killed", policy=str(warm_path), eval_every=2, checkpoint_seconds=0)
    kill_after_first_checkpoint(cfg)
    assert not (tmp_path / "killed" / "final").exists(), "killed before it finished"
    last = sorted((tmp_path / "killed" / "checkpoints").glob("update-*"))[-1]
    capsys.readouterr()
    resumed = fit(cfg, resume=True, progress=False)
    done = int(last.name.split("-")[1])
    assert f"resuming {tmp_path / 'killed'} from update {done} ({last.name})" in capsys.readouterr().out
    volatile = ("tokens_per_s", "seconds_rollout", "seconds_update")
    strip = lambda h: [{k: v for k, v in r.items() if k not in volatile} for r in h]  # noqa: E731
    assert strip(resumed.history) == strip(full.history)
    assert resumed.evals == full.evals  # an evaluation written just before the kill is kept, not repeated
    a, b = trainable_state(full.policy), trainable_state(resumed.policy)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_resume_with_nothing_to_resume_says_so(tmp_path, warm_path, capsys):
    fit(small(tmp_path, "fresh", policy=str(warm_path), updates=1), resume=True, progress=False)
    assert f"{tmp_path / 'fresh'} has no checkpoint: starting from update 0" in capsys.readouterr().out


def test_resume_refuses_to_overwrite_without_flag(tmp_path, warm_path):
    cfg = small(tmp_path, "twice", policy=str(warm_path), updates=2)
    fit(cfg, progress=False)
    with pytest.raises(FileExistsError, match="resume=True"):
        fit(cfg, progress=False)


def test_one_nan_loss_is_skipped_with_a_warning(tmp_path, warm_path, monkeypatch):
    real = losses.clipped_surrogate
    calls = {"n": 0}

    def nan_once(*args, **kwargs):
        loss, stats = real(*args, **kwargs)
        calls["n"] += 1
        return (loss * float("nan"), stats) if calls["n"] == 1 else (loss, stats)

    monkeypatch.setattr(grpo, "clipped_surrogate", nan_once)
    policy = load_policy(str(warm_path), lora=LoraSettings(r=8, alpha=16))
    before = trainable_state(policy)
    with pytest.warns(UserWarning, match="NaN or infinite"):
        one_step = grpo.GRPOSettings(epochs=1, minibatch_size=64)  # the update is a single gradient step
        result = train(small(tmp_path, "nan1", updates=1, grpo=one_step), progress=False, policy=policy)
    assert result.history[0]["nonfinite"] == 1.0
    after = trainable_state(result.policy)
    assert all(torch.equal(before[k], after[k]) for k in before), "a NaN update must not change weights"
    assert all(torch.isfinite(p).all() for p in after.values())


def test_nan_losses_in_a_row_stop_with_a_clear_message(tmp_path, warm_path, monkeypatch):
    def always_nan(*args, **kwargs):
        loss, stats = losses.clipped_surrogate(*args, **kwargs)
        return loss * float("nan"), stats

    monkeypatch.setattr(grpo, "clipped_surrogate", always_nan)
    with pytest.warns(UserWarning), pytest.raises(TrainingDiverged, match="Lower the learning rate"):
        fit(small(tmp_path, "nan3", policy=str(warm_path), updates=5, max_bad_updates=3), progress=False)


def test_a_policy_an_earlier_run_trained_is_named_and_a_fresh_one_repeats_the_run(tmp_path, warm_path):
    """A training cell run twice: handed the policy the first run moved, train warns; a fresh policy
    loaded from the same config gives the first run's metrics again."""
    import warnings

    first_cfg = small(tmp_path, "first", policy=str(warm_path), updates=1)
    policy = load_training_policy(first_cfg)
    first = train(first_cfg, policy, progress=False)
    assert policy.trained_in == [str(tmp_path / "first")]
    with pytest.warns(UserWarning, match=r"already holds the updates of an earlier train\(\) call .*first.*"
                                         r"load_training_policy\(cfg\)"):
        train(dataclasses.replace(first_cfg, name="again", out_dir=str(tmp_path / "again")), policy, progress=False)
    clock = ("seconds_rollout", "seconds_update", "tokens_per_s")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fresh = train(dataclasses.replace(first_cfg, name="fresh", out_dir=str(tmp_path / "fresh")),
                      load_training_policy(first_cfg), progress=False)
    assert not [w for w in caught if "earlier train() call" in str(w.message)]  # a fresh policy gets no warning
    assert [{k: v for k, v in r.items() if k not in clock} for r in fresh.history] == \
        [{k: v for k, v in r.items() if k not in clock} for r in first.history]


def test_kl_above_max_kl_warns_then_stops(tmp_path, warm_path):
    """Every update moves the policy from the reference (kl > 0), so max_kl=0 flags each one."""
    cfg = small(tmp_path, "kl", policy=str(warm_path), updates=5, max_kl=0.0, max_bad_updates=2)
    with pytest.warns(UserWarning, match="above max_kl=0.0.*Lower the learning rate"), \
            pytest.raises(TrainingDiverged, match="2 updates in a row had a KL to the reference above max_kl"):
        fit(cfg, progress=False)
    lines = (tmp_path / "kl" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(ln)["kl"] > 0 for ln in lines)


def test_4bit_lora_training_runs_on_cpu(tmp_path, warm_path):
    import bitsandbytes as bnb

    cfg = small(tmp_path, "q4", policy=str(warm_path), quantization="4bit", updates=2)
    result = fit(cfg, progress=False)
    assert any(isinstance(m, bnb.nn.Linear4bit) for m in result.policy.model.modules())
    moved = [n for n, p in result.policy.model.named_parameters() if p.requires_grad and p.abs().sum() > 0
             and "lora_B" in n]
    assert moved, "the LoRA B matrices start at zero and must have moved"
    assert (tmp_path / "q4" / "final" / "adapter_config.json").exists()


def test_config_rejects_unknown_algo_and_env(tmp_path):
    with pytest.raises(ValueError, match="algo"):
        fit(dataclasses.replace(small(tmp_path, "x"), algo="dqn"), progress=False)
    with pytest.raises(KeyError, match="unknown environment"):
        fit(dataclasses.replace(small(tmp_path, "y"), env_id="agentlab/Nope-v0"), progress=False)


def test_a_profiles_config_shows_every_value_and_train_takes_a_loaded_policy(tmp_path):
    import agentlab.train as T
    from agentlab.profiles import profile

    cfg = T.train_config(profile("ci"), "agentlab/Maze-v0", algo="ppo", lr=1e-3)
    assert cfg.lr == 1e-3 and cfg.updates == profile("ci").rl_updates and cfg.profile == "ci"
    filled = ("lora_r", "updates", "tasks_per_update", "group_size", "lr", "max_new_tokens", "eval_episodes",
              "share_prompts", "out_dir")
    assert all(getattr(cfg, name) is not None for name in filled), cfg
    assert cfg.max_new_tokens == profile("ci").turn_tokens("agentlab/Maze-v0")
    with pytest.raises(TypeError, match="load_training_policy"):  # a path is not a policy: say how to get one
        train(cfg, "runs/some-model")


def test_ppo_refuses_reward_shaping():
    from agentlab.rewards import RewardShaping
    from agentlab.train import resolve

    for shaping in (RewardShaping(zscore=True), RewardShaping(floor_reward=0.1), RewardShaping(diversity_penalty=0.1)):
        with pytest.raises(ValueError, match="PPO"):
            resolve(TrainConfig(profile="ci", algo="ppo", shaping=shaping))
        resolve(TrainConfig(profile="ci", algo="grpo", shaping=shaping))
    resolve(TrainConfig(profile="ci", algo="ppo", shaping=RewardShaping(eps=1e-3)))  # nothing switched on


def test_reflection_retries_all_failed_groups_with_the_last_feedback(tiny_path):
    import numpy as np

    from agentlab.train import collect, resolve

    cfg = resolve(TrainConfig(profile="ci", tasks_per_update=2, group_size=2, reflection=True, max_new_tokens=4))
    trajs, retries = collect(load_policy(str(tiny_path)), cfg, 0, torch.Generator().manual_seed(0),
                             np.random.default_rng(0))
    failed = [g for g in range(2) if not any(t.success for t in trajs[2 * g:2 * g + 2])]
    assert failed and len(retries) == 2 * len(failed)  # the untrained policy fails every task
    for k, t in enumerate(retries):
        assert t.messages[1]["content"].startswith("Previous attempt failed: ")  # as evaluate.reflect words it
        assert t.task_id == trajs[2 * failed[k // 2]].task_id and t.group == 2 + k // 2


def test_with_episode_streams_a_chunked_rollout_samples_what_one_batch_would(tiny_path):
    """The memory plan splits the rollout when the KV cache of all episodes would not fit: with
    episode_streams the update's episodes, reflection retries included, do not depend on that split."""
    import numpy as np

    from agentlab.train import collect, resolve

    policy = load_policy(str(tiny_path))

    def episodes(streams: bool, rows: int | None) -> list[list[int]]:
        cfg = resolve(TrainConfig(profile="ci", tasks_per_update=3, group_size=2, reflection=True, max_new_tokens=6,
                                  episode_streams=streams))
        trajs, retries = collect(policy, cfg, 0, torch.Generator().manual_seed(0), np.random.default_rng(0),
                                 rollout_rows=rows)
        assert retries  # the untrained policy fails, so the retries' draws are compared too
        return [t.token_ids for t in trajs + retries]

    assert episodes(True, 2) == episodes(True, None)
    assert episodes(False, 2) != episodes(False, None)  # one stream per batch: the split changes the draws


def test_a_run_starts_from_the_warm_up_it_names(monkeypatch, tiny_path):
    from agentlab import warmup
    from agentlab.train import load_training_policy, resolve

    asked = []

    def warm(prof, envs=None, imperfect_share=None, **kwargs):  # which warm-up was asked for; the tiny model stands in
        asked.append((envs, imperfect_share))
        return tiny_path

    monkeypatch.setattr(warmup, "warm_policy_path", warm)
    for policy in (None, str(tiny_path)):
        trained = load_training_policy(resolve(TrainConfig(profile="ci", env_id="agentlab/Maze-v0", policy=policy)))
        assert trained.num_parameters(trainable_only=True) > 0  # a LoRA adapter on the base
    assert asked == [(["agentlab/Maze-v0"], None)]  # no policy named: the env's own warm-up; a path: that one
