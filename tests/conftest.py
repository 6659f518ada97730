"""Shared fixtures: the tiny policies, built once into AGENTLAB_CACHE (make sets .cache/agentlab)."""

import os

import pytest

os.environ.setdefault("AGENTLAB_PROFILE", "ci")


@pytest.fixture(scope="session")
def tiny_path():
    """The untrained tiny policy (built on first use into AGENTLAB_CACHE, then reused)."""
    from agentlab import models

    return models.build_tiny(models.profile("ci"), verbose=False)


@pytest.fixture(scope="session")
def warm_path():
    """The ci profile's tiny policy warmed on GuessNumber as the demo warms it, with the lazy
    habit in the majority (cached in AGENTLAB_CACHE across runs): the start the RL tests train from."""
    from agentlab import models
    from agentlab.demo import DEMO_ENV, LAZY_SHARE
    from agentlab.sft import warm_policy_path

    return warm_policy_path(models.profile("ci"), envs=[DEMO_ENV], progress=False, imperfect_share=LAZY_SHARE)
