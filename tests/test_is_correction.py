"""A sampler that is not the trainer: importance-sampling correction, the mismatch metrics, top-p.

The decoupled loss (`agentlab.algos.losses`) is checked three ways: it is the plain loss when the
sampler is the trainer; its gradient equals a token-by-token reference written out below when the
sampler is off; and its weights truncate or mask exactly at the cap.
"""

import json
import math
from types import SimpleNamespace

import pytest
import torch

from agentlab.algos import grpo, ppo
from agentlab.algos.losses import IS_CORRECTIONS, clipped_surrogate, is_weights, sampler_mismatch
from agentlab.policy import LoraSettings, load_policy
from agentlab.rollout import SamplingSettings, make_envs, pad_batch, rollout

CLIP, CAP = 0.2, 3.0


def random_batch(seed: int = 0, B: int = 4, L: int = 9):
    """Per-token tensors (B, L) of a made-up batch: logp (with grad), prox_logp, adv, mask."""
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(B, L, generator=g) < 0.7).float()
    mask[:, 0] = 1.0  # every row has an action token
    prox = -torch.rand(B, L, generator=g, dtype=torch.float64) * 3
    logp = (prox + 0.3 * torch.randn(B, L, generator=g, dtype=torch.float64)).requires_grad_()
    adv = torch.randn(B, 1, generator=g, dtype=torch.float64).expand(B, L) * mask
    return logp, prox, adv, mask.double()


def reference_loss(logp, prox, old, adv, mask, mode, cap, clip):
    """The corrected loss token by token, as the formulas say, with plain Python control flow."""
    B, L = mask.shape
    total, count = 0.0, 0
    for b in range(B):
        tokens = [t for t in range(L) if mask[b, t] > 0]
        seq_w = math.exp(sum(float(prox[b, t] - old[b, t]) for t in tokens))
        for t in tokens:
            w = seq_w if mode.startswith("sequence") else math.exp(float(prox[b, t] - old[b, t]))
            if mode.endswith("truncated"):
                w = min(w, cap)
            elif w > cap:
                w = 0.0
            ratio = torch.exp(logp[b, t] - prox[b, t])
            a = adv[b, t]
            surrogate = torch.min(ratio * a, torch.clamp(ratio, 1 - clip, 1 + clip) * a)
            total = total - w * surrogate
            count += 1
    return total / count


@pytest.mark.parametrize("mode", IS_CORRECTIONS)
def test_with_the_trainer_as_sampler_the_correction_changes_nothing(mode):
    logp, prox, adv, mask = random_batch()
    plain, plain_stats = clipped_surrogate(logp, prox, adv, mask, CLIP)
    (g_plain,) = torch.autograd.grad(plain, logp)
    w = is_weights(prox, prox, mask, mode, CAP)
    assert torch.equal(w, mask), "sampler = trainer: every weight is 1 on action tokens"
    fixed, fixed_stats = clipped_surrogate(logp, prox, adv, mask, CLIP, w)
    (g_fixed,) = torch.autograd.grad(fixed, logp)
    assert torch.allclose(fixed, plain, rtol=0, atol=1e-12)
    assert torch.allclose(g_fixed, g_plain, rtol=0, atol=1e-12)
    assert fixed_stats == plain_stats


@pytest.mark.parametrize("mode", IS_CORRECTIONS)
def test_with_a_perturbed_sampler_the_gradient_is_the_reference(mode):
    logp, prox, adv, mask = random_batch(seed=1)
    g = torch.Generator().manual_seed(2)
    old = prox + 0.5 * torch.randn(prox.shape, generator=g, dtype=torch.float64)  # the sampler's logprobs
    w = is_weights(prox, old, mask, mode, CAP)
    assert (w[mask.bool()] != 1).all()
    loss, _ = clipped_surrogate(logp, prox, adv, mask, CLIP, w)
    (grad,) = torch.autograd.grad(loss, logp)
    ref = reference_loss(logp, prox, old, adv, mask, mode, CAP, CLIP)
    (ref_grad,) = torch.autograd.grad(ref, logp)
    assert float(loss) == pytest.approx(float(ref), rel=1e-10, abs=1e-12)
    assert torch.allclose(grad, ref_grad, rtol=1e-9, atol=1e-12)
    # and the correction did something: the plain loss against the sampler has another gradient
    plain, _ = clipped_surrogate(logp, old, adv, mask, CLIP)
    (plain_grad,) = torch.autograd.grad(plain, logp)
    assert not torch.allclose(grad, plain_grad, atol=1e-6)


def test_truncated_caps_and_masked_drops_at_the_cap():
    mask = torch.ones(1, 4)
    old = torch.zeros(1, 4)
    prox = torch.tensor([[math.log(2.9), math.log(3.1), 1000.0, -1.0]])  # w = 2.9, 3.1, inf, e^-1
    trunc = is_weights(prox, old, mask, "token_truncated", CAP)
    masked = is_weights(prox, old, mask, "token_masked", CAP)
    assert torch.allclose(trunc, torch.tensor([[2.9, 3.0, 3.0, math.exp(-1)]]))
    assert torch.allclose(masked, torch.tensor([[2.9, 0.0, 0.0, math.exp(-1)]]))
    # a sequence whose tokens each stay under the cap can pass it as a product: 1.9² = 3.61 > 3
    two = torch.tensor([[math.log(1.9), math.log(1.9), 0.0, 0.0]])
    on = torch.tensor([[1.0, 1.0, 0.0, 0.0]])
    assert torch.equal(is_weights(two, torch.zeros(1, 4), on, "token_masked", CAP), two.exp() * on)
    assert torch.allclose(is_weights(two, torch.zeros(1, 4), on, "sequence_truncated", CAP), 3.0 * on)
    assert torch.equal(is_weights(two, torch.zeros(1, 4), on, "sequence_masked", CAP), torch.zeros(1, 4))
    under = torch.tensor([[math.log(1.5), math.log(1.5), 0.0, 0.0]])  # 2.25: kept whole by both
    for mode in ("sequence_truncated", "sequence_masked"):
        assert torch.allclose(is_weights(under, torch.zeros(1, 4), on, mode, CAP), 2.25 * on)
    with pytest.raises(ValueError, match="is_correction"):
        is_weights(prox, old, mask, "token", CAP)


def test_mismatch_metrics():
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    old = torch.zeros(1, 4)
    prox = torch.tensor([[0.0, math.log(1.1), math.log(1.5), 5.0]])  # r = 1, 1.1, 1.5 on actions
    stats = sampler_mismatch(prox, old, mask, CLIP, "token_truncated", 1.2)
    k3 = [(r - 1) - math.log(r) for r in (1.0, 1.1, 1.5)]  # KL(sampler ‖ trainer), tokens from the sampler
    assert stats["sampler_kl"] == pytest.approx(sum(k3) / 3, rel=1e-5)
    assert stats["sampler_clip_frac"] == pytest.approx(1 / 3)  # only r = 1.5 leaves [0.8, 1.2]
    assert stats["is_capped_frac"] == pytest.approx(1 / 3)
    assert stats["is_weight_mean"] == pytest.approx((1.0 + 1.1 + 1.2) / 3, rel=1e-5)


# ---------------------------------------------------------------------------- with the tiny policy

def lora_policy(tiny_path):
    torch.manual_seed(0)  # the same adapter initialisation for every copy
    return load_policy(str(tiny_path), lora=LoraSettings(r=4, alpha=8))


@pytest.fixture(scope="module")
def episodes(tiny_path):
    policy = lora_policy(tiny_path)
    gen = torch.Generator().manual_seed(0)
    trajs = rollout(make_envs("agentlab/GuessNumber-v0", 8), policy, SamplingSettings(max_new_tokens=8),
                    seeds=[0] * 4 + [1] * 4, generator=gen)
    return trajs, torch.tensor([1.0, 0.0, 0.5, 0.0, 0.0, 1.0, 0.0, 0.2])  # two groups of 4, mixed rewards


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_an_update_with_the_correction_and_the_trainer_as_sampler_is_the_plain_update(tiny_path, episodes, algo):
    trajs, rewards = episodes
    results = []
    for mode in (None, "token_truncated", "sequence_masked"):
        policy = lora_policy(tiny_path)
        torch.manual_seed(1)
        if algo == "grpo":
            opt = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-3)
            s = grpo.GRPOSettings(epochs=2, minibatch_size=4, is_correction=mode)
            stats = grpo.update(policy, opt, trajs, rewards, 4, s, generator=torch.Generator().manual_seed(0))
        else:
            head = ppo.ValueHead(policy.model.config.hidden_size)
            opt = torch.optim.AdamW(policy.trainable_parameters() + list(head.parameters()), lr=1e-3)
            s = ppo.PPOSettings(epochs=2, minibatch_size=4, is_correction=mode)
            stats = ppo.update(policy, opt, trajs, s, head, generator=torch.Generator().manual_seed(0))
        results.append((stats, [p.detach().clone() for p in policy.trainable_parameters()]))
    (plain, plain_params), corrected = results[0], results[1:]
    assert "sampler_kl" not in plain  # no correction: no extra pass, no mismatch metrics
    for stats, params in corrected:
        assert stats["sampler_kl"] < 1e-6 and stats["sampler_clip_frac"] == 0.0 and stats["is_capped_frac"] == 0.0
        assert stats["pg_loss"] == pytest.approx(plain["pg_loss"], abs=1e-5)
        moved = max(float((p - q).abs().max()) for p, q in zip(params, plain_params))
        assert moved < 1e-5


def test_the_correction_pulls_a_perturbed_samplers_weights(tiny_path, episodes):
    """Old logprobs shifted by noise (a different sampler): the mismatch shows in the metrics."""
    trajs, rewards = episodes
    g = torch.Generator().manual_seed(3)
    noisy = []
    for t in trajs:
        d = t.to_dict()
        d["logprobs"] = [lp + (0.3 * float(torch.randn(1, generator=g)) if lp != 0 else 0.0) for lp in t.logprobs]
        noisy.append(type(t).from_dict(d))
    policy = lora_policy(tiny_path)
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-3)
    s = grpo.GRPOSettings(epochs=1, minibatch_size=8, is_correction="token_masked", is_cap=1.2)
    stats = grpo.update(policy, opt, noisy, rewards, 4, s)
    assert stats["sampler_kl"] == pytest.approx(0.045, rel=0.5)  # k3 of N(0, 0.3²) noise: about σ²/2
    assert 0.1 < stats["sampler_clip_frac"] < 0.9 and 0.05 < stats["is_capped_frac"] < 0.9
    assert stats["clip_frac"] < 0.05, "the ratio is taken against the trainer, so the first step is not clipped"


# ---------------------------------------------------------------------------- top-p

@pytest.mark.parametrize("top_p", [0.5, 0.9])
def test_top_p_sampling_leaves_the_first_ratio_at_one(tiny_path, top_p):
    """The stored logprobs are the trainer's: the full softmax at the temperature, not the top-p
    distribution renormalised, so an unchanged policy's ratio at the first step is 1."""
    policy = load_policy(str(tiny_path))
    gen = torch.Generator().manual_seed(0)
    trajs = rollout(make_envs("agentlab/GuessNumber-v0", 6), policy, SamplingSettings(top_p=top_p, max_new_tokens=8),
                    seeds=range(6), generator=gen)
    batch = pad_batch(trajs, policy.pad_id)
    mask = batch["loss_mask"].bool()
    with torch.no_grad():
        out = policy.forward(batch["ids"], batch["attn"]).logits[:, :-1].float()  # (B, L-1, V)
    logp_all = torch.log_softmax(out, -1)
    trainer = logp_all.gather(-1, batch["ids"][:, 1:, None]).squeeze(-1)  # (B, L-1)
    ratio = (trainer - batch["old_logp"])[mask].exp()
    assert mask.sum() > 20
    assert torch.allclose(ratio, torch.ones_like(ratio), rtol=0, atol=1e-5)
    # every sampled token is in its nucleus: the smallest set of tokens whose mass reaches top_p
    p_sorted, _ = logp_all.exp().sort(-1, descending=True)
    p_tok = trainer.exp()
    mass_before = (p_sorted * (p_sorted > p_tok[..., None])).sum(-1)  # (B, L-1) mass of likelier tokens
    assert (mass_before[mask] < top_p + 1e-5).all()
    # the renormalised nucleus logprob would differ wherever the nucleus is not the whole vocabulary
    assert (p_sorted.cumsum(-1)[mask] < 1 - 1e-3).any()


# ---------------------------------------------------------------------------- an int8 sampler

def test_an_int8_sampler_follows_the_adapter_and_its_mismatch_is_measured(tiny_path):
    from agentlab.algos.losses import policy_logp
    from agentlab.sampler import int8_sampler

    policy = lora_policy(tiny_path)
    with torch.no_grad():  # an adapter that has moved: B ≠ 0
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05, generator=torch.Generator().manual_seed(len(name)))
    before = [p.detach().clone() for p in policy.trainable_parameters()]
    sampler = int8_sampler(policy)
    assert policy.has_adapter and all(torch.equal(p, q) for p, q in zip(policy.trainable_parameters(), before))
    trajs = rollout(make_envs("agentlab/GuessNumber-v0", 8), sampler, SamplingSettings(max_new_tokens=8),
                    seeds=[0] * 4 + [1] * 4, generator=torch.Generator().manual_seed(0))
    batch = pad_batch(trajs, policy.pad_id)
    mask = batch["loss_mask"]
    trainer = sampler_mismatch(policy_logp(policy, batch, 1.0, None), batch["old_logp"], mask, CLIP)
    with policy.reference():
        base = sampler_mismatch(policy_logp(policy, batch, 1.0, None), batch["old_logp"], mask, CLIP)
    assert 0 < trainer["sampler_kl"] < 1e-3, "int8 rounding: close to the trainer, not equal"
    assert base["sampler_kl"] > 10 * trainer["sampler_kl"], "the adapter was merged into the int8 copy"
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-3)
    stats = grpo.update(policy, opt, trajs, torch.tensor([1.0, 0, 0, 0, 0, 1.0, 0, 0]), 4,
                        grpo.GRPOSettings(epochs=1, minibatch_size=8, is_correction="sequence_truncated"))
    assert stats["sampler_kl"] == pytest.approx(trainer["sampler_kl"], rel=1e-4)


# ---------------------------------------------------------------------------- train() with a sampler

def sampler_run(tmp_path, warm_path, name, **kw):
    """A two-update ci run on the warmed tiny policy (its groups' rewards differ: the updates take steps)."""
    from agentlab.train import TrainConfig

    base = dict(env_id="agentlab/GuessNumber-v0", profile="ci", policy=str(warm_path), name=name,
                out_dir=str(tmp_path / name), updates=2, tasks_per_update=4, group_size=4, eval_episodes=4,
                eval_every=100, checkpoint_every=100, grpo=grpo.GRPOSettings(minibatch_size=8))
    return TrainConfig(**{**base, **kw})


def counted_samplers(monkeypatch, make=None):
    """Replace `train`'s int8_sampler by one that records the trainer's LoRA B weights at each build."""
    import agentlab.train as train_module
    from agentlab.sampler import int8_sampler

    builds = []

    def build(policy, skip=()):
        builds.append({"skip": skip, "lora_B": sum(float(p.abs().sum()) for n, p in policy.model.named_parameters()
                                                   if "lora_B" in n)})
        return (make or int8_sampler)(policy, skip)

    monkeypatch.setattr(train_module, "int8_sampler", build)
    return builds


def test_train_with_an_int8_sampler_rebuilds_it_every_update_and_logs_the_mismatch(tmp_path, warm_path, monkeypatch,
                                                                                    capsys):
    import warnings

    from agentlab.train import load_training_policy, train

    builds = counted_samplers(monkeypatch)
    cfg = sampler_run(tmp_path, warm_path, "int8", sampler="int8", sampler_max_kl=0.0)  # every update passes 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = train(cfg, load_training_policy(cfg), progress=False)
    assert len(builds) == 2 and builds[0]["skip"] == ()
    assert builds[0]["lora_B"] == 0 and builds[1]["lora_B"] > 0, "each copy holds the adapter as it is then"
    for record in result.history:
        assert 0 < record["sampler_kl"] < 0.05 and 0 <= record["sampler_clip_frac"] <= 1
        assert "is_weight_mean" not in record, "no is_correction: measured, not corrected"
        assert record["seconds_sampler_build"] > 0
    far = [str(w.message) for w in caught if "sampler_max_kl" in str(w.message)]
    assert len(far) == 1, "warned once for the stretch of updates above the threshold"
    assert "grpo.is_correction='token_truncated'" in far[0] and "int8-partial" in far[0]
    assert json.loads((tmp_path / "int8" / "config.json").read_text())["sampler"] == "int8"
    assert "sampler copy" in capsys.readouterr().out, "the preflight counts the copy"


def test_the_memory_estimate_holds_the_sampler_copy_with_the_kv_cache():
    from agentlab import memory

    shape = memory.ModelShape.from_config(SimpleNamespace(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                                          num_attention_heads=4, num_key_value_heads=2,
                                                          vocab_size=100, tie_word_embeddings=True))
    sizes = dict(rollout_rows=8, context=100, action_share=0.5)
    plain = memory.estimate(shape, 1000, 400, **sizes)
    copy = memory.estimate(shape, 1000, 400, sampler=shape.weight_bytes(), **sizes)
    assert copy.total == pytest.approx(plain.total + shape.weight_bytes())
    assert "sampler copy" in copy.describe() and "sampler" not in plain.describe()
    # taking turns, the copy is held with the rollout's cache, not with the update's activations
    turns = memory.estimate(shape, 1000, 400, take_turns=True, sampler=1e9, **sizes)
    assert turns.total == pytest.approx(turns.weights + turns.adapter + turns.optimiser + turns.kv_cache + 1e9)
    budget = lambda **kw: memory.largest_budget(shape, 1000, 1e8, **sizes, **kw)  # noqa: E731
    assert budget(sampler=1e7) < budget()


def test_ppo_with_a_sampler_and_the_correction(tmp_path, warm_path, monkeypatch):
    from agentlab.train import load_training_policy, train

    builds = counted_samplers(monkeypatch)
    cfg = sampler_run(tmp_path, warm_path, "ppo8", algo="ppo", updates=1, sampler="int8-partial",
                      ppo=ppo.PPOSettings(epochs=1, minibatch_size=8, is_correction="token_truncated"))
    record = train(cfg, load_training_policy(cfg), progress=False).history[0]
    assert builds == [{"skip": ("lm_head", "down_proj"), "lora_B": 0.0}]
    assert record["sampler_kl"] > 0 and 0 < record["is_weight_mean"] <= 3.0


def test_without_a_sampler_nothing_changes(tmp_path, warm_path, monkeypatch):
    """The sampler's path with the trainer as its own sampler takes the same draws as no sampler at all:
    the same episodes, updates and evaluations; the only new numbers are the (zero) mismatch and timings."""
    from agentlab.train import load_training_policy, train

    builds = counted_samplers(monkeypatch, make=lambda policy, skip: policy)
    plain_cfg = sampler_run(tmp_path, warm_path, "plain")
    plain = train(plain_cfg, load_training_policy(plain_cfg), progress=False)
    assert builds == []
    same_cfg = sampler_run(tmp_path, warm_path, "same", sampler="int8")
    same = train(same_cfg, load_training_policy(same_cfg), progress=False)
    assert len(builds) == 2
    timing = ("seconds_", "tokens_per_s")
    for a, b in zip(plain.history, same.history, strict=True):
        assert "skipped" not in a and a["grad_norm"] > 0, "the update took its steps"
        assert not any(k.startswith("sampler") or k.startswith("is_") for k in a)
        assert b["sampler_kl"] == pytest.approx(0.0, abs=1e-6) and b["sampler_clip_frac"] == 0.0
        assert set(b) - set(a) == {"sampler_kl", "sampler_clip_frac", "seconds_sampler_build"}
        assert {k: v for k, v in a.items() if not k.startswith(timing)} == \
               {k: v for k, v in b.items() if k in a and not k.startswith(timing)}
    assert [e["success_rate"] for e in plain.evals] == [e["success_rate"] for e in same.evals]


def test_resolve_and_the_command_line_check_the_sampler(tmp_path, warm_path):
    from agentlab.cli import build_parser
    from agentlab.train import resolve

    with pytest.raises(ValueError, match=r"sampler must be None .*'int8', 'int8-partial'.*got 'int4'"):
        resolve(sampler_run(tmp_path, warm_path, "x", sampler="int4"))
    with pytest.raises(ValueError, match="4bit on cpu.*Drop the sampler.*quantization=None"):
        resolve(sampler_run(tmp_path, warm_path, "x", sampler="int8", quantization="4bit"))
    with pytest.raises(ValueError, match="on cuda \\(profile 'gpu'\\).*CPU profile"):
        resolve(sampler_run(tmp_path, warm_path, "x", sampler="int8", profile="gpu", quantization=None))
    assert resolve(sampler_run(tmp_path, warm_path, "x", sampler="int8")).sampler == "int8"
    parser = build_parser("train")
    args = parser.parse_args(["train", "--sampler", "int8", "--grpo.is-correction", "token_truncated"])
    assert (args.sampler, getattr(args, "grpo.is_correction")) == ("int8", "token_truncated")
    assert parser.parse_args(["train", "--sampler", "none"]).sampler is None
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "--sampler", "int4"])
