"""Shared fixtures: the tiny policies, built once into AGENTLAB_CACHE (make sets .cache/agentlab)."""

import os

import pytest

os.environ.setdefault("AGENTLAB_PROFILE", "ci")

# The slowest tests under `make test-unit` (pytest --durations, two workers), slowest first. Queued
# ahead of the rest (the Makefile's --dist worksteal then lets an idle worker take what is left on the
# busy one), no long test starts last and keeps one worker busy while the other waits.
SLOWEST_FIRST = ["test_in_4bit_only_the_adapter_moves", "test_ppo_training_raises_held_out_greedy_success",
                 "test_rollout_memory_stays_flat_when_sampled_in_chunks",
                 "test_batched_greedy_equals_one_env_at_a_time",
                 "test_notebook_06_training_cell_run_twice_repeats_its_run",
                 "test_update_memory_stays_flat_as_the_batch_grows",
                 "test_grpo_training_raises_held_out_greedy_success",
                 "test_notebook_13_run_twice_in_one_kernel_repeats_its_runs_and_stops_its_server",
                 "test_ppo_critic_learns_a_return_its_state_shows",
                 "test_processes_started_together_build_the_tiny_policy_once", "test_demo_writes_the_contract",
                 "test_killed_run_resumes_as_if_never_stopped",
                 "test_trl_train_runs_two_data_parallel_processes_on_the_cpu",
                 "test_ctrl_c_in_the_gradient_steps_resumes_from_the_checkpoint",
                 "test_ctrl_c_in_the_rollout_checkpoints_the_last_whole_update",
                 "test_ctrl_c_while_a_checkpoint_is_written_waits_for_it"]


def pytest_collection_modifyitems(items):
    def rank(item) -> int:
        name = getattr(item, "originalname", item.name)
        return SLOWEST_FIRST.index(name) if name in SLOWEST_FIRST else len(SLOWEST_FIRST)

    items.sort(key=rank)  # stable: the rest keep their file order


@pytest.fixture(scope="session")
def tiny_path():
    """The untrained tiny policy (built on first use into AGENTLAB_CACHE, then reused)."""
    from agentlab.profiles import profile
    from agentlab.tiny import build_tiny

    return build_tiny(profile("ci"), verbose=False)


@pytest.fixture(scope="session")
def warm_path():
    """The ci profile's tiny policy warmed on GuessNumber as the demo warms it, with the lazy
    habit in the majority (cached in AGENTLAB_CACHE across runs): the start the RL tests train from."""
    from agentlab.demo import DEMO_ENV, LAZY_SHARE
    from agentlab.profiles import profile
    from agentlab.warmup import warm_policy_path

    return warm_policy_path(profile("ci"), envs=[DEMO_ENV], progress=False, imperfect_share=LAZY_SHARE)


@pytest.fixture(scope="session")
def batch(warm_path):
    """64 sampled GuessNumber episodes of different lengths: 8 tasks x a group of 8, from the warm policy."""
    import numpy as np
    import torch

    import agentlab
    from agentlab.policy import load_policy
    from agentlab.rollout import SamplingSettings, make_envs, rollout

    policy = load_policy(str(warm_path))
    env = agentlab.make("agentlab/GuessNumber-v0")
    rng = np.random.default_rng(0)
    tasks = [t for t in [env.generate_task(rng, 0) for _ in range(8)] for _ in range(8)]
    return rollout(make_envs("agentlab/GuessNumber-v0", 64), policy, SamplingSettings(), tasks=tasks,
                   generator=torch.Generator().manual_seed(0))
