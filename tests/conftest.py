"""Shared fixtures: the tiny policies, built once into AGENTLAB_CACHE (make sets .cache/agentlab)."""

import os

import pytest

os.environ.setdefault("AGENTLAB_PROFILE", "ci")


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
