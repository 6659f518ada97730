"""A cheaper copy of the policy to sample with: the LoRA adapter merged in, linear layers in int8.

    sampler = int8_sampler(policy)             # again after every update: the adapter has moved
    trajs = rollout(envs, sampler, settings)   # Trajectory.logprobs are now the int8 copy's
    grpo.update(policy, opt, trajs, rewards, G, GRPOSettings(is_correction="token_truncated"))

Sampling is most of an update's time on a CPU, and it needs no gradient, so it can run on a copy
whose weights are int8 (`torch.ao.quantization.quantize_dynamic`: weights stored in int8, each
activation quantised on the fly, one matrix product in int8 per linear layer). The copy gives
tokens slightly different probabilities from the float32 trainer; the update measures how much
(``sampler_kl``) and corrects for it with importance weights (`agentlab.algos.losses.is_weights`).

The copy is rebuilt from the trainer, not updated in place: the adapter is folded into a copy of
the base weights (W + B·A·α/r, peft's ``merge_and_unload``), then those are quantised. The trainer
keeps its separate adapter and float32 weights. CPU only: PyTorch's dynamic int8 kernels are CPU
kernels, and a 4-bit or 8-bit (bitsandbytes) trainer has no float weights to quantise again.
"""

from __future__ import annotations

import copy
import warnings

import torch

from agentlab.policy import Policy

# The cheaper samplers `TrainConfig.sampler` names, each with the linear layers it leaves in float
# (`int8_sampler`'s ``skip``). bench/RESULTS.md, "A cheaper sampler", measured both on SmolLM2-135M:
# every linear in int8 is the fast one and far from the trainer; keeping lm_head and down_proj float
# (the layers whose inputs have the outlier channels dynamic int8 rounds away) is closer and slower.
SAMPLERS: dict[str, tuple[str, ...]] = {
    "int8": (),
    "int8-partial": ("lm_head", "down_proj"),
}


def merged_model(policy: Policy) -> torch.nn.Module:
    """A copy of the policy's model with its LoRA adapter folded into the weights (no adapter left);
    a plain copy where it has none. The policy itself is unchanged."""
    model = copy.deepcopy(policy.model)
    return model.merge_and_unload() if policy.has_adapter else model


def int8_sampler(policy: Policy, skip: tuple[str, ...] = ()) -> Policy:
    """A sampling copy of ``policy``: adapter merged, every ``nn.Linear`` (the output layer too) in
    dynamic int8 with one scale per output channel, except those whose name contains one of ``skip``
    (e.g. ``("lm_head", "down_proj")``), which stay float. Rebuild it after each update so that it
    samples from the current policy.

    Dynamic int8 quantises each activation with one scale for the whole tensor, so a layer whose
    input has a few huge channels (an MLP's ``down_proj`` in small Llama-style models) loses the
    rest of its input to rounding: ``skip`` keeps such layers float. ``sampler_kl`` shows the cost."""
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    if policy.quantization is not None or policy.device.type != "cpu":
        raise ValueError("int8_sampler needs a float policy on the CPU (dynamic int8 kernels are CPU kernels; "
                         f"this one is {policy.quantization or 'float'} on {policy.device})")
    model = merged_model(policy).eval()
    with warnings.catch_warnings():
        # PyTorch marks torch.ao.quantization deprecated in favour of torchao (not a dependency here); the
        # eager dynamic int8 path still ships and works, so its two notices are hidden while it runs.
        warnings.filterwarnings("ignore", message="torch.ao.quantization is deprecated", category=DeprecationWarning)
        warnings.filterwarnings("ignore", message="torch.quantize_per_tensor", category=UserWarning)
        spec = {name: per_channel_dynamic_qconfig for name, module in model.named_modules()
                if isinstance(module, torch.nn.Linear) and not any(k in name for k in skip)}
        # in place: the merged model is already a private copy, and a second float copy would double the build's peak
        model = quantize_dynamic(model, spec, dtype=torch.qint8, inplace=True)
    sampler = Policy(model, policy.tokenizer, name=f"{policy.name} (int8 sampler)", quantization="int8-dynamic")
    sampler.action_format, sampler.share_prompts = policy.action_format, policy.share_prompts
    return sampler
