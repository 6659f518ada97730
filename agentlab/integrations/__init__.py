"""Bridges from agentlab to other tools.

`agentlab.integrations.trl`: agentlab's envs and rewards inside TRL's `GRPOTrainer` (multi-GPU,
DeepSpeed / FSDP, vLLM), and trajectories as Hugging Face datasets. `agentlab.integrations.trl_train`:
the command line that trains an env with TRL. TRL and datasets are imported only when used.
"""
