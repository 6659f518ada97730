"""Pieces every benchmark shares: the tiny policy, fixed-length sampling, timing, tables, scores, profiles.

Each comparison module exposes ``run(quick: bool) -> str``, which measures both sides and
returns a markdown section for RESULTS.md (it also prints its table as it goes).
"""

from __future__ import annotations

import contextlib
import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable, Sequence

import torch

SEED = 0
NO_EOT_LOGIT = -1e4  # far below every real logit, yet finite: exp() gives 0 and 0 * logit stays 0 (entropy)


def go_offline() -> None:
    """No hub is reachable where the benchmarks run: make every library fail fast instead of retrying."""
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ.setdefault(key, "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def git_revision() -> str:
    """This checkout as `git describe --always --dirty` writes it, "unknown" outside git."""
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], cwd=Path(__file__).resolve().parents[1],
                              capture_output=True, text=True, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def repeats(quick: bool) -> int:
    """Timed repetitions per measurement: medians over 3 (1 with --quick)."""
    return 1 if quick else 3


def tiny_path() -> str:
    """The tiny base model of the ``ci`` profile (untrained: fine for throughput), built once and cached."""
    from agentlab.profiles import profile
    from agentlab.tiny import build_tiny

    return str(build_tiny(profile("ci"), verbose=False))


SMOLLM2 = "smollm2-135m"
MODELS = {"tiny": "the untrained tiny policy", SMOLLM2: "SmolLM2-135M-Instruct"}
TINY_CONTEXT = 4096  # positions the tiny policy is given in long-episode benchmarks (see `bench_policy`)


def model_path(name: str) -> str:
    """The folder of a benchmark model: ``"tiny"`` (the ``ci`` profile's) or ``"smollm2-135m"`` (its cached
    conversion), for agentlab and for the peers that load it with ``from_pretrained``."""
    from agentlab.policy import model_source

    return tiny_path() if name == "tiny" else model_source(name)


def bench_policy(name: str, **kwargs):
    """A benchmark model as an agentlab `Policy` (``kwargs`` go to `load_policy`: lora, quantization).

    The tiny policy's config says 768 positions, which a 50-turn episode passes; its rotary
    position code works at any position and the model is untrained, so for throughput it is
    given ``TINY_CONTEXT`` positions (rollout reads the limit from the config)."""
    from agentlab.policy import load_policy

    policy = load_policy(model_path(name), **kwargs)
    if name == "tiny":
        policy.model.config.max_position_embeddings = TINY_CONTEXT
    return policy


def fixed_length_envs(env_id: str, n: int, turns: int) -> list:
    """``n`` envs whose episodes last exactly ``turns`` turns when no action ever ends (inside
    `without_end_of_turn` every action is cut, invalid, and the episode runs to its step limit)."""
    from agentlab.envs import make

    return [make(env_id, max_steps=turns) for _ in range(n)]


# ---------------------------------------------------------------------------- equal lengths

@contextlib.contextmanager
def without_end_of_turn(model: torch.nn.Module, eot_id: int):
    """Inside this block ``model`` never ends a turn: its end-of-turn logit is pushed to -1e4.

    Both sides of a comparison then generate exactly ``max_new_tokens`` per turn, so they do
    the same work whatever the untrained model would have sampled. This is what
    ``generate(min_new_tokens=...)`` does, applied at the output layer so that agentlab's
    sampler (which has no such option) sees it too.
    """
    head = model.get_output_embeddings()

    def hook(_module, _inputs, logits):
        return logits.index_fill(-1, torch.tensor([eot_id], device=logits.device), NO_EOT_LOGIT)

    handle = head.register_forward_hook(hook)
    try:
        yield model
    finally:
        handle.remove()


@contextlib.contextmanager
def sharing_prompts(policy, share: bool):
    """Inside this block ``policy`` runs a group's shared prompt once (``share``) or once per row; as before after."""
    before, policy.share_prompts = policy.share_prompts, share
    try:
        yield policy
    finally:
        policy.share_prompts = before


# ---------------------------------------------------------------------------- timing

def seconds(fn: Callable, *args, **kwargs) -> tuple[float, object]:
    """Wall-clock seconds of one call, and its result."""
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - start, out


def interleaved(sides: dict[str, Callable[[], object]], n_repeats: int) -> dict[str, list[tuple[float, object]]]:
    """Run every side once per repeat, alternating (A B A B ...), so that a change in the machine's
    load falls on both; each side's (seconds, result) per repeat. Medians of these compare like with like."""
    out: dict[str, list[tuple[float, object]]] = {name: [] for name in sides}
    for _ in range(n_repeats):
        for name, fn in sides.items():
            out[name].append(seconds(fn))
    return out


class ForwardClock:
    """Seconds a model spends in forward passes that read several new tokens per row (a prompt or
    a history: "prefill") and one token per row (sampling: "decode"), from hooks on its outermost
    module. Use as ``with ForwardClock(model) as clock: ...`` and read ``clock.prefill_s``.
    ``clock.passes`` has every pass: seconds, rows, width, new real tokens and positions attended to
    (cached and new)."""

    def __init__(self, model: torch.nn.Module):
        model = model.get_base_model() if hasattr(model, "get_base_model") else model  # under a LoRA wrapper
        self.model, self.prefill_s, self.decode_s, self.prefill_tokens = model, 0.0, 0.0, 0
        self.passes: list[dict] = []
        self._start, self._now, self._handles = 0.0, {}, []

    def _before(self, _module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)  # (B, C) the new chunk
        mask = kwargs.get("attention_mask")  # (B, cached + C) 1 on real positions
        if ids is None:
            self._now = {"rows": 0, "width": 0, "new": 0, "attended": 0}
        else:
            mask = torch.ones_like(ids) if mask is None else mask
            self._now = {"rows": ids.shape[0], "width": ids.shape[1], "new": int(mask[:, -ids.shape[1]:].sum()),
                         "attended": int(mask.sum())}
            if ids.shape[1] > 1:
                self.prefill_tokens += ids.numel()
        self._start = time.perf_counter()

    def _after(self, *_):
        dt = time.perf_counter() - self._start
        self.passes.append({**self._now, "s": dt})
        if self._now["width"] > 1:
            self.prefill_s += dt
        else:
            self.decode_s += dt

    def __enter__(self) -> "ForwardClock":
        self._handles = [self.model.register_forward_pre_hook(self._before, with_kwargs=True),
                         self.model.register_forward_hook(self._after)]
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


def progress(iterable, desc: str, total: int | None = None):
    """A tqdm bar on stderr (the tables go to stdout)."""
    from tqdm.auto import tqdm

    return tqdm(iterable, desc=desc, total=total, leave=False, dynamic_ncols=True)


# ---------------------------------------------------------------------------- markdown

def table(headers: Sequence[str], rows: Sequence[Sequence]) -> str:
    """A markdown table; floats keep 3 significant digits (more for big numbers)."""
    def cell(x) -> str:
        if isinstance(x, float):
            return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}"
        return str(x)

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(x) for x in row) + " |" for row in rows]
    return "\n".join(lines)


def verdict(what: str, value: float, goal: float) -> str:
    """One line: the measured ratio against its goal, and by how much it is met or missed."""
    if value >= goal:
        return f"**Goal met**: {what} is {value:.1f}x (goal >= {goal:g}x)."
    return (f"**Goal missed**: {what} is {value:.2f}x, short of the {goal:g}x goal by "
            f"{goal - value:.2f}x ({100 * (1 - value / goal):.0f}% below).")


# ---------------------------------------------------------------------------- envs and scores

def env_ids(real_data: bool) -> list[str]:
    """agentlab's envs on real data (TextCraft, HumanEval, Wordle: their class's ``real_data``), or those
    whose tasks are generated; the real-data ones have a section of their own (`bench.real_tasks`)."""
    from agentlab.envs import ENV_IDS, env_class

    return [env_id for env_id in ENV_IDS if env_class(env_id).real_data == real_data]


def level0_tasks(env_id: str, n: int) -> list:
    """The first ``n`` eval tasks of difficulty 0."""
    from agentlab.evaluate import split_tasks

    return [t for t in split_tasks(env_id) if t.difficulty == 0][:n]


def jsonl_rows(path: str, resume: bool) -> tuple[Path, list[dict]]:
    """A bench's JSON-lines output and the rows it already holds: read when ``resume``, else emptied."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = [json.loads(line) for line in out.read_text().splitlines()] if resume and out.exists() else []
    if not resume:
        out.write_text("")
    return out, rows


def rate(result) -> str:
    """An `EvalResult`'s success rate with its 95% interval, e.g. ``0.55 [0.34, 0.74]``."""
    lo, hi = result.success_ci95
    return f"{result.success_rate:.2f} [{lo:.2f}, {hi:.2f}]"


def by_level(result) -> str:
    """Greedy success per difficulty level, e.g. ``0.55 / 0.30 / 0 / 0``."""
    wins = defaultdict(list)
    for t in result.trajectories:
        wins[t.difficulty].append(t.success)
    return " / ".join(f"{sum(w) / len(w):.2f}".rstrip("0").rstrip(".") for _, w in sorted(wins.items()))


# ---------------------------------------------------------------------------- where the time goes

def profile_stats(fn: Callable) -> pstats.Stats:
    """Run ``fn`` once under cProfile and return the statistics."""
    prof = cProfile.Profile()
    prof.enable()
    try:
        fn()
    finally:
        prof.disable()
    return pstats.Stats(prof, stream=io.StringIO())


def cumulative(stats: pstats.Stats, path_part: str, name: str) -> float:
    """Cumulative seconds spent in function ``name`` defined in a file whose path contains ``path_part``
    (outermost calls only: cProfile does not count a recursive call twice)."""
    return sum(row[3] for (path, _, fn), row in stats.stats.items() if fn == name and path_part in path)


def cprofile_top(fn: Callable, n: int = 12) -> str:
    """Run ``fn`` once under cProfile; the ``n`` functions with the most self time, as a table."""
    stats = profile_stats(fn)
    total = sum(row[2] for row in stats.stats.values())  # total self time
    rows = []
    for (path, line, name), (_, ncalls, tottime, cumtime, _) in sorted(
            stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:n]:
        where = f"{os.path.basename(path)}:{line}" if line else path
        rows.append([f"`{name}` ({where})", ncalls, tottime, cumtime, f"{100 * tottime / max(total, 1e-12):.0f}%"])
    return table(["function", "calls", "self s", "cumulative s", "share of self time"], rows)


def torch_profile_top(fn: Callable, n: int = 10) -> str:
    """Run ``fn`` once under the torch profiler; the ``n`` ops with the most self CPU time."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    text = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=n, max_name_column_width=40)
    return "```\n" + text.strip() + "\n```"


def breakdown(fn: Callable, label: str, torch_fn: Callable | None = None, torch_label: str | None = None) -> str:
    """Markdown: where one run of ``fn`` spends its time (Python functions, then torch ops).

    ``torch_fn`` (with its ``torch_label``), if given, is what the torch profiler runs instead: a
    shorter run of the same work, since the profiler keeps every op's event in memory (a 20-turn
    SmolLM2 rollout grew it to ~20 GB)."""
    torch_part = torch_profile_top(torch_fn or fn)
    where = f" in one {torch_label}" if torch_fn is not None and torch_label else ""
    return (f"Where the time goes in one {label} (cProfile, by self time):\n\n{cprofile_top(fn)}\n\n"
            f"Torch ops{where} (torch.profiler, by self CPU time):\n\n{torch_part}\n")
