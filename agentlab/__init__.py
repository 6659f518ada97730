"""agentlab: train LLM agents with multi-turn reinforcement learning, from a laptop CPU to one GPU."""

from agentlab.envs import ENV_IDS, make, register_all

__version__ = "0.1.0"

register_all()


def profile(name=None):
    """The active profile (``ci``, ``cpu``, ``real-cpu`` or ``gpu``); see `agentlab.profiles.profile`."""
    from agentlab.profiles import profile as _profile

    return _profile(name)


__all__ = ["ENV_IDS", "make", "profile", "__version__"]
