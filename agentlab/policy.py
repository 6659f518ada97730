"""Loading a causal LM as a `Policy` (fp32, 4-bit NF4 or 8-bit, with LoRA) and the `Policy` itself.

    policy = load_policy(path, quantization="4bit", lora=LoraSettings())
    policy.token_logprobs(ids, mask)         # (B, L-1) logprobs of the given tokens
    with policy.reference():                 # LoRA adapter disabled = the reference policy
        ref = policy.token_logprobs(ids, mask)

The tiny policy and a real instruct model take the same `from_pretrained` path, 4-bit
included: "tiny" resolves to the locally built folder (`agentlab.tiny`), anything else is a
`save_pretrained` folder or a hub id.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from agentlab import bnb_compat  # importing it drops one bitsandbytes log message (see there)
from agentlab.pretrained import HUB_TWINS, NAMED_MODELS, PolicyLoadError, gguf_folder, hub_reachable, named_model_folder
from agentlab.profiles import TINY
from agentlab.tensors import entropy_from_logp
from agentlab.tiny import SPECIAL, build_tiny


@dataclass
class LoraSettings:
    """LoRA adapter settings (peft)."""

    r: int = 8
    alpha: int = 16
    dropout: float = 0.0
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )


def resolve_device(device: str = "auto") -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise PolicyLoadError(f"device {device!r} requested but CUDA is not available; use device='cpu'")
    return device


def model_source(name_or_path: str) -> str:
    """The folder (or hub id) that ``name_or_path`` stands for; see `load_policy`."""
    if name_or_path == TINY:
        return str(build_tiny())
    if name_or_path in NAMED_MODELS:
        return str(named_model_folder(name_or_path))
    path = Path(name_or_path).expanduser()
    if path.suffix == ".gguf":
        return str(gguf_folder(path))
    if path.exists():
        if not (path / "config.json").exists():
            raise PolicyLoadError(f"{path} exists but holds no config.json: it is not a saved model folder")
        return str(path)
    if name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1:
        raise PolicyLoadError(f"model folder {name_or_path!r} does not exist")
    if hub_reachable():
        return name_or_path  # a hub id
    if name_or_path in HUB_TWINS:  # the same model ships in a package: use that copy
        print(f"the model hub is unreachable; loading {name_or_path!r} from its packaged copy {HUB_TWINS[name_or_path]!r}")
        return str(named_model_folder(HUB_TWINS[name_or_path]))
    from huggingface_hub import snapshot_download

    try:  # downloaded on an earlier, connected day
        return snapshot_download(name_or_path, local_files_only=True)
    except Exception as err:  # noqa: BLE001 - any miss means the model is not on this machine
        raise PolicyLoadError(
            f"could not load {name_or_path!r}: the Hugging Face hub is unreachable from this machine and the "
            "model is not in the local hub cache. Download it elsewhere and pass its local folder "
            f"(e.g. AGENTLAB_MODEL=/models/Qwen2.5-1.5B-Instruct), or use a packaged model: {', '.join(NAMED_MODELS)}."
        ) from err


def load_policy(
    name_or_path: str = TINY,
    quantization: str | None = None,
    lora: LoraSettings | bool | None = None,
    device: str = "auto",
    adapter: str | None = None,
) -> "Policy":
    """Load a causal LM and its tokenizer as a `Policy`.

    ``name_or_path``: ``"tiny"`` (built locally), a model shipped in a package (``"smollm2-135m"``,
    see `agentlab.pretrained`), a ``.gguf`` file, a ``save_pretrained`` folder, or a hub id (which
    falls back to a packaged copy or the local hub cache when the hub is unreachable).
    ``quantization``: None, ``"4bit"`` (NF4, double quantization; compute float32 on CPU,
    bf16 on CUDA) or ``"8bit"``. ``lora``: LoRA settings (True for the defaults) to train an
    adapter on the frozen base; ``adapter``: a saved adapter folder to load instead.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if quantization not in (None, "4bit", "8bit"):
        raise PolicyLoadError(f"quantization must be None, '4bit' or '8bit', got {quantization!r}")
    device = resolve_device(device)
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    source = model_source(name_or_path)
    kwargs: dict = {"dtype": dtype}
    if quantization is not None:
        kwargs["quantization_config"] = _bnb_config(quantization, dtype, device)
        kwargs["device_map"] = {"": device if device != "cuda" else 0}
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
    except OSError as err:
        if source == name_or_path and not Path(source).exists():
            raise PolicyLoadError(
                f"could not load {name_or_path!r} from the Hugging Face hub ({err.__class__.__name__}). "
                "The hub may be unreachable from this machine: download the model elsewhere and pass its "
                "local folder (e.g. AGENTLAB_MODEL=/models/Qwen2.5-1.5B-Instruct)."
            ) from err
        raise
    if tokenizer.chat_template is None:
        raise PolicyLoadError(
            f"the tokenizer of {name_or_path!r} has no chat template; agentlab needs one to build multi-turn "
            "prompts. Use an instruct/chat model or set tokenizer.chat_template before loading."
        )
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if quantization is None:
        model.to(device)
    elif device == "cpu":
        bnb_compat.keep_cpu_4bit_layout(model)
    if lora or adapter:
        model = _with_lora(model, lora if isinstance(lora, LoraSettings) else LoraSettings(), adapter, quantization)
    return Policy(model, tokenizer, name=name_or_path, quantization=quantization)


def _bnb_config(quantization: str, dtype: torch.dtype, device: str = "cpu"):
    try:
        import bitsandbytes  # noqa: F401
        from transformers import BitsAndBytesConfig
    except Exception as err:  # noqa: BLE001 - any import failure means no bitsandbytes here
        raise PolicyLoadError(
            f"{quantization} loading needs bitsandbytes, which cannot be imported here ({err}). "
            "Install it (pip install bitsandbytes) or load without quantization."
        ) from err
    if device == "cpu":  # the kernel it replaces runs on the CPU alone
        bnb_compat.fix_bitsandbytes_cpu()
    if quantization == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=dtype
    )


@contextlib.contextmanager
def _peft_wrapping():
    """peft 0.21 (the newest) reads transformers' deprecated ``is_gradient_checkpointing`` whenever it
    wraps a model, and transformers 5 answers with a FutureWarning on every LoRA load that nothing
    agentlab passes can avoid: that one message is hidden, while peft wraps the model only."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        yield


def _with_lora(model, settings: LoraSettings, adapter: str | None, quantization: str | None):
    from peft import LoraConfig, PeftModel, get_peft_model, prepare_model_for_kbit_training

    if quantization is not None:
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    if adapter is not None:
        with _peft_wrapping():
            return PeftModel.from_pretrained(model, adapter, is_trainable=True)
    names = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
    targets = [t for t in settings.target_modules if t in names]
    if not targets:
        raise PolicyLoadError(f"none of the LoRA target modules {settings.target_modules} exist in this model")
    config = LoraConfig(r=settings.r, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                        target_modules=targets, task_type="CAUSAL_LM")
    with _peft_wrapping():
        return get_peft_model(model, config)


# ---------------------------------------------------------------------------- the policy

def right_padded(mask: torch.Tensor) -> bool:
    """Whether every row of an attention mask (B, L) is its ones followed by its zeros (or no padding)."""
    return bool((mask[:, 1:] <= mask[:, :-1]).all())


def shared_prompts(ids: torch.Tensor, mask: torch.Tensor, only: torch.Tensor) -> tuple[list[int], list[int]] | None:
    """Which rows of right-padded ``ids`` (B, L) may share a prompt pass: (starts, owner) where row b's
    tokens before ``starts[b]`` (its first scored position in ``only`` (B, L-1)) equal those of row
    ``owner[b]``; None when no two rows start alike. Scoring starts at the prompt's last token, so
    the shared part is the prompt without it."""
    lengths = mask.sum(1).tolist()
    starts = [int(r.nonzero()[0]) if r.any() else n - 1 for r, n in zip(only.bool(), lengths)]
    if min(starts) < 1:
        return None
    first: dict[tuple, int] = {}
    owner = [first.setdefault((s, tuple(ids[b, :s].tolist())), b) for b, s in enumerate(starts)]
    if len(first) == len(owner):
        return None
    return starts, owner


def native_format(tokenizer) -> str:
    """``"tool_call"`` where the chat template renders ``tools=`` and writes calls in ``<tool_call>``
    blocks (Qwen2.5's does), else ``"call"`` (`agentlab.envs.actions`)."""
    template = tokenizer.chat_template if isinstance(getattr(tokenizer, "chat_template", None), str) else ""
    return "tool_call" if "<tool_call>" in template and "tools" in template else "call"


class Policy:
    """A causal LM + tokenizer that can sample, score given tokens, and act as its own reference.

    ``model`` may be a plain transformers model or a peft model with a LoRA adapter; in the
    latter case `reference()` disables the adapter, which gives the base model's logprobs
    exactly, so GRPO's KL needs no second copy of the model.
    """

    def __init__(self, model, tokenizer, name: str = "", quantization: str | None = None):
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.quantization = quantization
        self.eot_id = tokenizer.convert_tokens_to_ids(SPECIAL["eot"]) if SPECIAL["eot"] in tokenizer.get_vocab() \
            else tokenizer.eos_token_id
        self.pad_id = tokenizer.pad_token_id
        # How this model writes a tool call: its template's own format where the template renders a
        # tools= list into <tool_call> blocks (Qwen2.5), else the kit's name(argument) grammar.
        self.action_format = native_format(tokenizer)
        # Run a prompt that several rows share (a GRPO group's) once, in sampling and in scoring.
        # Worth it on a real model, whose prompts are most of an episode's tokens; off by default,
        # since batching rows differently moves the last digits of the logits (`shared_prompts`).
        self.share_prompts = False
        # The run folders whose updates these weights hold, so that `train` can tell a fresh policy from one a
        # cell run earlier already trained (a learner re-running the cell would otherwise train it further).
        self.trained_in: list[str] = []

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def has_adapter(self) -> bool:
        return hasattr(self.model, "disable_adapter")

    @contextlib.contextmanager
    def reference(self):
        """Inside this block the policy is the reference (adapter off); a no-op without LoRA."""
        if self.has_adapter:
            with self.model.disable_adapter():
                yield self
        else:
            yield self

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    # -- chat formatting --------------------------------------------------------------------------
    def render(self, messages: list[dict], add_generation_prompt: bool = False, tools: list[dict] | None = None) -> str:
        """The chat as the template writes it; ``tools`` (JSON schemas) where the action format is ``"tool_call"``."""
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt,
                                                  **({"tools": tools} if tools else {}))

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def prompt_ids(self, system: str, user: str, tools: list[dict] | None = None) -> list[int]:
        """Token ids of the system prompt (with ``tools`` where given) and first user message, ending
        where the agent speaks."""
        msgs = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        return self.encode(self.render(msgs, add_generation_prompt=True, tools=tools))

    def observation_ids(self, obs: str) -> list[int]:
        """Token ids that follow an action (which ended with end-of-turn): the env's reply as a user
        message, then the cue for the agent's next turn. Tokenised once, never re-tokenised."""
        a, b = "\x01A\x01", "\x01B\x01"
        msgs = [{"role": "user", "content": a}, {"role": "assistant", "content": b}, {"role": "user", "content": obs}]
        text = self.render(msgs, add_generation_prompt=True)
        after = text[text.index(b) + len(b):]
        eot = self.tokenizer.convert_ids_to_tokens(self.eot_id)
        if after.startswith(eot):
            after = after[len(eot):]
        return self.encode(after)

    # -- scoring ----------------------------------------------------------------------------------
    def forward(self, ids: torch.Tensor, mask: torch.Tensor, hidden: bool = False, **model_kwargs):
        """Logits (B, L, V) for right- or left-padded ids (B, L); position ids follow the mask.
        ``model_kwargs`` go to the model (e.g. ``logits_to_keep``)."""
        pos = (mask.long().cumsum(-1) - 1).clamp(min=0)
        # Right padding under a causal model: no real token can attend to a pad (pads only follow it), so
        # the mask changes nothing at real positions, yet it keeps attention off its faster causal kernel.
        attention_mask = None if right_padded(mask) else mask
        return self.model(input_ids=ids, attention_mask=attention_mask, position_ids=pos, output_hidden_states=hidden,
                          **model_kwargs)

    def score(self, ids: torch.Tensor, mask: torch.Tensor, temperature: float = 1.0, entropy: bool | str = False,
              hidden: bool = False, only: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """One teacher-forced pass over ids (B, L). Returns ``logp`` (B, L-1): log p(ids[:, t+1] | ids[:, :t+1])
        at ``temperature``; with ``entropy`` the entropy of each of those distributions (B, L-1), and with
        ``entropy="logged"`` the same numbers outside the autograd graph; with ``hidden`` the last layer's
        hidden states (B, L, H) for a value head.

        ``"logged"`` is for a loss that only reports the entropy (an entropy bonus of 0): in the graph, its
        vocabulary-sized intermediates (several per scored token) would be kept, and differentiated, for a
        gradient of zero.

        ``only`` (B, L-1), e.g. the loss mask: compute the distribution over the vocabulary at these
        positions alone and return 0 elsewhere. The projection to the vocabulary and its softmax are
        most of a pass when the vocabulary is large (151,936 tokens for Qwen2.5) while actions are a
        small share of an agent's tokens, so losses that only read action tokens pass their mask here.
        """
        if only is None or not self._head_applies_alone:
            out = self.forward(ids, mask, hidden=hidden)
            logits = out.logits[:, :-1].float() / temperature  # (B, L-1, V)
            logp_all = F.log_softmax(logits, dim=-1)
            result = {"logp": logp_all.gather(-1, ids[:, 1:, None]).squeeze(-1)}  # (B, L-1)
            if entropy:
                result["entropy"] = entropy_from_logp(logp_all if entropy is True else logp_all.detach())  # (B, L-1)
            if only is not None:
                result = {k: v * only for k, v in result.items()}
        else:
            shared = shared_prompts(ids, mask, only) if self.share_prompts else None
            if shared is None:
                last = self.forward(ids, mask, hidden=True, logits_to_keep=1).hidden_states[-1]  # (B, L, H)
            else:
                last = self._forward_shared(ids, mask, *shared)  # (B, L, H), the same numbers, less work
            where = only.bool()
            h = last[:, :-1][where]  # (K, H) after the final norm, K = positions kept
            logp_all = F.log_softmax(self.model.get_output_embeddings()(h).float() / temperature, dim=-1)  # (K, V)
            spread = lambda v: torch.zeros(where.shape, dtype=v.dtype, device=v.device).masked_scatter(where, v)  # noqa: E731
            result = {"logp": spread(logp_all.gather(-1, ids[:, 1:][where][:, None]).squeeze(-1))}  # (B, L-1)
            if entropy:
                result["entropy"] = spread(entropy_from_logp(logp_all if entropy is True else logp_all.detach()))
            if hidden:
                result["hidden"] = last
            return result
        if hidden:
            result["hidden"] = out.hidden_states[-1]
        return result

    def _forward_shared(self, ids: torch.Tensor, mask: torch.Tensor, starts: list[int], owner: list[int]) -> torch.Tensor:
        """The last hidden states (B, L, H) of right-padded ``ids``, where row b's first ``starts[b]`` tokens
        are those of row ``owner[b]``: each such prompt is run once, its keys and values are copied to the
        rows that share it (a differentiable copy, so gradients from every row reach it), and each row
        runs its own tokens from ``starts[b]`` on after it."""
        B, device = ids.shape[0], ids.device
        owners = sorted(set(owner))
        slot = {o: i for i, o in enumerate(owners)}
        width = max(starts[o] for o in owners)
        p_ids = torch.full((len(owners), width), self.pad_id, dtype=torch.long, device=device)
        p_mask = torch.zeros((len(owners), width), dtype=mask.dtype, device=device)
        for i, o in enumerate(owners):
            p_ids[i, :starts[o]], p_mask[i, :starts[o]] = ids[o, :starts[o]], 1
        pos = torch.arange(width, device=device).expand(len(owners), width)
        pre = self.model(input_ids=p_ids, attention_mask=p_mask, position_ids=pos, use_cache=True,
                         output_hidden_states=True, logits_to_keep=1)
        rows = torch.tensor([slot[owner[b]] for b in range(B)], device=device)
        cache = pre.past_key_values
        cache.batch_select_indices(rows)  # (U, ...) -> (B, ...): each row gets its prompt's keys and values
        lengths = mask.sum(1).tolist()
        rest_len = max(n - s for n, s in zip(lengths, starts))
        r_ids = torch.full((B, rest_len), self.pad_id, dtype=torch.long, device=device)
        r_mask = torch.zeros((B, rest_len), dtype=mask.dtype, device=device)
        for b in range(B):
            r_ids[b, :lengths[b] - starts[b]], r_mask[b, :lengths[b] - starts[b]] = ids[b, starts[b]:lengths[b]], 1
        r_pos = torch.tensor(starts, device=device)[:, None] + torch.arange(rest_len, device=device)  # (B, R)
        out = self.model(input_ids=r_ids, attention_mask=torch.cat([p_mask[rows], r_mask], 1), position_ids=r_pos,
                         past_key_values=cache, use_cache=True, output_hidden_states=True, logits_to_keep=1)
        p_h, r_h = pre.hidden_states[-1][rows], out.hidden_states[-1]  # (B, width, H), (B, R, H)
        pad = torch.zeros(ids.shape[1], p_h.shape[-1], dtype=r_h.dtype, device=device)
        return torch.stack([torch.cat([p_h[b, :starts[b]], r_h[b, :lengths[b] - starts[b]], pad[lengths[b]:]])
                            for b in range(B)])  # (B, L, H)

    @property
    def _head_applies_alone(self) -> bool:
        """Whether logits are just the output layer on the last hidden state (no soft-capping or
        scaling in between), so `score(only=...)` may apply that layer to chosen positions."""
        cfg = self.model.config
        return not any(getattr(cfg, k, None) for k in ("final_logit_softcapping", "logit_scale", "logits_scaling"))

    def token_logprobs(self, ids: torch.Tensor, mask: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
        """logp[b, t] = log p(ids[b, t+1] | ids[b, :t+1]) at ``temperature``: shape (B, L-1)."""
        return self.score(ids, mask, temperature)["logp"]

    def save(self, path: str | os.PathLike) -> None:
        """Save the adapter (with LoRA) or the whole model, and the tokenizer."""
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)

    def num_parameters(self, trainable_only: bool = False) -> int:
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad or not trainable_only)
