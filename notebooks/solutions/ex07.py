"""Reference solutions of notebook 07's exercises (checked by tests/test_exercises.py)."""


def projection_shapes(config):
    """(d_in, d_out) of the seven linear layers of one Llama/Qwen2 decoder layer."""
    h, i = config["hidden_size"], config["intermediate_size"]
    head_dim = h // config["num_attention_heads"]
    q = config["num_attention_heads"] * head_dim
    kv = config["num_key_value_heads"] * head_dim  # grouped-query attention: fewer key/value heads
    return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
            "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}


def lora_params(config, r, targets=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")):
    """A (r × d_in) and B (d_out × r) for every adapted projection, in every layer."""
    per_layer = sum(r * (d_in + d_out) for name, (d_in, d_out) in projection_shapes(config).items() if name in targets)
    return config["num_hidden_layers"] * per_layer


def memory_gb(config, r, linear_bits, other_bits):
    """Weights (linear layers at linear_bits, the rest at other_bits) + 16 bytes per LoRA parameter, in GB."""
    h, n = config["hidden_size"], config["num_hidden_layers"]
    shapes = projection_shapes(config)
    linear = n * sum(d_in * d_out for d_in, d_out in shapes.values())
    biases = n * sum(shapes[p][1] for p in ("q_proj", "k_proj", "v_proj")) if config.get("attention_bias") else 0
    norms = 2 * n * h + h
    embeddings = config["vocab_size"] * h * (1 if config["tie_word_embeddings"] else 2)
    weights = linear * linear_bits / 8 + (embeddings + norms + biases) * other_bits / 8
    lora = 16 * lora_params(config, r)  # fp32 weight + fp32 gradient + AdamW's two fp32 moments
    return (weights + lora) / 1e9
