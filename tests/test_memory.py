"""Tests of agentlab.memory and memory-bounded updates: micro-batches give the minibatch's gradient,
an update's peak memory stays flat as the batch grows, the estimate matches what a pass takes, and a
run that cannot fit stops before its first rollout."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import numpy as np
import pytest
import torch

from agentlab import memory
from agentlab.algos import grpo, ppo
from agentlab.policy import LoraSettings, load_policy

# SmolLM2-135M's shape (30 layers in the real model), random weights, no download
SMOL = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
            vocab_size=49152)

# One GRPO update in a fresh process on fixed-length episodes of a random-weight model; prints the
# peak resident memory it added and the estimate of its largest pass. A fresh process per size, so
# that no size inherits another's freed memory.
UPDATE_PEAK = r"""
import json, sys
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
from agentlab import memory
from agentlab.algos import grpo
from agentlab.policy import Policy
from agentlab.rollout import ACTION, OBSERVATION, PROMPT, Trajectory
from agentlab.tiny import build_tiny

a = json.loads(sys.argv[1])
torch.manual_seed(0)
config = LlamaConfig(**a["arch"])
lora = LoraConfig(r=8, target_modules=list(memory.LORA_TARGETS), task_type="CAUSAL_LM")
model = get_peft_model(LlamaForCausalLM(config), lora)
policy = Policy(model, AutoTokenizer.from_pretrained(str(build_tiny(verbose=False))))
roles = [PROMPT] * 32 + ([ACTION] * 6 + [OBSERVATION] * 10) * 4  # 96 tokens, a quarter of them action tokens
turns = [-1] * 32 + sum(([k] * 6 + [-1] * 10 for k in range(4)), [])
trajs = [Trajectory(env_id="x", task_id=str(i), token_ids=torch.randint(3, 1000, (96,)).tolist(), roles=roles,
                    turn_index=turns, logprobs=[-1.0 * (r == ACTION) for r in roles], rewards=[float(i % 2)])
         for i in range(a["episodes"])]
rewards = torch.tensor([t.total_reward for t in trajs])
opt = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-4)
grpo.update(policy, opt, trajs[:2], rewards[:2], 2, grpo.GRPOSettings(epochs=1))  # first-call costs, not measured
memory.peak_rss_reset()
base = memory.rss()
grpo.update(policy, opt, trajs, rewards, 2, grpo.GRPOSettings(epochs=1, minibatch_size=len(trajs)),
            micro_batch_tokens=a["budget"])
peak = memory.peak_rss() - base
rows = len(trajs) if a["budget"] is None else a["budget"] // 96  # the largest pass
est = memory.activation_bytes(memory.ModelShape.from_config(config), rows * 96, rows * 24)
print(json.dumps({"peak": peak, "estimate": est, "rows": rows}))
"""


# A rollout of GuessNumber episodes by a random-weight model in a fresh process, ``chunk`` episodes at a
# time; prints the peak resident memory it added and the estimate of its KV cache for ``chunk`` rows.
# The model writes random tokens, so every turn runs to the token limit: all episodes have one length.
ROLLOUT_PEAK = r"""
import json, sys
import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
from agentlab import memory
from agentlab.policy import Policy
from agentlab.rollout import SamplingSettings, make_envs, rollout
from agentlab.tiny import build_tiny

a = json.loads(sys.argv[1])
torch.manual_seed(0)
tok = AutoTokenizer.from_pretrained(str(build_tiny(verbose=False)))
config = LlamaConfig(**{**a["arch"], "vocab_size": len(tok)})
policy = Policy(LlamaForCausalLM(config).eval(), tok)


def run(n, chunk, seed):
    gen, out = torch.Generator().manual_seed(seed), []
    for s in range(0, n, chunk):
        envs = make_envs("agentlab/GuessNumber-v0", min(chunk, n - s), max_steps=3)
        out += rollout(envs, policy, SamplingSettings(max_new_tokens=24), seeds=range(s, s + len(envs)), generator=gen)
    return out


run(2, 2, 1)  # first-call costs, not measured
memory.peak_rss_reset()
base = memory.rss()
trajs = run(a["episodes"], a["chunk"], 0)
peak = memory.peak_rss() - base
context = max(len(t.token_ids) for t in trajs)
est = memory.estimate(memory.ModelShape.from_config(config), 0, 0, rollout_rows=a["chunk"], context=context,
                      action_share=0.3)
print(json.dumps({"peak": peak, "estimate": est.kv_cache, "context": context}))
"""


def measured(script: str, args: dict) -> dict:
    """Run one of the scripts above in a fresh process and return what it prints."""
    # One thread: many small passes stay quick on a shared machine. A fixed mmap threshold: every large
    # tensor gets pages of its own and returns them when freed, so the peak is the live memory, not
    # also what glibc keeps for later (which varies by tens of MB from run to run).
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": "65536"}
    run = subprocess.run([sys.executable, "-c", script, json.dumps(args)], capture_output=True, text=True, timeout=600,
                         env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def update_peak(episodes: int, budget: int | None, layers: int = 2) -> dict:
    """Peak memory (bytes) that one GRPO step over ``episodes`` of 96 tokens adds, measured in a fresh process."""
    return measured(UPDATE_PEAK, {"arch": {**SMOL, "num_hidden_layers": layers}, "episodes": episodes, "budget": budget})


def rollout_peak(episodes: int, chunk: int, layers: int = 8) -> dict:
    """Peak memory (bytes) that sampling ``episodes`` GuessNumber episodes, ``chunk`` at a time, adds."""
    return measured(ROLLOUT_PEAK, {"arch": {**SMOL, "num_hidden_layers": layers}, "episodes": episodes, "chunk": chunk})


# ---------------------------------------------------------------------------- the estimate's arithmetic

def test_shape_counts_the_parameters_of_the_model():
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    tiny = dict(hidden_size=96, intermediate_size=256, num_hidden_layers=3, num_attention_heads=4, vocab_size=1024)
    qwen = Qwen2Config(**tiny, num_key_value_heads=2)  # a bias on q, k and v, which no config field names
    for config in (LlamaConfig(**{**SMOL, "num_hidden_layers": 2}), LlamaConfig(**tiny), qwen):
        model = AutoModelForCausalLM.from_config(config)
        shape = memory.ModelShape.from_config(config)
        assert sum(shape.parameters()) == sum(p.numel() for p in model.parameters())
        assert shape.weight_bytes() == 4 * sum(p.numel() for p in model.parameters())
        lora = get_peft_model(model, LoraConfig(r=8, target_modules=list(memory.LORA_TARGETS), task_type="CAUSAL_LM"))
        assert memory.lora_parameters(shape, 8) == sum(p.numel() for p in lora.parameters() if p.requires_grad)


@pytest.mark.parametrize("take_turns", [False, True])
def test_largest_budget_is_the_edge_of_what_fits(take_turns):
    from transformers import LlamaConfig

    shape = memory.ModelShape.from_config(LlamaConfig(**SMOL))
    sizes = dict(rollout_rows=64, context=330, action_share=0.3, take_turns=take_turns)
    available = 12 * 2**30
    budget = memory.largest_budget(shape, 2_000_000, available, **sizes)
    assert memory.estimate(shape, 2_000_000, budget, **sizes).total <= memory.SAFE_SHARE * available
    assert memory.estimate(shape, 2_000_000, budget + 16, **sizes).total > memory.SAFE_SHARE * available
    assert budget < 64 * 330 / 4, "a real model on 12 GB takes a small share of a minibatch per pass"


def test_activations_and_kv_cache_add_up_or_take_turns():
    """By default the estimate holds activations and KV cache at once; with ``take_turns`` only the larger,
    as when rollout (the cache) and update (the activations) reuse each other's freed memory."""
    from transformers import Qwen2Config

    shape = memory.ModelShape.from_config(Qwen2Config(**memory.QWEN2_5["7B"]), torch.float32, "4bit")
    for rows in (8, 128):  # the activations larger, then the KV cache
        sizes = dict(rollout_rows=rows, context=1_200, action_share=0.25, checkpointing=True)
        held = memory.estimate(shape, 40_000_000, 1_200, **sizes)
        turns = memory.estimate(shape, 40_000_000, 1_200, **sizes, take_turns=True)
        # 28 layers × keys and values × 4 kv heads × 128 wide × 4 bytes, and 152,064 float32 logits per episode
        assert held.kv_cache == memory.ROLLOUT_OVERHEAD * (rows * 1_200 * 28 * 2 * 4 * 128 * 4 + rows * 152_064 * 4)
        assert (held.activations > held.kv_cache) == (rows == 8)
        assert (turns.activations, turns.kv_cache) == (held.activations, held.kv_cache)  # the same parts ...
        rest = held.weights + held.adapter + held.optimiser
        assert held.total == pytest.approx(rest + held.activations + held.kv_cache)  # ... added
        assert turns.total == pytest.approx(rest + max(held.activations, held.kv_cache))  # ... or the larger alone
        assert "take turns" in turns.describe() and "take turns" not in held.describe()


# ---------------------------------------------------------------------------- micro-batches are the minibatch

@pytest.fixture
def one_thread():
    """Many small passes on one thread: on a shared 2-core machine two threads spin-wait on each other."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def one_step_gradient(warm_path, trajs, algo: str, micro_batch_tokens: int | None, checkpointing: bool = False):
    """The gradient of one update that is a single step over the whole batch, and its logs (lr 0: nothing moves)."""
    torch.manual_seed(0)  # the same LoRA A every time
    policy = load_policy(str(warm_path), lora=LoraSettings(r=8, alpha=16))
    for name, p in policy.model.named_parameters():  # LoRA B starts at 0: give the adapter a gradient of its own
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.02, generator=torch.Generator().manual_seed(1))
    if checkpointing:
        policy.model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        policy.model.train()
    params = policy.trainable_parameters()
    opt = torch.optim.SGD(params, lr=0.0)
    if algo == "grpo":
        rewards = torch.tensor([t.total_reward for t in trajs])
        settings = grpo.GRPOSettings(epochs=1, minibatch_size=len(trajs), max_grad_norm=1e9)
        stats = grpo.update(policy, opt, trajs, rewards, 8, settings, micro_batch_tokens=micro_batch_tokens)
    else:
        head = ppo.ValueHead(policy.model.config.hidden_size)
        torch.nn.init.normal_(head.linear.weight, std=0.1, generator=torch.Generator().manual_seed(2))
        opt.add_param_group({"params": list(head.parameters())})
        params = params + list(head.parameters())
        settings = ppo.PPOSettings(epochs=1, minibatch_size=len(trajs), max_grad_norm=1e9, beta=0.1)
        stats = ppo.update(policy, opt, trajs, settings, value_head=head, micro_batch_tokens=micro_batch_tokens)
    return [p.grad.clone() for p in params], stats


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_accumulated_gradient_equals_the_full_batch_gradient(warm_path, batch, algo, one_thread):
    batch = batch[:16]  # two groups of 8
    lengths = sorted(len(t.token_ids) for t in batch)
    assert lengths[0] < lengths[-1], "episodes of different lengths: micro-batches cut different padding"
    full, full_stats = one_step_gradient(warm_path, batch, algo, None)
    same, same_stats = one_step_gradient(warm_path, batch, algo, 10**9)  # everything fits: today's pass exactly
    assert all(torch.equal(a, b) for a, b in zip(full, same)) and same_stats == full_stats
    for budget in (4 * lengths[-1], lengths[-1] - 1):  # a few episodes per micro-batch; one (too long for the budget)
        parts, parts_stats = one_step_gradient(warm_path, batch, algo, budget)
        scale = max(g.abs().max() for g in full)
        assert all(torch.allclose(a, b, rtol=1e-4, atol=1e-5 * scale) for a, b in zip(full, parts)), budget
        for key in ("loss", "pg_loss", "entropy", "clip_frac", "approx_kl", "kl", "v_loss"):
            if key in full_stats:
                assert parts_stats[key] == pytest.approx(full_stats[key], rel=1e-4, abs=1e-7), key


def test_gradient_checkpointing_gives_the_same_gradient(warm_path, batch, one_thread):
    plain, _ = one_step_gradient(warm_path, batch[:16], "grpo", 4 * 320)
    checkpointed, _ = one_step_gradient(warm_path, batch[:16], "grpo", 4 * 320, checkpointing=True)
    scale = max(g.abs().max() for g in plain)
    assert all(torch.allclose(a, b, rtol=1e-4, atol=1e-5 * scale) for a, b in zip(plain, checkpointed))


# ---------------------------------------------------------------------------- memory, measured

def test_update_memory_stays_flat_as_the_batch_grows():
    """Episodes of 96 tokens on a SmolLM2-shaped model with 2 layers, one GRPO step over the batch:
    with micro-batches of 4 episodes the peak stays put from 8 to 32 episodes, in one pass it grows
    with the batch. The estimate of the largest pass covers its live memory; it is calibrated on the
    resident memory under glibc's default allocator, which keeps some freed memory on top."""
    bounded = [update_peak(n, 4 * 96) for n in (8, 16, 32)]
    whole = [update_peak(n, None) for n in (8, 32)]
    peaks = [r["peak"] for r in bounded]
    assert max(peaks) - min(peaks) < 0.1 * max(peaks), peaks
    assert whole[1]["peak"] > 3 * whole[0]["peak"] and whole[1]["peak"] > 5 * max(peaks), (whole, peaks)
    for r in bounded + whole:
        assert 1.0 < r["estimate"] / r["peak"] < 1.5, r


def test_rollout_memory_stays_flat_when_sampled_in_chunks():
    """48 episodes sampled 16 at a time take the memory of 16, and all 48 at once about three times
    as much; the KV cache estimate of the rows sampled together covers the measured peak."""
    chunked = [rollout_peak(16, 16), rollout_peak(48, 16)]
    whole = rollout_peak(48, 48)
    peaks = [r["peak"] for r in chunked]
    assert max(peaks) - min(peaks) < 0.1 * max(peaks), peaks
    assert whole["peak"] > 2.5 * max(peaks), (whole, peaks)
    for r in chunked + [whole]:
        assert 1.0 < r["estimate"] / r["peak"] < 1.5, r


def test_agentlab_memory_gb_caps_what_a_run_may_take(monkeypatch):
    monkeypatch.delenv("AGENTLAB_MEMORY_GB", raising=False)
    assert memory.available_bytes("cpu") > 2**30, "this machine reports its free memory"
    monkeypatch.setattr(memory, "_free_bytes", lambda device: 8 * 2**30)  # a machine with 8 GiB free, held still
    assert memory.available_bytes("cpu") == 8 * 2**30
    monkeypatch.setenv("AGENTLAB_MEMORY_GB", "0.5")
    assert memory.available_bytes("cpu") == 0.5 * 2**30
    monkeypatch.setenv("AGENTLAB_MEMORY_GB", "100")  # a cap above what is free changes nothing
    assert memory.available_bytes("cpu") == 8 * 2**30
    monkeypatch.setattr(memory, "_free_bytes", lambda device: None)  # a machine that does not say: the cap is all there is
    assert memory.available_bytes("cpu") == 100 * 2**30
    for bad in ("eight", "0", "-2"):
        monkeypatch.setenv("AGENTLAB_MEMORY_GB", bad)
        with pytest.raises(ValueError, match="AGENTLAB_MEMORY_GB"):
            memory.available_bytes("cpu")


FREED_IN_THE_HEAP = """
import torch
from agentlab import memory

def rss_mb():
    return memory.rss() / 2**20

big = torch.ones(30 * 2**18)  # 30 MB, mapped on its own; freeing it raises glibc's mmap threshold above 1 MB
del big
blocks = [torch.ones(2**18) for _ in range(300)]  # 300 tensors of 1 MB, now served from the heap
last = blocks[-1]  # kept: the highest of them, so glibc's own trimming of the heap's top cannot reach the rest
held = rss_mb()
del blocks
freed = rss_mb()
memory.available_bytes("cpu")
print(held, freed, rss_mb())
"""


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's heap")
def test_memory_the_process_freed_counts_as_available():
    # Notebook 08 on real-cpu: after the warm-up's SFT the process held 16 GB it had freed, and the run's
    # preflight saw 7.5 GB of 23 free. Measured on the process's own RSS, which other processes do not move.
    out = subprocess.run([sys.executable, "-c", FREED_IN_THE_HEAP], capture_output=True, text=True, check=True)
    held, freed, after = map(float, out.stdout.split())
    assert freed > held - 100, "glibc kept the freed blocks mapped (the case this guards against)"
    assert after < freed - 250, (held, freed, after)


# ---------------------------------------------------------------------------- before the first rollout

def test_a_run_that_cannot_fit_stops_before_any_rollout(tmp_path, warm_path, monkeypatch):
    from agentlab import train as training

    def no_rollout(*args, **kwargs):
        raise AssertionError("a rollout ran before the memory check")

    monkeypatch.setattr(training, "collect", no_rollout)
    monkeypatch.setattr(training, "greedy_eval", no_rollout)
    monkeypatch.setattr(memory, "available_bytes", lambda device: 40 * 2**20)  # a machine with 40 MB to spare
    cfg = training.TrainConfig(profile="ci", policy=str(warm_path), out_dir=str(tmp_path / "big"), tasks_per_update=4,
                               group_size=4, eval_episodes=8)
    what_to_lower = "micro_batch_tokens.*group_size.*max_new_tokens.*gradient_checkpointing"
    policy = training.load_training_policy(cfg)
    with pytest.raises(memory.MemoryBudgetError, match=what_to_lower):
        training.train(cfg, policy, progress=False)
    with pytest.raises(memory.MemoryBudgetError, match=r"micro_batch_tokens \(now 100,000\)"):
        training.train(training.TrainConfig(**{**vars(cfg), "micro_batch_tokens": 100_000}), policy, progress=False)
    assert not (tmp_path / "big" / "eval.jsonl").exists()


def test_preflight_picks_a_budget_that_fits(warm_path, monkeypatch, capsys):
    from agentlab import train as train_mod
    from agentlab.train import TrainConfig, eval_tasks, resolve

    policy = load_policy(str(warm_path), lora=LoraSettings(r=8, alpha=16))
    cfg = resolve(TrainConfig(profile="ci", tasks_per_update=4, group_size=4, eval_episodes=8))
    tasks = eval_tasks(cfg)
    context = train_mod.episode_tokens(policy, cfg.env_id, {}, tasks, cfg.max_new_tokens)[0]
    roomy = train_mod.preflight(policy, cfg, tasks)
    assert roomy.micro_batch_tokens > 32 * context, "the tiny policy's minibatches fit in one pass"
    assert roomy.rollout_rows is None, "and all 16 episodes are sampled in one batch"
    monkeypatch.setattr(memory, "available_bytes", lambda device: 150 * 2**20)
    tight = train_mod.preflight(policy, cfg, tasks)
    assert context <= tight.micro_batch_tokens < 32 * context, "on 150 MB a minibatch runs in pieces"
    assert tight.rollout_rows is None
    out = capsys.readouterr().out
    assert out.count("memory estimate: weights") == 2 and "KV cache" in out and "available" in out


def test_rollout_chunks_are_whole_groups_then_parts_of_one():
    from agentlab.train import rollout_chunks

    assert rollout_chunks(32, 8) == [24, 16, 8, 7, 6, 5, 4, 3, 2, 1]
    assert rollout_chunks(40, 8) == [32, 24, 16, 8, 7, 6, 5, 4, 3, 2, 1]  # 40 held-out tasks, 4 groups of 8
    assert rollout_chunks(1, 8) == []


def test_a_run_whose_rollout_does_not_fit_samples_in_chunks(tmp_path, warm_path, monkeypatch, capsys):
    """Where the KV cache of a whole update's episodes leaves no room for even one episode's pass, the
    run samples fewer episodes at a time instead of stopping, and trains."""
    from agentlab import train as training

    cfg = training.resolve(training.TrainConfig(profile="ci", policy=str(warm_path), out_dir=str(tmp_path / "run"),
                                                tasks_per_update=4, group_size=4, eval_episodes=8, updates=1))
    policy = training.load_training_policy(cfg)
    tasks = training.eval_tasks(cfg)
    context, prompt, actions = training.episode_tokens(policy, cfg.env_id, {}, tasks, cfg.max_new_tokens)
    shape = memory.ModelShape.from_config(policy.model.config)
    sizes = dict(context=context, action_share=actions / (prompt + actions))
    trainable = policy.num_parameters(trainable_only=True)
    weights = sum(p.numel() * p.element_size() for p in policy.model.parameters())

    def need(rows: int, tokens: int) -> float:
        return memory.estimate(shape, trainable, tokens, rollout_rows=rows, **sizes).total

    free = 0.98 * need(16, context) / memory.SAFE_SHARE - weights  # 16 episodes' cache and a one-episode pass: too much
    monkeypatch.setattr(memory, "available_bytes", lambda device: free)
    plan = training.preflight(policy, cfg, tasks)
    assert plan.rollout_rows in training.rollout_chunks(16, 4) and plan.micro_batch_tokens >= context, plan
    assert need(plan.rollout_rows, plan.micro_batch_tokens) <= memory.SAFE_SHARE * (free + weights)
    assert f"sampling {plan.rollout_rows} episodes at a time" in capsys.readouterr().out

    from agentlab import evaluate

    seen = []
    rollout = training.rollout
    for module in (training, evaluate):  # the update's rollout, and the held-out evaluation's
        monkeypatch.setattr(module, "rollout", lambda envs, *a, **k: seen.append(len(envs)) or rollout(envs, *a, **k))
    result = training.train(cfg, policy, progress=False)
    chunk = plan.rollout_rows
    def pieces(n: int) -> list[int]:
        return [min(chunk, n - start) for start in range(0, n, chunk)]

    assert seen == pieces(8) + pieces(16) + pieces(8), seen  # held-out tasks, the update's episodes, held-out tasks
    assert len(result.history) == 1 and len(result.evals) == 2
    groups = [t.group for t in training.collect(policy, cfg, 1, torch.Generator().manual_seed(0),
                                                 np.random.default_rng(1), rollout_rows=chunk)[0]]
    assert groups == [g for g in range(4) for _ in range(4)], groups
