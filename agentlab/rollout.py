"""Batched multi-turn rollout and the `Trajectory` it produces, with token provenance.

One episode, as tokens (P = prompt, A = action, O = observation):

    P P P P P P | A A A <eot> | O O O O O O | A A <eot> | O O O O | A A A A <eot>
    system+task   turn 0        env reply     turn 1      env reply   turn 2

Every turn, the next action of *every live env* is sampled in one batched call; envs that
finished drop out of the batch. Action tokens are stored exactly as sampled (never
re-tokenised from text) with the logprob the sampling policy gave them; the observation
tokens appended after an action are tokenised once. Only action tokens carry loss. An action
cut off at the per-turn token budget is closed with an end-of-turn token that counts as part of
the reply (role O, no loss), so every turn reads a chat the template could have rendered.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from transformers.cache_utils import Cache, DynamicLayer

PROMPT, OBSERVATION, ACTION = 0, 1, 2
ROLE_NAMES = {PROMPT: "prompt", OBSERVATION: "observation", ACTION: "action"}
TOO_LONG = "Invalid action: it did not finish within {n} tokens (no end-of-turn token)."


# ---------------------------------------------------------------------------- trajectory

@dataclass
class Trajectory:
    """One episode: chat messages, tokens with roles, per-turn rewards, old logprobs.

    Token-level lists all have length L (the episode's tokens); turn-level lists have one
    entry per turn (an action and the env's reply to it).
    """

    env_id: str
    task_id: str
    messages: list[dict] = field(default_factory=list)  # [{"role", "content"}], system first
    token_ids: list[int] = field(default_factory=list)  # (L,)
    roles: list[int] = field(default_factory=list)  # (L,) PROMPT / OBSERVATION / ACTION
    turn_index: list[int] = field(default_factory=list)  # (L,) turn of each action token, -1 elsewhere
    logprobs: list[float] = field(default_factory=list)  # (L,) sampling logprob of action tokens, 0 elsewhere
    actions: list[str] = field(default_factory=list)  # (turns,) text sent to the env
    rewards: list[float] = field(default_factory=list)  # (turns,)
    components: list[dict] = field(default_factory=list)  # (turns,) reward components
    infos: list[dict] = field(default_factory=list)  # (turns,) the env's info, JSON-safe
    values: list[float] | None = None  # (turns,) critic estimates, when a critic is used
    terminated: bool = False
    truncated: bool = False
    success: bool = False
    difficulty: int = 0
    group: int = -1  # which group of samples (same task) this belongs to, for GRPO
    temperature: float = 1.0  # the temperature the logprobs were computed at
    action_format: str = "call"  # how the actions were written: "call" or "tool_call" (`agentlab.envs.actions`)
    start_state: str | None = None  # the env's canonical state key at reset, where it has one (`TextEnv.state_key`)
    sample_key: int | None = None  # the episode's own sampling stream (`rollout`'s ``keys``), when it had one

    # -- derived views ----------------------------------------------------------------------------
    @property
    def num_turns(self) -> int:
        return len(self.rewards)

    @property
    def total_reward(self) -> float:
        return float(sum(self.rewards))

    def component_totals(self) -> dict[str, float]:
        """Each reward component summed over the episode's turns."""
        totals: dict[str, float] = {}
        for turn in self.components:
            for name, value in turn.items():
                totals[name] = totals.get(name, 0.0) + float(value)
        return totals

    @property
    def loss_mask(self) -> list[int]:
        """1 on action tokens (the only tokens trained on), 0 elsewhere."""
        return [int(r == ACTION) for r in self.roles]

    def action_token_ids(self, turn: int) -> list[int]:
        return [t for t, k in zip(self.token_ids, self.turn_index) if k == turn]

    def turn_spans(self) -> list[tuple[int, int]]:
        """(start, end) token positions of each turn's action tokens."""
        spans = []
        for turn in range(self.num_turns):
            pos = [i for i, k in enumerate(self.turn_index) if k == turn]
            spans.append((pos[0], pos[-1] + 1) if pos else (0, 0))
        return spans

    def append_tokens(self, ids: list[int], role: int, turn: int = -1, logprobs: list[float] | None = None) -> None:
        """Add tokens of one role; action tokens carry their turn and sampling logprobs."""
        self.token_ids += ids
        self.roles += [role] * len(ids)
        self.turn_index += [turn if role == ACTION else -1] * len(ids)
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(ids)

    def record_step(self, action: str, obs: str | None, reward: float, info: dict) -> None:
        """Record one turn as the env saw it: the action sent, what it paid and its info, and
        the reply (``obs``; None leaves the reply out of the messages, as rollout does when the
        context is full)."""
        self.actions.append(action)
        self.messages.append({"role": "assistant", "content": action})
        if obs is not None:
            self.messages.append({"role": "user", "content": obs})
        self.rewards.append(float(reward))
        self.components.append(dict(info.get("reward_components", {})))
        self.infos.append(json_safe(info))

    def end(self, terminated: bool, info: dict) -> None:
        """Mark how the episode ended: terminated by the env (success is the env's verdict) or
        cut off (a step limit or a full context, where success is never claimed)."""
        self.terminated, self.truncated = bool(terminated), not terminated
        self.success = bool(info.get("success", False)) if terminated else False

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Trajectory":
        return cls(**d)


def save_jsonl(trajectories: Sequence[Trajectory], path: str | os.PathLike) -> None:
    """One trajectory per line; readable without a model (see `load_jsonl`)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for traj in trajectories:
            f.write(json.dumps(traj.to_dict()) + "\n")


def load_jsonl(path: str | os.PathLike) -> list[Trajectory]:
    with open(path) as f:
        return [Trajectory.from_dict(json.loads(line)) for line in f if line.strip()]


# As a Hugging Face dataset (the `trl` extra installs `datasets`): the same round trip, lossless.

def trajectory_features():
    """The `datasets.Features` of an exported trajectory, one column per `Trajectory` field.

    Lists keep their length-L (tokens) or per-turn shape. Reward components are per turn a
    list of ``{name, value}`` (order kept, queryable); infos are per turn JSON text, because
    their shape differs between envs and turns.
    """
    from datasets import Features, List, Value

    return Features({
        "env_id": Value("string"), "task_id": Value("string"),
        "messages": List({"role": Value("string"), "content": Value("string")}),
        "token_ids": List(Value("int64")), "roles": List(Value("int8")), "turn_index": List(Value("int64")),
        "logprobs": List(Value("float64")),
        "actions": List(Value("string")), "rewards": List(Value("float64")),
        "components": List(List({"name": Value("string"), "value": Value("float64")})),
        "infos": List(Value("string")),
        "values": List(Value("float64")),  # None when no critic was used
        "terminated": Value("bool"), "truncated": Value("bool"), "success": Value("bool"),
        "difficulty": Value("int64"), "group": Value("int64"), "temperature": Value("float64"),
        "action_format": Value("string"), "start_state": Value("string"),
        "sample_key": Value("int64"),  # None when the episode sampled from its batch's generator
    })


def _check_schema(features) -> None:
    missing = {f.name for f in dataclasses.fields(Trajectory)} - set(features)
    if missing:
        raise RuntimeError(f"Trajectory has field(s) {sorted(missing)} that the dataset export does not know; add "
                           "them to trajectory_features() in agentlab/rollout.py")


def trajectory_row(traj: Trajectory) -> dict:
    """One trajectory as a dataset row (see `trajectory_features`)."""
    row = traj.to_dict()
    for m in row["messages"]:
        if set(m) != {"role", "content"}:
            raise ValueError(f"trajectory {traj.task_id!r}: a message has keys {sorted(m)}; the export keeps "
                             "messages as {role, content} only")
    row["components"] = [[{"name": k, "value": v} for k, v in turn.items()] for turn in row["components"]]
    row["infos"] = [json.dumps(info) for info in row["infos"]]
    return row


def trajectory_from_row(row: dict) -> Trajectory:
    """The inverse of `trajectory_row`."""
    row = dict(row)
    row["messages"] = [dict(m) for m in row["messages"]]
    row["components"] = [{c["name"]: c["value"] for c in turn} for turn in row["components"]]
    row["infos"] = [json.loads(info) for info in row["infos"]]
    return Trajectory.from_dict(row)


def to_dataset(trajs: Sequence[Trajectory]):
    """agentlab trajectories as a `datasets.Dataset`: messages, token ids and roles, per-turn
    rewards and components, sampling logprobs, infos. `from_dataset` gives them back unchanged."""
    from datasets import Dataset

    features = trajectory_features()
    _check_schema(features)
    return Dataset.from_list([trajectory_row(t) for t in trajs], features=features)


def from_dataset(ds) -> list[Trajectory]:
    """Trajectories from a dataset written by `to_dataset` (also after save_to_disk / push_to_hub)."""
    missing = set(trajectory_features()) - set(ds.column_names)
    if missing:
        raise ValueError(f"this dataset lacks the trajectory column(s) {sorted(missing)}; was it made by to_dataset?")
    return [trajectory_from_row(row) for row in ds]


def play(env, act, task=None, seed: int = 0) -> Trajectory:
    """One episode of a scripted policy, recorded as a `Trajectory` (no model, so no tokens).

    ``act`` is either a function ``act(env) -> action string``, called with the unwrapped env
    (which knows its task, e.g. ``env.expert_action()``), or a list of action strings played in
    order; a list that runs out ends the recording, whether or not the episode ended.
    """
    base = getattr(env, "unwrapped", env)
    obs, info = env.reset(seed=seed, options=None if task is None else {"task": task})
    traj = Trajectory(env_id=f"agentlab/{base.name}-v0", task_id=info["task_id"], difficulty=int(info["difficulty"]),
                      messages=[{"role": "system", "content": base.system_prompt}, {"role": "user", "content": obs}],
                      action_format=getattr(base, "action_format", "call"), start_state=info.get("state"))
    script = None if callable(act) else iter(act)
    while (action := act(base) if script is None else next(script, None)) is not None:
        obs, reward, terminated, truncated, info = env.step(action)
        traj.record_step(action, obs, reward, info)
        if terminated or truncated:
            traj.end(terminated, info)
            break
    return traj


def json_safe(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    if isinstance(x, (np.generic,)):
        return x.item()
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    return repr(x)


# ---------------------------------------------------------------------------- sampling

@dataclass
class SamplingSettings:
    """How actions are sampled: temperature 0.7-1.0 for training, greedy for evaluation (S16)."""

    temperature: float = 1.0
    top_p: float = 1.0  # 1.0 = no nucleus truncation (on-policy)
    max_new_tokens: int = 24  # per turn; an action without end-of-turn by then is invalid
    greedy: bool = False


class SpareRoomLayer(DynamicLayer):
    """One layer's keys and values in a buffer with room to grow, for the rollout's KV cache.

    transformers' `DynamicLayer` concatenates the whole cache with each new token, so every decode
    step copies all of it: with the tiny model's 64 rows that copy costs more than its arithmetic.
    Here a new token is written in place, into room for ``SPARE`` more positions made whenever the
    buffer is full: a copy every 128 tokens instead of every token, and a peak memory that of
    `DynamicLayer` (which holds the old and the new cache during each copy) plus 128 positions, so
    `agentlab.memory`'s rollout estimate still holds. Attention reads a view of the filled part, the
    same values in the same shape, so the logits are bit for bit those of `DynamicLayer`
    (tests/test_rollout.py compares them)."""

    SPARE = 128

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self._keys = self._values = None  # (B, H, capacity, D)
        self._filled = 0

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n, new = self._filled, key_states.shape[-2]
        if self._keys is None or n + new > self._keys.shape[-2]:
            room = n + new + self.SPARE
            keys = key_states.new_empty(*key_states.shape[:2], room, key_states.shape[-1])
            values = value_states.new_empty(*value_states.shape[:2], room, value_states.shape[-1])
            if n:
                keys[:, :, :n], values[:, :, :n] = self._keys[:, :, :n], self._values[:, :, :n]
            self._keys, self._values = keys, values
        self._keys[:, :, n:n + new], self._values[:, :, n:n + new] = key_states, value_states
        self._filled = n + new
        self.keys, self.values = self._keys[:, :, :self._filled], self._values[:, :, :self._filled]
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.get_seq_length() > 0:
            self._keys, self._values = self._keys[indices], self._values[indices]
            self.keys, self.values = self._keys[:, :, :self._filled], self._values[:, :, :self._filled]


class _Decoder:
    """The batch's KV cache, kept across turns.

    Each turn feeds the model only what is new since the last one (the end of the previous
    action and the observation after it) instead of re-reading the whole history. Rows are
    left-padded per chunk, so a row's cache has masked holes; position ids count only a row's
    real tokens, so every row sees exactly the positions a fresh pass over its history gives.
    """

    def __init__(self, policy):
        self.policy, self.past = policy, Cache(layer_class_to_replicate=SpareRoomLayer)
        self.ids, self.mask = None, None  # (B, L) every token fed so far; 1 on the real ones

    def extend(self, chunks: list[list[int]]) -> torch.Tensor:
        """Append each row's new tokens; return the next-token logits after them, (B, V)."""
        if self.ids is None and self.policy.share_prompts:
            # A group's episodes start from one prompt: read each distinct prompt once, then copy its cache.
            first: dict[tuple, int] = {}
            rows = [first.setdefault(tuple(c), len(first)) for c in chunks]
            if len(first) < len(chunks):
                logits = self._extend([list(c) for c in first])
                self.keep(rows)
                return logits[rows]
        return self._extend(chunks)

    def _extend(self, chunks: list[list[int]]) -> torch.Tensor:
        device, width = self.policy.device, max(len(c) for c in chunks)
        ids = torch.full((len(chunks), width), self.policy.pad_id, dtype=torch.long)
        new = torch.zeros((len(chunks), width), dtype=torch.long)
        for b, chunk in enumerate(chunks):
            if chunk:
                ids[b, width - len(chunk):] = torch.tensor(chunk)
                new[b, width - len(chunk):] = 1
        return self._forward(ids.to(device), new.to(device))

    def step(self, tokens: torch.Tensor, alive: torch.Tensor) -> torch.Tensor:
        """Feed one sampled token per row (B,); rows not ``alive`` are masked out."""
        return self._forward(tokens[:, None], alive.long()[:, None])

    def _forward(self, ids: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
        seen = torch.zeros_like(new[:, :1]) if self.mask is None else self.mask.sum(-1, keepdim=True)
        pos = (seen + new.cumsum(-1) - 1).clamp(min=0)  # (B, C) positions among the row's real tokens
        mask = new if self.mask is None else torch.cat([self.mask, new], dim=1)
        every = ids if self.ids is None else torch.cat([self.ids, ids], dim=1)
        # Only the last position's logits are read: projecting every new token (a whole prompt or
        # observation) to a 49k-token vocabulary would cost more than the rest of the pass.
        if self.past is None and self.ids is not None:
            # The model keeps no cache (e.g. gradient checkpointing in training mode): read it all again.
            out = self.policy.forward(every, mask, use_cache=False, logits_to_keep=1)
        else:
            out = self.policy.model(input_ids=ids, attention_mask=mask, position_ids=pos,
                                    past_key_values=self.past, use_cache=True, logits_to_keep=1)
        past = out.past_key_values
        # a model that kept nothing (None, or the empty cache it was given back) is read whole from then on
        self.past = past if past is not None and past.get_seq_length() == every.shape[1] else None
        self.ids, self.mask = every, mask
        return out.logits[:, -1]

    def keep(self, rows: list[int]) -> None:
        """Keep only these rows (the envs still playing), in this order."""
        idx = torch.tensor(rows, dtype=torch.long, device=self.mask.device)
        if self.past is not None:
            for layer in self.past.layers:
                layer.batch_select_indices(idx)
        self.ids, self.mask = self.ids[idx], self.mask[idx]


_MASK64 = (1 << 64) - 1


def stream_uniform(key: int, n: int) -> float:
    """Draw ``n`` (0, 1, ...) of the sampling stream ``key``, in [0, 1). It is splitmix64 (Steele, Lea and
    Flood, OOPSLA 2014), a counter-based generator: the draw depends on (key, n) alone, so an episode that
    samples from its own key gets the same tokens whichever episodes share its batch."""
    z = (key + (n + 1) * 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return ((z ^ (z >> 31)) >> 11) * 2.0 ** -53


def _inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Row b's token: where ``u[b]`` of the way along its cumulative probabilities falls; (B, V), (B,) -> (B,).
    The weights need not sum to 1 (top-p leaves them cut); a token of weight 0 is never picked."""
    cdf = probs.double().cumsum(-1)  # float64: a float32 sum over 49k tokens drifts by more than a tail token weighs
    tok = torch.searchsorted(cdf, (u.to(cdf) * cdf[:, -1])[:, None], right=True).squeeze(-1)
    last = probs.shape[-1] - 1 - (probs > 0).flip(-1).int().argmax(-1)  # u * total can round up to the total
    return torch.minimum(tok, last)


@torch.no_grad()
def _sample_turn(decoder: _Decoder, logits: torch.Tensor, settings: SamplingSettings, eot_id: int,
                 generator: torch.Generator | None = None,
                 streams: list[tuple[int, int]] | None = None) -> tuple[list[list[int]], list[list[float]], list[int]]:
    """Sample one action per row from ``logits`` onwards. Returns the tokens (ending with
    end-of-turn unless the limit came first), their logprobs at ``settings.temperature``, and how
    many of each row's tokens were fed into the cache (the rest start the next turn's chunk).
    ``streams``: per row, (key, draws taken so far), to sample from the rows' own streams
    (`stream_uniform`) instead of the batch's one ``generator``."""
    B, device = logits.shape[0], logits.device
    done = torch.zeros(B, dtype=torch.bool, device=device)
    tokens: list[list[int]] = [[] for _ in range(B)]
    logps: list[list[float]] = [[] for _ in range(B)]
    fed = [0] * B
    temperature = 1.0 if settings.greedy else settings.temperature
    for step in range(settings.max_new_tokens):
        logp_all = F.log_softmax(logits.float() / temperature, dim=-1)  # (B, V)
        if settings.greedy:
            tok = logp_all.argmax(-1)
        else:
            probs = _top_p(logp_all.exp(), settings.top_p)
            if streams is None:
                tok = torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (B,)
            else:
                u = torch.tensor([stream_uniform(key, n + step) for key, n in streams], dtype=torch.float64)
                tok = _inverse_cdf(probs, u.to(device))
        lp = logp_all.gather(-1, tok[:, None]).squeeze(-1)
        alive = ~done
        for b in alive.nonzero().flatten().tolist():
            tokens[b].append(int(tok[b]))
            logps[b].append(float(lp[b]))
        done = done | (tok == eot_id)
        if bool(done.all()) or step == settings.max_new_tokens - 1:
            break
        logits = decoder.step(tok, alive)
        for b in alive.nonzero().flatten().tolist():
            fed[b] += 1
    return tokens, logps, fed


def _top_p(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of tokens whose probability reaches ``top_p``; (B, V) -> (B, V)."""
    if top_p >= 1.0:
        return probs
    sorted_p, order = probs.sort(-1, descending=True)
    keep = sorted_p.cumsum(-1) - sorted_p < top_p
    sorted_p = sorted_p * keep
    return torch.zeros_like(probs).scatter(-1, order, sorted_p)


# ---------------------------------------------------------------------------- rollout

def rollout(
    envs: Sequence,
    policy,
    settings: SamplingSettings | None = None,
    tasks: Sequence | None = None,
    seeds: Sequence[int] | None = None,
    generator: torch.Generator | None = None,
    max_context: int | None = None,
    prompt_prefix: str = "",
    on_end: Callable[[Trajectory], None] | None = None,
    keys: Sequence[int] | None = None,
) -> list[Trajectory]:
    """Run one episode in each env, batching every live env's next action per turn.

    ``tasks[i]`` (a `Task` or dict) or ``seeds[i]`` picks env i's task. Sampling draws from
    ``generator``, one stream for the batch, so an episode's tokens depend on the whole batch;
    or, given ``keys``, episode i draws from its own stream ``keys[i]`` (`stream_uniform`) and
    gets the same tokens however the episodes are batched or split (another batch shape can move the
    logits' last bits, which changes a token only if its draw falls that close to a boundary between
    two tokens). ``max_context`` caps
    the episode's tokens (default: the model's position limit); an episode that would pass
    it is truncated. ``prompt_prefix`` is added before the first observation (reflection).
    ``on_end`` is called with each trajectory as its episode ends (a progress bar's hook).
    Every env takes the policy's action format (``policy.action_format``): its prompt, its tools
    (as schemas in the template's ``tools=`` for ``"tool_call"``) and its parser follow it.
    """
    settings = settings or SamplingSettings()
    n = len(envs)
    if keys is not None and (len(keys) != n or generator is not None):
        raise ValueError(f"rollout: give one key per env ({len(keys)} keys for {n} envs) and no generator; "
                         "keys replace the generator's single stream")
    max_context = max_context or getattr(policy.model.config, "max_position_embeddings", 4096)
    fmt = getattr(policy, "action_format", "call")
    trajs, contexts = [], []
    for i, env in enumerate(envs):
        base = getattr(env, "unwrapped", env)
        if getattr(base, "action_format", "call") != fmt:
            if not hasattr(base, "tool_schemas"):
                raise ValueError(f"{type(base).__name__} knows only the name(argument) grammar; the policy writes "
                                 f"{fmt!r} actions. Set policy.action_format = 'call' to play it")
            base.action_format = fmt
        options = {"task": tasks[i]} if tasks is not None else None
        obs, info = env.reset(seed=None if seeds is None else int(seeds[i]), options=options)
        first = prompt_prefix + obs
        ids = policy.prompt_ids(base.system_prompt, first, tools=base.tool_schemas() if fmt == "tool_call" else None)
        spec_id = env.spec.id if getattr(env, "spec", None) is not None else f"agentlab/{base.name}-v0"
        trajs.append(Trajectory(
            env_id=spec_id, task_id=info.get("task_id", ""), difficulty=int(info.get("difficulty", 0)),
            messages=[{"role": "system", "content": base.system_prompt}, {"role": "user", "content": first}],
            temperature=1.0 if settings.greedy else settings.temperature, action_format=fmt,
            start_state=info.get("state"), sample_key=None if keys is None else int(keys[i]),
        ))
        trajs[-1].append_tokens(ids, PROMPT)
        contexts.append(list(ids))
    live = list(range(n))
    drawn = [0] * n  # each episode's draws so far: where its stream goes on next turn
    decoder = _Decoder(policy)
    with torch.no_grad():
        logits = decoder.extend(contexts)
    while live:
        streams = None if keys is None else [(int(keys[i]), drawn[i]) for i in live]
        new_tokens, new_logps, fed = _sample_turn(decoder, logits, settings, policy.eot_id, generator, streams)
        still, chunks = [], []
        for row, (i, toks, lps) in enumerate(zip(live, new_tokens, new_logps)):
            traj, env = trajs[i], envs[i]
            turn = traj.num_turns
            finished = bool(toks) and toks[-1] == policy.eot_id
            text = policy.tokenizer.decode(toks[:-1] if finished else toks, skip_special_tokens=False)
            traj.append_tokens(toks, ACTION, turn, lps)
            contexts[i] += toks
            drawn[i] += len(toks)
            if finished:
                obs, reward, term, trunc, info = env.step(text)
            else:  # ran out of tokens: the env still counts the turn and charges the format penalty
                _, reward, term, trunc, info = env.step("")
                obs = TOO_LONG.format(n=settings.max_new_tokens)
                info = {**info, "valid": False}
            # A cut action still ends its turn with end-of-turn, as the chat template would write it,
            # so the next turn reads a well-formed chat; the policy did not write it, so it is not trained.
            obs_ids = ([] if finished else [policy.eot_id]) + policy.observation_ids(obs)
            out_of_context = len(contexts[i]) + len(obs_ids) + settings.max_new_tokens > max_context
            traj.record_step(text, None if out_of_context else obs, reward, info)
            if not out_of_context:  # the last observation is kept too: a critic values the state it shows
                traj.append_tokens(obs_ids, OBSERVATION)
                contexts[i] += obs_ids
            if term or trunc or out_of_context:  # out of context ends like a step limit (bootstrapped)
                traj.end(term, info)
                if on_end is not None:
                    on_end(traj)
                continue
            still.append((row, i))
            chunks.append(toks[fed[row]:] + obs_ids)  # what the cache has not seen yet
        live = [i for _, i in still]
        if live:
            decoder.keep([row for row, _ in still])
            with torch.no_grad():
                logits = decoder.extend(chunks)
    return trajs


def make_envs(env_id: str, n: int, **env_kwargs) -> list:
    """``n`` independent instances of one env (no Gymnasium wrappers; see `agentlab.envs.make`)."""
    from agentlab.envs import make

    return [make(env_id, **env_kwargs) for _ in range(n)]


# ---------------------------------------------------------------------------- batching for losses

def pad_batch(trajs: Sequence[Trajectory], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad trajectories into tensors for a teacher-forced forward pass.

    Returns ``ids`` (B, L), ``attn`` (B, L), ``loss_mask`` (B, L-1) — 1 where the *next*
    token is an action token — ``old_logp`` (B, L-1) and ``turn_index`` (B, L-1), aligned with
    `Policy.token_logprobs` (position t scores token t+1).
    """
    B, L = len(trajs), max(len(t.token_ids) for t in trajs)
    ids = torch.full((B, L), pad_id, dtype=torch.long)
    attn = torch.zeros((B, L), dtype=torch.long)
    loss_mask = torch.zeros((B, L), dtype=torch.float32)
    old_logp = torch.zeros((B, L), dtype=torch.float32)
    turn_index = torch.full((B, L), -1, dtype=torch.long)
    for b, t in enumerate(trajs):
        n = len(t.token_ids)
        ids[b, :n] = torch.tensor(t.token_ids)
        attn[b, :n] = 1
        loss_mask[b, :n] = torch.tensor(t.loss_mask, dtype=torch.float32)
        old_logp[b, :n] = torch.tensor(t.logprobs, dtype=torch.float32)
        turn_index[b, :n] = torch.tensor(t.turn_index)
    return {"ids": ids, "attn": attn, "loss_mask": loss_mask[:, 1:], "old_logp": old_logp[:, 1:],
            "turn_index": turn_index[:, 1:]}

