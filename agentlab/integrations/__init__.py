"""Bridges from agentlab to other tools.

`agentlab.integrations.trl`: agentlab's envs and rewards inside TRL's `GRPOTrainer` (multi-GPU,
DeepSpeed / FSDP, vLLM), and trajectories as Hugging Face datasets. `agentlab.integrations.trl_train`:
the command line that trains an env with TRL. `agentlab.integrations.openenv`: agentlab's envs as
OpenEnv servers (`agentlab serve`) and any OpenEnv server as an agentlab env. TRL, datasets and
openenv-core are imported only when used.
"""
