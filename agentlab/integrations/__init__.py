"""Bridges from agentlab to other tools.

`agentlab.integrations.trl`: agentlab's envs and rewards inside TRL's `GRPOTrainer` (multi-GPU,
DeepSpeed / FSDP, vLLM), and trajectories as Hugging Face datasets. `agentlab.integrations.trl_train`:
the command line that trains an env with TRL. `agentlab.integrations.openenv`: agentlab's envs as
OpenEnv servers (`agentlab serve`) and any OpenEnv server as an agentlab env. TRL, datasets and
openenv-core are imported only when used.

`env_id_of` is here, above both the env table and the OpenEnv bridge, because an env id given
on a command line may name either (`agentlab.envs` cannot import the bridge: it imports the envs).
"""

from __future__ import annotations

from agentlab.envs import ENV_CLASSES, full_id


def env_id_of(text: str) -> str:
    """An env id as a person writes it: ``GuessNumber`` -> ``agentlab/GuessNumber-v0``; an OpenEnv
    server's address (``http://host:port``), or the id a run over one wrote to its config.json,
    -> the id `register_remote` gives that server."""
    if text.startswith(("http://", "https://", "ws://", "wss://")) or (
            text.startswith("openenv/") and text not in ENV_CLASSES):
        from agentlab.integrations.openenv import register_remote, url_of  # needs openenv-core: only for a server

        return register_remote(text if "://" in text else url_of(text))
    return full_id(text)
