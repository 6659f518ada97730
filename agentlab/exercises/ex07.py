"""Exercises of notebook 07 (4-bit LoRA on one GPU): LoRA's parameter count and the memory of a
4-bit LoRA run, both from a model's config alone.

A config is a dict with the keys of a Hugging Face ``config.json`` for a Llama/Qwen2-style
model: ``hidden_size``, ``intermediate_size``, ``num_hidden_layers``, ``num_attention_heads``,
``num_key_value_heads``, ``vocab_size``, ``tie_word_embeddings`` and ``attention_bias`` (True
for Qwen2: q, k and v projections carry a bias). One attention head is
``hidden_size // num_attention_heads`` wide. The reference numbers below were checked against
the parameter counts of the real architectures built on PyTorch's meta device (notebook 07).
"""

from __future__ import annotations

import math
import operator

from agentlab.exercises import exercise, first_mismatch, whole
from agentlab.memory import QWEN2_5

ALL_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

# The four Qwen2.5 instruct models of notebook 07 (their config.json, plus the q/k/v biases that Qwen2
# always has) and two made-up shapes.
CONFIGS = {
    **{f"Qwen2.5-{size}": dict(config, attention_bias=True) for size, config in QWEN2_5.items()},
    "tiny (no GQA, tied)": dict(hidden_size=96, intermediate_size=256, num_hidden_layers=3, num_attention_heads=4,
                                num_key_value_heads=4, vocab_size=1024, tie_word_embeddings=True, attention_bias=False),
    "made-up (GQA, untied)": dict(hidden_size=512, intermediate_size=1408, num_hidden_layers=6, num_attention_heads=8,
                                  num_key_value_heads=2, vocab_size=5000, tie_word_embeddings=False,
                                  attention_bias=False),
}


def _dims(c: dict) -> dict[str, tuple[int, int]]:
    """(d_in, d_out) of each projection in one decoder layer."""
    h, i = c["hidden_size"], c["intermediate_size"]
    head = h // c["num_attention_heads"]
    q, kv = c["num_attention_heads"] * head, c["num_key_value_heads"] * head
    return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
            "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}


def _lora(c: dict, r: int, targets=ALL_TARGETS) -> int:
    return c["num_hidden_layers"] * sum(r * (din + dout) for name, (din, dout) in _dims(c).items() if name in targets)


def _params(c: dict) -> tuple[int, int]:
    """(weights of the decoder's linear layers — what bitsandbytes quantises —, every other parameter)."""
    h, v, n = c["hidden_size"], c["vocab_size"], c["num_hidden_layers"]
    dims = _dims(c)
    linear = n * sum(din * dout for din, dout in dims.values())
    bias = n * sum(dims[p][1] for p in ("q_proj", "k_proj", "v_proj")) if c.get("attention_bias") else 0
    norms = n * 2 * h + h  # two RMSNorms per layer and the final one
    embeddings = v * h * (1 if c["tie_word_embeddings"] else 2)  # the output head shares the input table when tied
    return linear, embeddings + norms + bias


def _memory(c: dict, r: int, linear_bits: float, other_bits: float) -> float:
    linear, other = _params(c)
    return (linear * linear_bits / 8 + other * other_bits / 8 + 16 * _lora(c, r)) / 1e9


def _show(c: dict) -> str:
    return next((name for name, cfg in CONFIGS.items() if cfg == c), str(c))


# ---------------------------------------------------------------------------- 07.lora_params

def _lora_no_gqa(config, r, targets=ALL_TARGETS):
    h, i = config["hidden_size"], config["intermediate_size"]
    dims = {"q_proj": (h, h), "k_proj": (h, h), "v_proj": (h, h), "o_proj": (h, h),
            "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}  # k and v as wide as q
    return config["num_hidden_layers"] * sum(r * (a + b) for n, (a, b) in dims.items() if n in targets)


def _lora_product(config, r, targets=ALL_TARGETS):
    return config["num_hidden_layers"] * sum(r * a * b for n, (a, b) in _dims(config).items() if n in targets)


def _lora_one_layer(config, r, targets=ALL_TARGETS):
    return sum(r * (a + b) for n, (a, b) in _dims(config).items() if n in targets)


def _lora_only_a(config, r, targets=ALL_TARGETS):
    return config["num_hidden_layers"] * sum(r * a for n, (a, b) in _dims(config).items() if n in targets)


LORA_CASES = [
    ("Qwen2.5-0.5B", 16, ALL_TARGETS),
    ("Qwen2.5-7B", 16, ALL_TARGETS),
    ("tiny (no GQA, tied)", 8, ALL_TARGETS),
    ("Qwen2.5-1.5B", 8, ("q_proj", "v_proj")),
    ("made-up (GQA, untied)", 4, ("k_proj", "o_proj", "down_proj")),
    ("Qwen2.5-3B", 64, ALL_TARGETS),
]


@exercise("07.lora_params", wrong=[_lora_no_gqa, _lora_product, _lora_one_layer, _lora_only_a])
def check_lora_params(fn) -> str | None:
    """write lora_params(config, r, targets) -> int: trainable LoRA parameters over all layers of a
    Llama/Qwen2-style model (config: a dict as in config.json; targets: projection names)"""
    return first_mismatch(LORA_CASES, lambda case: whole(fn(dict(CONFIGS[case[0]]), case[1], tuple(case[2]))),
                          lambda case: _lora(CONFIGS[case[0]], *case[1:]), operator.eq, _explain_lora)


def _explain_lora(case, got, want) -> str:
    name, r, targets = case
    c = CONFIGS[name]
    where = f"{name} with r={r}, targets {list(targets)}"
    if not isinstance(got, (int, float)):
        return f"return a number (an int); for {where} you returned {type(got).__name__}"
    if got == _lora_one_layer(c, r, targets):
        return f"for {where} you counted one decoder layer; there are {c['num_hidden_layers']} of them"
    if got == _lora_product(c, r, targets):
        return (f"for {where} you returned r·d_in·d_out: LoRA trains A (r × d_in) and B (d_out × r), "
                "that is r·(d_in + d_out) per adapted layer")
    if got == _lora_only_a(c, r, targets):
        return f"for {where} you counted only A (r × d_in); B (d_out × r) is trained too"
    if got == _lora_no_gqa(c, r, targets) and c["num_key_value_heads"] != c["num_attention_heads"]:
        kv = c["num_key_value_heads"] * (c["hidden_size"] // c["num_attention_heads"])
        return (f"for {where}: k_proj and v_proj are narrower than q_proj (grouped-query attention): they output "
                f"num_key_value_heads × head_dim = {kv} values, not hidden_size = {c['hidden_size']}")
    return f"for {where} the count is {want:,}; you returned {got:,}"


# ---------------------------------------------------------------------------- 07.memory_gb

def _mem_all_4bit(config, r, linear_bits, other_bits):
    linear, other = _params(config)
    return ((linear + other) * linear_bits / 8 + 16 * _lora(config, r)) / 1e9  # embeddings quantised too


def _mem_gib(config, r, linear_bits, other_bits):
    return _memory(config, r, linear_bits, other_bits) * 1e9 / 2**30


def _mem_tied_twice(config, r, linear_bits, other_bits):
    extra = 0 if not config["tie_word_embeddings"] else config["vocab_size"] * config["hidden_size"]
    return _memory(config, r, linear_bits, other_bits) + extra * other_bits / 8 / 1e9


def _mem_lora_weights_only(config, r, linear_bits, other_bits):
    linear, other = _params(config)
    return (linear * linear_bits / 8 + other * other_bits / 8 + 4 * _lora(config, r)) / 1e9


def _mem_no_bias(config, r, linear_bits, other_bits):
    c = dict(config, attention_bias=False)
    return _memory(c, r, linear_bits, other_bits)


MEMORY_CASES = [
    ("Qwen2.5-1.5B", 16, 4.127, 32),
    ("Qwen2.5-7B", 16, 4.127, 32),
    ("Qwen2.5-0.5B", 8, 4.127, 16),
    ("Qwen2.5-3B", 32, 16, 16),
    ("tiny (no GQA, tied)", 8, 4.127, 32),
    ("made-up (GQA, untied)", 4, 4.5, 16),
]


@exercise("07.memory_gb", wrong=[_mem_all_4bit, _mem_gib, _mem_tied_twice, _mem_lora_weights_only, _mem_no_bias])
def check_memory_gb(fn) -> str | None:
    """write memory_gb(config, r, linear_bits, other_bits) -> GB (1e9 bytes): the decoder's linear weights at
    linear_bits, every other parameter at other_bits, plus 16 bytes per LoRA parameter (all 7 projections, rank r)"""
    return first_mismatch(MEMORY_CASES, lambda case: fn(dict(CONFIGS[case[0]]), *case[1:]),
                          lambda case: _memory(CONFIGS[case[0]], *case[1:]),
                          lambda got, want: isinstance(got, (int, float)) and math.isclose(got, want, rel_tol=1e-6),
                          _explain_memory)


def _explain_memory(case, got, want) -> str:
    name, r, linear_bits, other_bits = case
    c = CONFIGS[name]
    if not isinstance(got, (int, float)):
        return f"return a number of GB (a float); you returned {type(got).__name__}"
    where = f"{name} (r={r}, linear_bits={linear_bits}, other_bits={other_bits})"
    close = lambda other: math.isclose(got, other, rel_tol=1e-6)  # noqa: E731
    if close(want * 1e9 / 2**30):
        return f"for {where} you returned GiB (2^30 bytes); the exercise asks for GB = 10^9 bytes"
    if close(want * 8):
        return f"for {where} your answer is 8× too large: divide bits by 8 to get bytes"
    if close(_mem_all_4bit(c, r, linear_bits, other_bits)):
        return (f"for {where} you stored every parameter at linear_bits; bitsandbytes quantises only the "
                "decoder's linear layers: embeddings, the output head and the norms keep other_bits")
    if close(_mem_tied_twice(c, r, linear_bits, other_bits)):
        return (f"{name} ties its output head to the input embedding (tie_word_embeddings=True): "
                "the vocab × hidden table is stored once")
    if close(_mem_lora_weights_only(c, r, linear_bits, other_bits)):
        return (f"for {where} you counted 4 bytes per LoRA parameter: training also keeps its fp32 "
                "gradient and AdamW's two fp32 moments, 16 bytes in all")
    if c.get("attention_bias") and close(_mem_no_bias(c, r, linear_bits, other_bits)):
        return (f"{name} has attention_bias=True: q_proj, k_proj and v_proj each carry a bias (as wide as "
                "their output), stored at other_bits")
    linear, other = _params(c)
    return (f"for {where} the answer is {want:.4f} GB ({linear:,} quantised weights, {other:,} other "
            f"parameters, {_lora(c, r):,} LoRA parameters); you returned {got:.4f}")
