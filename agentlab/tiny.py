"""The tiny policy: a byte-level BPE tokenizer trained on the envs' own text and a small Llama-config model.

    path = build_tiny(profile())     # a save_pretrained folder, built once and cached

No model hub is reachable where agentlab is built and tested, so the kit makes its own small
model: the tokenizer learns from the prompts, observations and actions of every env, and the
model is initialised at random with the shape `TINY_ARCH`. It is saved with
`save_pretrained`, so it loads through the same `from_pretrained` path as a hub model
(`agentlab.policy.load_policy`). `agentlab.warmup` then teaches it the action grammar.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

import torch

from agentlab.cache import atomic_save, build_lock, cache_dir, manifest_problem, reusable
from agentlab.profiles import Profile, profile

# The tiny model's shape, the same in every profile (a profile says only which model to load);
# small enough that an RL update takes seconds on two CPU cores.
TINY_ARCH = dict(hidden_size=96, num_layers=3, num_heads=4, intermediate_size=256, vocab_size=1024, max_seq_len=768)

SPECIAL = {"pad": "<|pad|>", "eot": "<|end|>", "bos": "<|bos|>"}
ROLE_TOKENS = ["<|system|>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


# The envs whose text the tokenizer learns from: the seven that generate their own tasks. Envs on
# real data (TextCraft, HumanEval, Wordle) are tokenised with the pieces learned here, so adding
# one changes neither the tiny policy nor any warm-up or number measured with it.
CORPUS_ENVS = ("agentlab/GuessNumber-v0", "agentlab/Maze-v0", "agentlab/WebSearch-v0", "agentlab/SQL-v0",
               "agentlab/Code-v0", "agentlab/Math-v0", "agentlab/Dialog-v0")


@functools.lru_cache(maxsize=4)
def tokenizer_corpus(episodes_per_env: int = 60, seed: int = 0) -> tuple[str, ...]:
    """Text the tiny tokenizer is trained on: prompts, observations and actions of the
    `CORPUS_ENVS` (cached for the process: it runs them, the code sandbox included)."""
    import numpy as np

    from agentlab.envs import make

    texts = [CHAT_TEMPLATE]
    for env_id in CORPUS_ENVS:
        env = make(env_id)
        rng = np.random.default_rng(seed)
        texts.append(env.system_prompt)
        for ep in range(episodes_per_env):
            obs, _ = env.reset(seed=seed + ep, options={"task": env.generate_task(rng, ep % (env.max_difficulty + 1))})
            texts.append(obs)
            for _ in range(env.max_steps):
                action = env.expert_action() if rng.random() < 0.6 else env.imperfect_action(rng)
                obs, _, term, trunc, _ = env.step(action)
                texts += [action, obs]
                if term or trunc:
                    break
        env.close()
    return tuple(texts)


def _env_source_digest() -> str:
    """A hash of the source files the tokenizer corpus comes from (the `CORPUS_ENVS`' modules, the
    base class, the action parser and the sandbox): the corpus is a function of them (and the seed), so this says when
    it changed without running the envs to find out."""
    from agentlab.envs import ENV_CLASSES

    env_dir = Path(__file__).resolve().parent / "envs"
    modules = {ENV_CLASSES[e].split(":")[0].rsplit(".", 1)[1] for e in CORPUS_ENVS} | {"base", "actions", "sandbox"}
    h = hashlib.sha256()
    for path in sorted(p for p in env_dir.glob("*.py") if p.stem in modules):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def _recipe(prof: Profile) -> dict:
    import tokenizers
    import transformers

    return {"arch": TINY_ARCH, "seed": prof.seed, "envs": _env_source_digest(), "template": CHAT_TEMPLATE, "version": 1,
            "transformers": transformers.__version__.split(".")[0], "tokenizers": tokenizers.__version__}


def train_tokenizer(corpus: tuple[str, ...] | list[str], vocab_size: int):
    """A byte-level BPE tokenizer with pad / end-of-turn / role tokens and a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = list(SPECIAL.values()) + ROLE_TOKENS
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token=SPECIAL["pad"], eos_token=SPECIAL["eot"], bos_token=SPECIAL["bos"],
        additional_special_tokens=ROLE_TOKENS,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny(prof: Profile | None = None, force: bool = False, verbose: bool = True) -> Path:
    """Build (or reuse) the tiny policy for ``prof``; returns its ``save_pretrained`` folder.

    Deterministic: the same recipe (architecture, seed, the envs' source that the tokenizer's
    corpus comes from, library versions) gives the same tokenizer and weights. The folder name is the recipe's hash, so a changed
    recipe builds anew and an unchanged one is reused, if its manifest shows it whole (`agentlab.cache.reusable`).
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    prof = prof or profile()
    recipe = _recipe(prof)
    key = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]
    out = cache_dir() / f"tiny-{key}"
    if not force and manifest_problem(out) is None:
        return out
    with build_lock(out):  # a process started beside this one may be building it
        if not force and reusable(out, "the tiny policy"):
            return out
        if verbose:
            print(f"building the tiny policy in {out} ...")
        tokenizer = train_tokenizer(tokenizer_corpus(seed=prof.seed), TINY_ARCH["vocab_size"])
        torch.manual_seed(prof.seed)
        a = TINY_ARCH
        config = LlamaConfig(
            vocab_size=len(tokenizer), hidden_size=a["hidden_size"], intermediate_size=a["intermediate_size"],
            num_hidden_layers=a["num_layers"], num_attention_heads=a["num_heads"], num_key_value_heads=a["num_heads"],
            max_position_embeddings=a["max_seq_len"], pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id, tie_word_embeddings=True,
        )
        model = LlamaForCausalLM(config)
        atomic_save(out, lambda tmp: (model.save_pretrained(tmp), tokenizer.save_pretrained(tmp),
                                       (tmp / "recipe.json").write_text(json.dumps(recipe, indent=1))))
        return out
