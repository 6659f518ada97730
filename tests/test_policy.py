"""Profiles and the loading path: tiny build, from_pretrained round trip, 4-bit, LoRA, reference, errors."""

import bitsandbytes as bnb
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentlab.policy import LoraSettings, PolicyLoadError, load_policy
from agentlab.profiles import profile
from agentlab.tiny import build_tiny


def nudge_adapter(policy) -> None:
    """Move the LoRA weights off their start (B is zero there), as training would."""
    with torch.no_grad():
        for p in policy.trainable_parameters():
            p.add_(0.05 * torch.randn_like(p))


def adapter_grad(policy) -> torch.Tensor:
    """The trainable parameters' gradients, flattened into one vector."""
    return torch.cat([p.grad.flatten() for p in policy.trainable_parameters()])


def test_profiles_choose_sizes_in_one_place(monkeypatch):
    monkeypatch.setenv("AGENTLAB_PROFILE", "cpu")
    assert profile().name == "cpu"
    assert profile("ci").rl_updates < profile("cpu").rl_updates
    monkeypatch.setenv("AGENTLAB_MODEL", "/models/x")
    assert profile("gpu").model == "/models/x" and profile("gpu").quantization == "4bit"
    with pytest.raises(ValueError, match="unknown profile"):
        profile("tpu")


def test_the_gpu_profile_runs_offline_on_the_packaged_qwen(monkeypatch):
    """No AGENTLAB_MODEL and no hub: the gpu profile's model is the Qwen2.5 that installs from packages;
    with a hub, or the model in the hub's local cache, it is the hub model."""
    import huggingface_hub

    from agentlab import pretrained

    monkeypatch.delenv("AGENTLAB_MODEL", raising=False)
    monkeypatch.setattr(pretrained, "hub_reachable", lambda: False)
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda repo, name: None)
    assert profile("gpu").model == "qwen2.5-coder-0.5b" and profile("gpu").quantization == "4bit"
    assert "qwen2.5-coder-0.5b" in pretrained.NAMED_MODELS
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda repo, name: f"/hub/{repo}/{name}")
    assert profile("gpu").model == "Qwen/Qwen2.5-1.5B-Instruct"
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda repo, name: None)
    monkeypatch.setattr(pretrained, "hub_reachable", lambda: True)
    assert profile("gpu").model == "Qwen/Qwen2.5-1.5B-Instruct"
    assert profile("real-cpu").model == "smollm2-135m"  # profiles without an offline model are left alone


def test_agentlab_seed_replaces_the_profile_seed_and_so_every_build_from_it(monkeypatch):
    from agentlab.tiny import _recipe

    default = _recipe(profile("ci"))
    monkeypatch.setenv("AGENTLAB_SEED", "3")
    assert profile("ci").seed == 3 and profile("gpu").seed == 3
    assert _recipe(profile("ci")) == {**default, "seed": 3}  # a new recipe, so a new tiny model under a new name
    for bad in ("-1", "one", "1.5"):
        monkeypatch.setenv("AGENTLAB_SEED", bad)
        with pytest.raises(ValueError, match="AGENTLAB_SEED must be a non-negative integer"):
            profile("ci")
    monkeypatch.setenv("AGENTLAB_SEED", "")
    assert profile("ci").seed == 0


def test_tiny_build_is_deterministic(tiny_path, tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTLAB_CACHE", str(tmp_path))
    again = build_tiny(profile("ci"), verbose=False)
    assert again != tiny_path and again.name == tiny_path.name  # same recipe, same name
    a = AutoModelForCausalLM.from_pretrained(tiny_path).state_dict()
    b = AutoModelForCausalLM.from_pretrained(again).state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    text = "search(capital of Oslavia)\nguess(8) 12 is too low"
    assert AutoTokenizer.from_pretrained(tiny_path)(text)["input_ids"] == \
        AutoTokenizer.from_pretrained(again)(text)["input_ids"]


def test_tiny_build_is_reused_and_sized(tiny_path):
    assert build_tiny(profile("ci"), verbose=False) == tiny_path  # cached, not rebuilt
    policy = load_policy(str(tiny_path))
    assert 0.3e6 <= policy.num_parameters() <= 3e6
    tok = policy.tokenizer
    assert tok.pad_token_id != policy.eot_id and tok.chat_template
    ids = policy.prompt_ids("sys", "find it")
    assert tok.decode(ids).endswith("<|assistant|>")


def test_round_trip_through_from_pretrained(tiny_path, tmp_path):
    policy = load_policy(str(tiny_path))
    policy.save(tmp_path / "copy")
    again = load_policy(str(tmp_path / "copy"))
    ids = torch.tensor([policy.prompt_ids("sys", "guess")])
    mask = torch.ones_like(ids)
    assert torch.allclose(policy.token_logprobs(ids, mask), again.token_logprobs(ids, mask))


def test_4bit_gives_bitsandbytes_linear_layers(tiny_path):
    policy = load_policy(str(tiny_path), quantization="4bit")
    layers = [m for m in policy.model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert layers, "no 4-bit layers"
    assert layers[0].weight.quant_type == "nf4"
    ids = torch.tensor([policy.prompt_ids("sys", "guess")])
    assert torch.isfinite(policy.token_logprobs(ids, torch.ones_like(ids))).all()


@pytest.mark.parametrize("quantization", [None, "4bit"])
def test_lora_step_changes_only_the_adapter(tiny_path, quantization):
    policy = load_policy(str(tiny_path), quantization=quantization, lora=LoraSettings(r=4))
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    trainable = {n for n, p in policy.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-2)
    ids = torch.tensor([policy.prompt_ids("sys", "guess") + policy.encode("guess(8)")])
    for _ in range(2):  # B starts at zero, so A moves only from the second step on
        loss = -policy.token_logprobs(ids, torch.ones_like(ids)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = dict(policy.model.named_parameters())
    changed = {n for n in before if not torch.equal(before[n], after[n].detach())}
    assert changed == trainable


def test_reference_logprobs_equal_the_base_model(tiny_path):
    base = load_policy(str(tiny_path))
    policy = load_policy(str(tiny_path), lora=LoraSettings(r=4))
    nudge_adapter(policy)  # a trained adapter: the policy now differs from the base
    ids = torch.tensor([base.prompt_ids("sys", "guess") + base.encode("guess(8)")])
    mask = torch.ones_like(ids)
    with torch.no_grad():
        assert not torch.allclose(policy.token_logprobs(ids, mask), base.token_logprobs(ids, mask), atol=1e-4)
        with policy.reference():
            ref = policy.token_logprobs(ids, mask)
        assert torch.allclose(ref, base.token_logprobs(ids, mask), atol=1e-6)


@pytest.mark.parametrize("quantization", [None, "4bit"])
def test_scoring_only_the_action_positions_changes_nothing_there(tiny_path, quantization):
    """`score(only=mask)` applies the output layer to the masked positions alone; their logprobs,
    entropies and gradients must be those of the full pass."""
    policy = load_policy(str(tiny_path), quantization=quantization, lora=LoraSettings(r=4))
    nudge_adapter(policy)
    rows = [policy.prompt_ids("sys", "guess") + policy.encode("guess(8)"), policy.prompt_ids("sys", "a longer question")]
    width = max(map(len, rows))
    ids = torch.tensor([[policy.pad_id] * (width - len(r)) + r for r in rows])  # left padded
    attn = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    only = torch.zeros(2, width - 1, dtype=torch.bool)
    only[0, -5:], only[1, 3:9] = True, True
    full = policy.score(ids, attn, temperature=0.7, entropy=True)
    part = policy.score(ids, attn, temperature=0.7, entropy=True, only=only)
    for key in ("logp", "entropy"):
        assert torch.allclose(part[key][only], full[key][only], atol=1e-5)
        assert torch.all(part[key][~only] == 0)
    grads = []
    for out in (full, part):
        policy.model.zero_grad()
        (out["logp"] * only).sum().backward()
        grads.append(adapter_grad(policy))
    assert torch.allclose(grads[0], grads[1], atol=1e-5)


@pytest.mark.parametrize("only", [False, True])
def test_a_logged_entropy_is_the_same_number_outside_the_graph(tiny_path, only):
    """``entropy="logged"`` (a loss without an entropy bonus) gives the entropy ``entropy=True`` gives,
    with no gradient path, and leaves the gradient of a loss that weighs the entropy by 0 unchanged."""
    policy = load_policy(str(tiny_path), lora=LoraSettings(r=4))
    nudge_adapter(policy)
    ids = torch.tensor([policy.prompt_ids("sys", "guess") + policy.encode("guess(8)")])
    attn = torch.ones_like(ids)
    mask = torch.zeros(1, ids.shape[1] - 1)
    mask[0, -4:] = 1
    kept = mask if only else None
    results, grads = [], []
    for entropy in (True, "logged"):
        out = policy.score(ids, attn, temperature=0.7, entropy=entropy, only=kept)
        policy.model.zero_grad()
        (-(out["logp"] * mask).sum() - 0.0 * (out["entropy"] * mask).sum()).backward()
        results.append(out["entropy"].detach())
        grads.append(adapter_grad(policy))
        assert out["entropy"].requires_grad == (entropy is True)
    assert torch.equal(results[0], results[1]) and results[0][0, -1] > 0
    assert torch.equal(grads[0], grads[1])


def test_error_missing_folder():
    with pytest.raises(PolicyLoadError, match="does not exist"):
        load_policy("./no/such/model")


def test_error_folder_without_config(tmp_path):
    with pytest.raises(PolicyLoadError, match="no config.json"):
        load_policy(str(tmp_path))


def test_error_hub_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(PolicyLoadError, match="unreachable.*local folder"):
        load_policy("someorg/some-model-that-is-not-here")


def test_error_4bit_without_bitsandbytes(tiny_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_bnb(name, *args, **kwargs):
        if name == "bitsandbytes" or name.startswith("bitsandbytes."):
            raise ImportError("No module named 'bitsandbytes'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_bnb)
    with pytest.raises(PolicyLoadError, match="needs bitsandbytes"):
        load_policy(str(tiny_path), quantization="4bit")


def test_error_tokenizer_without_chat_template(tiny_path, tmp_path):
    policy = load_policy(str(tiny_path))
    policy.tokenizer.chat_template = None
    policy.model.save_pretrained(tmp_path)
    policy.tokenizer.save_pretrained(tmp_path)
    (tmp_path / "chat_template.jinja").unlink(missing_ok=True)
    with pytest.raises(PolicyLoadError, match="no chat template"):
        load_policy(str(tmp_path))


def test_error_unknown_quantization(tiny_path):
    with pytest.raises(PolicyLoadError, match="quantization"):
        load_policy(str(tiny_path), quantization="3bit")


@pytest.mark.parametrize("shape", [(256, 96), (5, 27)])
def test_4bit_weights_read_back_exactly_in_rows_that_are_not_whole_blocks(tiny_path, shape):
    """The tiny model's rows of 96 inputs are 1.5 blocks of 64: bitsandbytes' AVX512 CPU kernel
    read such rows back wrongly (`fix_bitsandbytes_cpu`); every CPU must give the NF4 values, also
    for a matrix whose weights fill neither a whole last block nor a whole last byte (5 x 27)."""
    import bitsandbytes.functional as bnbf

    load_policy(str(tiny_path), quantization="4bit")  # loading in 4-bit applies the fix where needed
    torch.manual_seed(0)
    W = torch.randn(*shape) * 0.05  # (d_out, d_in), d_in not a multiple of 64
    packed, state = bnbf.quantize_4bit(W, blocksize=64, quant_type="nf4")
    levels = bnbf.get_4bit_type("nf4", device="cpu")
    n = W.numel()
    blocks = torch.nn.functional.pad(W.reshape(-1), (0, -n % 64)).reshape(-1, 64)  # zeros leave each absmax as it is
    absmax = blocks.abs().amax(dim=1, keepdim=True)
    codes = torch.bucketize(blocks / absmax, (levels[1:] + levels[:-1]) / 2)
    expected = (levels[codes] * absmax).reshape(-1)[:n].reshape(W.shape)
    assert torch.equal(bnbf.dequantize_4bit(packed, state), expected)


def test_a_torch_that_refuses_the_4bit_fix_gets_a_warning_not_a_crash(monkeypatch):
    """torch 2.11 (seen on a GPU machine) refuses to replace a kernel registered from Python: the
    fix must then say that 4-bit weights on this CPU may be inexact and let loading go on."""
    from bitsandbytes.backends.cpu import ops as cpu_ops

    from agentlab.bnb_compat import fix_bitsandbytes_cpu

    def refuse(*args, **kwargs):
        raise RuntimeError("This is not allowed since there's already a kernel registered from python")

    monkeypatch.setattr(cpu_ops, "_has_avx512", True, raising=False)
    monkeypatch.setattr(torch.library, "register_kernel", refuse)
    with pytest.warns(UserWarning, match="dequantised inexactly"):
        assert fix_bitsandbytes_cpu.__wrapped__() is False


def test_the_4bit_cpu_fix_is_applied_to_cpu_loads_only(monkeypatch):
    import agentlab.bnb_compat
    import agentlab.policy

    calls = []
    monkeypatch.setattr(agentlab.bnb_compat, "fix_bitsandbytes_cpu", lambda: calls.append(1))
    for device in ("cuda", "cpu"):
        agentlab.policy._bnb_config("4bit", torch.bfloat16, device)
    assert calls == [1]  # on a GPU the CPU kernel is never used (and torch 2.11 refused the swap)


@pytest.mark.parametrize("quantization", [None, "4bit"])
def test_a_shared_prompt_scored_once_gives_the_plain_pass(warm_path, quantization):
    """With ``share_prompts`` the rows that start with one prompt run it once (its keys and values
    copied to each row): logprobs, entropies, hidden states and gradients must be those of running
    every row in full."""
    from agentlab.rollout import SamplingSettings, make_envs, pad_batch, rollout

    torch.manual_seed(0)
    policy = load_policy(str(warm_path), quantization=quantization, lora=LoraSettings(r=4))
    nudge_adapter(policy)
    seeds = [0, 0, 0, 1, 1, 2]  # two groups of 3 and 2 that share their prompt, and one row alone
    trajs = rollout(make_envs("agentlab/GuessNumber-v0", 6), policy, SamplingSettings(max_new_tokens=8), seeds=seeds,
                    generator=torch.Generator().manual_seed(0))
    assert len({len(t.token_ids) for t in trajs}) > 1, "rows of different lengths"
    b = pad_batch(trajs, policy.pad_id)
    only, real = b["loss_mask"].bool(), b["attn"].bool()
    outs, grads = [], []
    for share in (False, True):
        policy.share_prompts = share
        policy.model.zero_grad()
        out = policy.score(b["ids"], b["attn"], temperature=0.7, entropy=True, hidden=True, only=only)
        ((out["logp"] * only).sum() + out["hidden"][real].square().mean()).backward()
        outs.append(out)
        grads.append(adapter_grad(policy))
    for key in ("logp", "entropy"):
        assert torch.allclose(outs[0][key], outs[1][key], atol=1e-5), key
    assert torch.allclose(outs[0]["hidden"][real], outs[1]["hidden"][real], atol=1e-5)
    assert (grads[0] - grads[1]).norm() < 1e-4 * grads[0].norm(), (grads[0] - grads[1]).norm() / grads[0].norm()


def test_right_padded_rows_score_the_same_without_the_padding_mask(tiny_path, monkeypatch):
    """A right-padded batch goes through the model without its mask (the causal kernel); at every real
    position its logprobs, entropies, hidden states and gradients must be those of the masked pass."""
    import agentlab.policy as policy_module

    policy = load_policy(str(tiny_path), lora=LoraSettings(r=4))
    nudge_adapter(policy)
    rows = [policy.prompt_ids("sys", "a longer question than the other") + policy.encode("guess(8)"),
            policy.prompt_ids("sys", "short")]
    width = max(map(len, rows))
    ids = torch.tensor([r + [policy.pad_id] * (width - len(r)) for r in rows])  # right padded
    attn = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    assert policy_module.right_padded(attn) and not policy_module.right_padded(attn.flip(1))
    real = attn[:, 1:].bool()  # positions that score a real token
    outs, grads = [], []
    for fast in (True, False):
        monkeypatch.setattr(policy_module, "right_padded", lambda mask, fast=fast: fast)
        out = policy.score(ids, attn, temperature=0.7, entropy=True, hidden=True)
        policy.model.zero_grad()
        (out["logp"] * real).sum().backward()
        grads.append(adapter_grad(policy))
        outs.append(out)
    for key in ("logp", "entropy"):
        assert torch.allclose(outs[0][key][real], outs[1][key][real], atol=1e-5)
    assert torch.allclose(outs[0]["hidden"][attn.bool()], outs[1]["hidden"][attn.bool()], atol=1e-5)
    assert torch.allclose(grads[0], grads[1], atol=1e-5)
    assert not torch.allclose(outs[0]["hidden"][~attn.bool()], outs[1]["hidden"][~attn.bool()])  # the paths differ
