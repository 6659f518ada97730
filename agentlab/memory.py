"""Memory: what a training run needs, estimated before its first rollout, and the micro-batch budget that fits.

    shape = ModelShape.from_config(LlamaConfig(...), dtype=torch.float32)
    est = estimate(shape, trainable=lora_parameters(shape, r=8), micro_batch_tokens=2048,
                   rollout_rows=128, context=330, action_share=0.3)
    print(est.describe(available_bytes("cpu")))

`agentlab.train.preflight` runs before a run's first rollout: it prints the estimate, picks the
largest micro-batch budget that fits when ``TrainConfig.micro_batch_tokens`` is None, and stops a
run that cannot fit with an error that names what to lower. The alternative is the kernel's OOM
killer, which ends the process without a message or a checkpoint. The parts, in bytes:

    weights      the base model: parameters × bytes each (compute dtype; NF4 and 8-bit linear weights less)
    adapter      the trainable parameters (LoRA, value head) and their gradients, float32: 2 × 4 × n
    optimiser    AdamW's two moments per trainable parameter, float32: 2 × 4 × n
    activations  what one micro-batch's forward pass keeps for its backward pass (`activation_bytes`)
    KV cache     the rollout's keys and values, rows × context × layers × 2 × kv_heads × head_dim × bytes
                 (`kv_cache_bytes`), plus the next-token logits of every row, rows × vocab × bytes,
                 times ROLLOUT_OVERHEAD
    sampler      a cheaper sampling copy of the policy (`agentlab.sampler`), where the run has one: held
                 while it samples; it is built from a float copy, so the estimate counts that copy's bytes

By default the parts are added although the rollout's cache is freed before the update: the sum
is what the process holds if the allocator keeps freed pages, and an estimate that errs high stops
a run early instead of letting it be killed. ``estimate(..., take_turns=True)`` counts only the
larger of activations and KV cache, since rollout fills the cache and keeps no activations while
the update keeps activations and no cache: the peak where freed memory is reused and the two
phases do not overlap.
"""

from __future__ import annotations

import ctypes
import os
import re
from dataclasses import dataclass
from pathlib import Path

import torch

# Measured peak RSS over the counted tensors, on CPU in float32 with LoRA on every projection (the
# backward's temporary gradients and the allocator's slack come on top of what autograd keeps). A
# fresh process needs less; a training process, whose micro-batches of different widths leave
# freed memory glibc's allocator keeps but cannot reuse, needs this much. tests/test_memory.py
# checks that the estimate still covers the live memory of an update.
ACTIVATION_OVERHEAD = 1.5
# The rollout's cache grows by one concatenation per sampled token and shrinks as episodes end,
# and the freed copies stay in the process: the measured peak over the cache and logits.
ROLLOUT_OVERHEAD = 2.0
SAFE_SHARE = 0.8  # plan at most this share of the available memory: the estimate's error, the rest of the process
NF4_BYTES = (4 + 8 / 64 + 32 / (64 * 256)) / 8  # 4-bit codes, absmax per 64 weights, double-quantised (bench/memory.py)
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# The Qwen2.5 instruct models as their config.json gives them (Qwen/Qwen2.5-{size}-Instruct), for
# notebook 07, its exercises and bench/gpu.py. Qwen2 puts a bias on q, k and v without a config field.
QWEN2_5 = {
    "0.5B": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "1.5B": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                 num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "3B": dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
               num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "7B": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
               num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False),
}


class MemoryBudgetError(RuntimeError):
    """Raised before the first rollout when a run's estimated memory exceeds what the machine has."""


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a decoder-only transformer that set its memory (Llama-style configs)."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool = True  # the output layer shares the embedding matrix
    attention_bias: bool = False  # q, k and v carry a bias (Qwen2)
    dtype_bytes: int = 4  # compute dtype: 4 on CPU (float32), 2 on CUDA (bfloat16)
    quantization: str | None = None  # None, "4bit" or "8bit": the base's linear weights

    @classmethod
    def from_config(cls, config, dtype: torch.dtype = torch.float32, quantization: str | None = None) -> "ModelShape":
        heads = config.num_attention_heads
        return cls(layers=config.num_hidden_layers, hidden=config.hidden_size, heads=heads,
                   kv_heads=getattr(config, "num_key_value_heads", None) or heads,
                   head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads,
                   intermediate=config.intermediate_size, vocab=config.vocab_size,
                   tied=bool(getattr(config, "tie_word_embeddings", True)),
                   attention_bias=bool(getattr(config, "attention_bias", getattr(config, "model_type", "") == "qwen2")),
                   dtype_bytes=torch.finfo(dtype).bits // 8, quantization=quantization)

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each projection of one layer, by its module name."""
        H, I = self.hidden, self.intermediate
        return {"q_proj": (H, self.q_dim), "k_proj": (H, self.kv_dim), "v_proj": (H, self.kv_dim),
                "o_proj": (self.q_dim, H), "gate_proj": (H, I), "up_proj": (H, I), "down_proj": (I, H)}

    def parameters(self) -> tuple[int, int]:
        """(parameters in the layers' projections, all others): the first are the ones quantisation shrinks."""
        linear = self.layers * sum(i * o for i, o in self.linear_shapes().values())
        other = self.vocab * self.hidden * (1 if self.tied else 2) + (2 * self.layers + 1) * self.hidden  # + norms
        if self.attention_bias:
            other += self.layers * (self.q_dim + 2 * self.kv_dim)
        return linear, other

    def weight_bytes(self) -> float:
        linear, other = self.parameters()
        per_linear = {None: self.dtype_bytes, "4bit": NF4_BYTES, "8bit": 1.0}[self.quantization]
        return linear * per_linear + other * self.dtype_bytes


def lora_parameters(shape: ModelShape, r: int, targets=LORA_TARGETS) -> int:
    """A LoRA adapter's parameters: r × (in + out) for each targeted projection of each layer."""
    return shape.layers * sum(r * (i + o) for name, (i, o) in shape.linear_shapes().items() if name in targets)


def kv_cache_bytes(shape: ModelShape, tokens: int) -> int:
    """Keys and values of every layer for ``tokens`` tokens (rows × context) in the compute dtype."""
    return tokens * shape.layers * 2 * shape.kv_dim * shape.dtype_bytes


def activation_bytes(shape: ModelShape, tokens: int, action_tokens: float, checkpointing: bool = False) -> float:
    """Peak bytes that one forward+backward over ``tokens`` (rows × padded length) adds, of which
    ``action_tokens`` get the vocabulary distribution (`Policy.score` with ``only``).

    Per token and layer, autograd keeps about 12 vectors of the hidden width (input and output of
    both RMSNorms, the query before and after RoPE, the attention output and its reshaped copy,
    the two residual sums), 4 of the MLP width (gate, its SiLU, up, their product), 3 of the
    key/value width (k, v, k after RoPE) and, with grouped-query attention, k and v repeated to
    every head. Attention itself adds nothing per pair of tokens: PyTorch's fused attention keeps
    only its output and one log-sum-exp per row. Outside the layers about 24 hidden-width vectors
    per token remain (the embedding, the final norm, the hidden states the output layer reads, the
    gradients flowing back), and each action token adds 5 vocabulary-wide float32 rows (logits,
    scaled logits, log-softmax, its exponential, the entropy's product). Gradient checkpointing
    keeps only each layer's input and recomputes one layer's full set at a time, but the allocator
    holds on to the freed recomputations: about 8 hidden widths per token and layer stay resident.
    """
    H, I = shape.hidden, shape.intermediate
    per_layer = 12 * H + 4 * I + 3 * shape.kv_dim + (2 * shape.q_dim if shape.kv_heads < shape.heads else 0)
    if shape.dtype_bytes < 4:  # peft casts each LoRA input to the adapter's float32 and keeps the copy
        per_layer += (6 * H + shape.q_dim + I) * 4 / shape.dtype_bytes
    layers = shape.layers * per_layer if not checkpointing else shape.layers * 8 * H + per_layer
    trunk = tokens * layers * shape.dtype_bytes * ACTIVATION_OVERHEAD
    return trunk + tokens * 24 * H * 4 + action_tokens * 5 * shape.vocab * 4


@dataclass
class MemoryEstimate:
    """The parts of a run's memory (bytes) and the sizes they were computed for."""

    weights: float
    adapter: float
    optimiser: float
    activations: float
    kv_cache: float
    micro_batch_tokens: int  # tokens of the largest forward+backward pass
    rollout_rows: int
    context: int  # tokens of the longest episode
    take_turns: bool = False  # the peak holds the larger of activations and KV cache, not both (module docstring)
    sampler: float = 0.0  # a sampling copy of the policy, held with the KV cache while the rollout runs

    @property
    def total(self) -> float:
        rollout = self.kv_cache + self.sampler
        held = max(self.activations, rollout) if self.take_turns else self.activations + rollout
        return self.weights + self.adapter + self.optimiser + held

    def describe(self, available: float | None = None) -> str:
        size = format_bytes
        parts = (f"weights {size(self.weights)}, adapter {size(self.adapter)}, optimiser {size(self.optimiser)}, "
                 f"activations {size(self.activations)} (micro-batches of {self.micro_batch_tokens:,} tokens), "
                 f"KV cache {size(self.kv_cache)} ({self.rollout_rows} episodes of up to {self.context:,} tokens)"
                 + (f", sampler copy {size(self.sampler)}" if self.sampler else ""))
        of = f" of {size(available)} available" if available is not None else ""
        total = "peak (activations and KV cache take turns)" if self.take_turns else "total"
        return f"memory estimate: {parts}; {total} {size(self.total)}{of}"


def estimate(shape: ModelShape, trainable: int, micro_batch_tokens: int, rollout_rows: int, context: int,
             action_share: float, checkpointing: bool = False, take_turns: bool = False,
             sampler: float = 0.0) -> MemoryEstimate:
    """The memory of a run whose largest pass holds ``micro_batch_tokens`` tokens, an ``action_share`` of
    them action tokens, and whose rollout plays ``rollout_rows`` episodes of up to ``context`` tokens;
    ``take_turns``: the peak holds the larger of activations and KV cache instead of their sum;
    ``sampler``: the bytes of a sampling copy of the policy, held during the rollout (0: none)."""
    tokens = max(micro_batch_tokens, context)  # an episode longer than the budget runs alone
    kv = kv_cache_bytes(shape, rollout_rows * context)
    logits = rollout_rows * shape.vocab * 4  # rollout reads one position's logits per row, in float32
    return MemoryEstimate(
        weights=shape.weight_bytes(), adapter=2 * 4 * trainable, optimiser=2 * 4 * trainable,
        activations=activation_bytes(shape, tokens, action_share * tokens, checkpointing),
        kv_cache=ROLLOUT_OVERHEAD * (kv + logits), micro_batch_tokens=tokens, rollout_rows=rollout_rows,
        context=context, take_turns=take_turns, sampler=sampler)


def largest_budget(shape: ModelShape, trainable: int, available: float, **sizes) -> int:
    """The most tokens per micro-batch whose estimate stays within ``SAFE_SHARE`` of ``available``;
    ``sizes`` are `estimate`'s other arguments. The activations grow linearly with the budget; taking turns
    (``take_turns``), they need not share the room with the KV cache, which must then fit on its own."""
    est = estimate(shape, trainable, 0, **sizes)
    per_token = activation_bytes(shape, 1, sizes["action_share"], sizes.get("checkpointing", False))
    rest = est.weights + est.adapter + est.optimiser + (0 if est.take_turns else est.kv_cache + est.sampler)
    return int((SAFE_SHARE * available - rest) // per_token)


# ---------------------------------------------------------------------------- the machine

def available_bytes(device: str | torch.device = "cpu") -> float | None:
    """Memory a run can still take: free CUDA memory, else MemAvailable (capped by a cgroup limit), and
    at most ``AGENTLAB_MEMORY_GB`` when that is set; None if unknown. On the CPU it first hands back
    what the process freed but its allocator kept (`release_freed_heap`), so that counts as free."""
    device = torch.device(device)
    if device.type == "cpu":
        release_freed_heap()
    free = _free_bytes(device)
    cap = os.environ.get("AGENTLAB_MEMORY_GB")
    if not cap:
        return free
    try:
        cap_bytes = float(cap) * 2**30
    except ValueError:
        raise ValueError(f"AGENTLAB_MEMORY_GB must be a number of GiB, e.g. 8, got {cap!r}") from None
    if not cap_bytes > 0:
        raise ValueError(f"AGENTLAB_MEMORY_GB must be above 0, got {cap!r}")
    # runs that share one machine each size their micro-batches from its whole free memory otherwise
    return cap_bytes if free is None else min(free, cap_bytes)


def release_freed_heap() -> bool:
    """Return to the system the pages of freed memory that glibc's heap still holds (``malloc_trim``);
    False where the C library has no such call (macOS, musl, Windows).

    glibc keeps blocks under its mmap threshold (up to 32 MB) in heaps that a free does not shrink, so a
    phase that allocated many such tensors, a warm-up's SFT of a real model, leaves gigabytes mapped
    after it ends; MemAvailable counts them as used, and a run planned right after would be sized, or
    refused, as if they were."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError, TypeError):
        return False
    return bool(trim(0))


def _free_bytes(device: torch.device) -> float | None:
    if device.type == "cuda":
        return float(torch.cuda.mem_get_info(device)[0])
    meminfo = Path("/proc/meminfo")
    if not meminfo.exists():
        return None
    free = float(re.search(r"MemAvailable:\s+(\d+) kB", meminfo.read_text()).group(1)) * 1024
    cgroups = (("memory.max", "memory.current"), ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes"))
    for limit, used in cgroups:  # v2, v1
        limit_path, used_path = Path("/sys/fs/cgroup") / limit, Path("/sys/fs/cgroup") / used
        if limit_path.exists() and used_path.exists() and limit_path.read_text().strip().isdigit():
            free = min(free, float(limit_path.read_text()) - float(used_path.read_text()))  # a container's own limit
    return free


def peak_rss_reset() -> None:
    """Start measuring the peak resident memory afresh (Linux: /proc/self/clear_refs)."""
    Path("/proc/self/clear_refs").write_text("5")


def peak_rss() -> int:
    """Peak resident memory of this process in bytes since start or `peak_rss_reset` (Linux)."""
    return int(re.search(r"VmHWM:\s+(\d+) kB", Path("/proc/self/status").read_text()).group(1)) * 1024


def rss() -> int:
    """Resident memory of this process now, in bytes (Linux)."""
    return int(re.search(r"VmRSS:\s+(\d+) kB", Path("/proc/self/status").read_text()).group(1)) * 1024


def format_bytes(n: float) -> str:
    """``n`` bytes in MB or GB, as the estimate prints them."""
    return f"{n / 2**30:.2f} GB" if abs(n) >= 2**30 else f"{n / 2**20:.1f} MB"

