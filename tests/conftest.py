"""Shared fixtures. The tiny policy is built once per test session into a temporary cache."""

import os

import pytest

os.environ.setdefault("AGENTLAB_PROFILE", "ci")


@pytest.fixture(scope="session")
def tiny_path(tmp_path_factory):
    """The untrained tiny policy, built into a fresh cache for this session."""
    from agentlab import models

    old = os.environ.get("AGENTLAB_CACHE")
    os.environ["AGENTLAB_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    try:
        yield models.build_tiny(models.profile("ci"), verbose=False)
    finally:
        if old is None:
            os.environ.pop("AGENTLAB_CACHE", None)
        else:
            os.environ["AGENTLAB_CACHE"] = old


@pytest.fixture(scope="session")
def warm_path():
    """The ci profile's tiny policy warmed on GuessNumber (cached in AGENTLAB_CACHE across runs)."""
    from agentlab import models
    from agentlab.sft import warm_policy_path

    return warm_policy_path(models.profile("ci"), envs=["agentlab/GuessNumber-v0"], progress=False)
