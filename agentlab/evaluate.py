"""Evaluation of a policy: every rate with its sample size and a 95% interval (S31).

A success rate of 0.62 means little until you know it came from 40 episodes (95% Wilson
interval 0.47-0.76) and whether those were 40 different tasks or 4 tasks seen 10 times. So
every number here is a `Rate` (successes, n, interval), and each function answers one
question about a policy:

    evaluate            how often does it succeed, greedily, on held-out tasks?
    pass_at_k           with k samples and a perfect checker, how often is one right?
    first_try_success   how often is the *first* sampled attempt right, next to pass@k?
    best_of_n           how much does picking one of N samples with a verifier buy,
                        compared with greedy decoding (train/inference mismatch, S21)?
    robustness          does it still work when the task is asked in other words, or the
                        database's tables are renamed?
    thinking_budget     does it do better when allowed more tokens per turn (S27)?
    reflect             does one retry, told why the first attempt failed, fix it (S26)?
    run_expert          the scripted expert's score: the ceiling of the env itself (and,
                        with ``biased=True``, the score of the habit the warm-up's careless
                        demonstrations teach)

The sampling functions run the policy (`run_episodes`, `evaluate_tasks`; the training loop uses
them too) and the scoring helpers below them (`pass_at_k_rates`, `best_of_n_pick`, ...) only
count, so they can be checked by hand on made-up trajectories.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import traceback
from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Callable, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from agentlab.envs import env_class, full_id, make
from agentlab.envs.base import echo
from agentlab.metrics import episode_metrics, wilson_interval
from agentlab.metrics import pass_at_k as unbiased_pass_at_k
from agentlab.rollout import SamplingSettings, Trajectory, make_envs, play, rollout
from agentlab.tasks import Task, load_tasks

Verifier = Callable[[Trajectory], float]  # a score per trajectory; the highest is picked


# ---------------------------------------------------------------------------- results

@dataclass
class Rate:
    """``successes`` out of ``n`` with a 95% Wilson interval.

    ``successes`` may be fractional when it is a sum of per-task estimates (pass@k): each
    estimate lies in [0, 1], so its variance is at most that of a coin with the same mean and
    the interval over ``n`` tasks errs on the wide side.
    """

    successes: float
    n: int

    @property
    def rate(self) -> float:
        return self.successes / self.n if self.n else math.nan

    @property
    def ci95(self) -> tuple[float, float]:
        return wilson_interval(min(self.successes, self.n), self.n)

    def to_dict(self) -> dict:
        return {"rate": self.rate, "n": self.n, "ci95": list(self.ci95)}

    def __str__(self) -> str:
        lo, hi = self.ci95
        return f"{self.rate:.3f} [{lo:.3f}, {hi:.3f}] (n={self.n})"


@dataclass
class EvalResult:
    """What `evaluate` measured. Rates are over episodes; ``step_rates`` over the steps that
    carried each check (``step_counts``), ``invalid_rate`` over all ``actions``."""

    env: str
    split: str
    episodes: int
    success_rate: float
    success_ci95: tuple[float, float]
    mean_return: float
    mean_turns: float
    invalid_rate: float
    step_rates: dict[str, float]
    tasks: int = 0  # distinct tasks behind the episodes
    step_counts: dict[str, int] = field(default_factory=dict)
    actions: int = 0
    greedy: bool = True
    trajectories: list[Trajectory] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict:
        """Everything but the trajectories, JSON-ready (the `agentlab eval --json` contract)."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "trajectories"}
        d["success_ci95"] = list(self.success_ci95)
        return d


@dataclass
class Comparison:
    """Several rates measured on the same tasks (e.g. first try vs best-of-N)."""

    env: str
    split: str
    tasks: int
    samples_per_task: int
    rates: dict[str, Rate]
    notes: dict = field(default_factory=dict)
    trajectories: list[Trajectory] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict:
        return {"env": self.env, "split": self.split, "tasks": self.tasks, "samples_per_task": self.samples_per_task,
                "rates": {name: r.to_dict() for name, r in self.rates.items()}, "notes": dict(self.notes)}

    def __str__(self) -> str:
        width = max(len(name) for name in self.rates)
        head = f"{self.env} ({self.split}, {self.tasks} tasks x {self.samples_per_task} samples)"
        return "\n".join([head] + [f"  {name:<{width}}  {rate}" for name, rate in self.rates.items()])


SPREAD_DOC = "docs/reproducibility.md"  # where each notebook's training asserts have their measured spread


@contextlib.contextmanager
def training_claims(where: str, **measured):
    """Asserts on a training run's outcome, checked inside this block: when one fails, its message says
    what was expected (the assert's own line), what this run measured (``measured``: numbers, or pandas
    rows and tables) and where the spread of these outcomes over seeds and machines is recorded.

    A run's numbers move with the seed and with the CPU (its vector instructions change the order of
    float sums, and one sampled token that flips sends the run elsewhere), so a learner whose assert
    fails must be able to tell a run outside the recorded spread from a bug:

        with training_claims("04 §7", grpo=grpo_after, ppo=ppo95):
            assert ppo95["step/optimal_move"] > grpo_after["step/optimal_move"] + 0.01
    """
    try:
        yield
    except AssertionError as err:
        frame = traceback.extract_tb(err.__traceback__)[-1]
        claim = (frame.line or "").strip() or "the assert above"
        got = "; ".join(f"{name} = {_show(value)}" for name, value in measured.items())
        raise AssertionError(
            f"{where}: expected `{claim}` to hold{f' ({err})' if str(err) else ''}. This run measured: {got}. "
            f"Training outcomes vary with the machine (CPU, thread count) and the seed; {SPREAD_DOC} gives the "
            f"spread measured for {where}'s asserts and how to rerun on another seed (AGENTLAB_SEED=1). A number "
            "far outside that spread points at a change in the code rather than at the machine.") from None


def rose(after: float, before: float, by: float) -> bool:
    """Whether a rate went from ``before`` to ``after`` by at least ``by``, to 9 decimals. Success rates are
    counts over a number of tasks, and in floating point one task more than 16 of 40 falls short:
    0.4 + 0.025 is 0.42500000000000004, above 17/40.

        assert rose(after["success_rate"], before["success_rate"], by=0.025)  # one held-out task of 40, or more
        assert rose(before["repeat_rate"], after["repeat_rate"], by=0.5)  # a fall: the arguments swap
    """
    return round(after - before, 9) >= by


def _show(value) -> str:
    """A measured value, short: floats to 3 decimals, in lists and dicts too; pandas rows and tables as dicts."""
    if hasattr(value, "round") and hasattr(value, "to_dict"):  # a pandas Series or DataFrame
        value = value.round(3).to_dict()
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_show(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    if isinstance(value, (float, np.floating)):
        return f"{float(value):.3f}"
    return str(value)


def summarise(env_id: str, split: str, trajs: Sequence[Trajectory], greedy: bool = True) -> EvalResult:
    """Count successes, returns, turns, invalid actions and step checks over episodes.

    With greedy decoding, two episodes of the same task are copies, not new evidence: the
    interval is then computed over distinct tasks, not episodes.
    """
    n = len(trajs)
    wins = sum(t.success for t in trajs)
    tasks = len({t.task_id for t in trajs})
    ci_n = min(tasks, n) if greedy else n
    steps = [info for t in trajs for info in t.infos]
    checks = [info.get("checks") or {} for info in steps]
    m = episode_metrics(trajs)
    return EvalResult(
        env=full_id(env_id), split=split, episodes=n,
        success_rate=m["success_rate"],
        success_ci95=wilson_interval(wins * ci_n / n, ci_n) if n else (0.0, 1.0),
        mean_return=m["mean_return"],
        mean_turns=m["mean_turns"],
        invalid_rate=m["invalid_rate"],
        step_rates={k.removeprefix("step/"): v for k, v in m.items() if k.startswith("step/")},
        tasks=tasks,
        step_counts=dict(sorted(Counter(k for c in checks for k, v in c.items() if v is not None).items())),
        actions=len(steps),
        greedy=greedy,
        trajectories=list(trajs),
    )


# ---------------------------------------------------------------------------- running a policy

def split_tasks(env_id: str, split: str = "eval") -> list[Task]:
    """The tasks of one split of an env's task file."""
    return load_tasks(env_class(env_id).task_file(), split)


def sampling(greedy: bool = True, temperature: float = 1.0, max_new_tokens: int | None = None,
             env_id: str | None = None) -> SamplingSettings:
    """Sampling settings; ``max_new_tokens`` defaults to the active profile's per-turn budget
    (on ``env_id`` when given: `Profile.turn_tokens`)."""
    if max_new_tokens is None:
        from agentlab.profiles import profile

        prof = profile()
        max_new_tokens = prof.turn_tokens(env_id) if env_id else prof.max_new_tokens
    return SamplingSettings(temperature=temperature, top_p=1.0, max_new_tokens=max_new_tokens, greedy=greedy)


def run_episodes(policy, env_id: str, tasks: Sequence[Task], settings: SamplingSettings, env_kwargs: dict | None = None,
         batch_size: int = 64, seed: int | None = 0, prefixes: Sequence[str] | None = None,
         generator: torch.Generator | None = None, progress: bool = False,
         keys: Sequence[int] | None = None) -> list[Trajectory]:
    """One episode per task, ``batch_size`` envs at a time; trajectories in task order.

    ``seed``: task i's env is reset with ``seed + i`` and sampling draws from a generator
    seeded with ``seed``. ``seed=None`` leaves the envs' own generators alone and samples from
    ``generator`` (the training loop's, so that one update's draws follow each other).
    ``prefixes``: a note per task that its first observation starts with (reflection).
    ``keys``: one sampling stream per task instead of a generator (`agentlab.rollout.rollout`).
    ``progress``: a bar on stderr with the episodes done and their successes so far.
    """
    envs = make_envs(env_id, min(batch_size, len(tasks)), **(env_kwargs or {}))
    if generator is None and seed is not None and keys is None:
        generator = torch.Generator(device=policy.device).manual_seed(seed)
    out: list[Trajectory] = []
    bar = tqdm(total=len(tasks), desc=f"episodes {env_id.split('/')[-1]}", disable=not progress, dynamic_ncols=True)
    wins = []

    def ended(traj: Trajectory) -> None:  # per episode, not per batch: one batch may hold every task
        wins.append(traj.success)
        bar.update()
        bar.set_postfix_str(f"success {sum(wins)}/{len(wins)}")

    try:
        for start in range(0, len(tasks), batch_size):
            chunk = list(tasks[start:start + batch_size])
            batch = envs[:len(chunk)]
            if prefixes is not None:
                batch = [_WithPrefix(e, p) for e, p in zip(batch, prefixes[start:start + batch_size])]
            seeds = None if seed is None else [seed + start + i for i in range(len(chunk))]
            out += rollout(batch, policy, settings, tasks=chunk, seeds=seeds, generator=generator,
                           on_end=ended if progress else None,
                           keys=None if keys is None else keys[start:start + batch_size])
    finally:
        bar.close()
        for env in envs:
            env.close()
    return out


class _WithPrefix:
    """An env whose first observation starts with a note of its own.

    `rollout`'s ``prompt_prefix`` is one string for the whole batch; reflection needs a
    different note per task, so each env carries its own here.
    """

    spec = None

    def __init__(self, env, prefix: str):
        self.env, self.prefix = env, prefix

    @property
    def unwrapped(self):
        return getattr(self.env, "unwrapped", self.env)

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return self.prefix + obs, info

    def step(self, action):
        return self.env.step(action)


def _sample_groups(policy, env_id: str, n: int, split: str, num_tasks: int | None, temperature: float,
                   max_new_tokens: int | None, env_kwargs: dict | None, batch_size: int,
                   seed: int) -> tuple[list[Task], list[list[Trajectory]]]:
    """``n`` sampled episodes of each task, as one group (list) per task."""
    if n < 1:
        raise ValueError(f"need at least one sample per task, got n={n}")
    tasks = split_tasks(env_id, split)[:num_tasks]
    repeated = [task for task in tasks for _ in range(n)]  # contiguous groups, as in GRPO
    settings = sampling(False, temperature, max_new_tokens, env_id)
    trajs = run_episodes(policy, env_id, repeated, settings, env_kwargs, batch_size, seed)
    return tasks, [trajs[i * n:(i + 1) * n] for i in range(len(tasks))]


# ---------------------------------------------------------------------------- the questions

def evaluate(policy, env_id: str, split: str = "eval", episodes: int | None = None, greedy: bool = True,
             temperature: float = 1.0, max_new_tokens: int | None = None, env_kwargs: dict | None = None,
             batch_size: int = 64, seed: int = 0, tasks: Sequence[Task] | None = None,
             progress: bool = False) -> EvalResult:
    """Success of ``policy`` on the tasks of ``split`` (or on ``tasks``), greedy by default.

    ``episodes`` defaults to one per task; more cycle through the tasks again, which only
    adds evidence when sampling (``greedy=False``). ``env_kwargs`` go to the env's
    constructor (e.g. ``{"renamed": True}`` for SQL). ``progress`` shows a bar of the episodes
    done and their successes (`agentlab eval` does; notebooks and tests stay quiet).
    """
    tasks = list(tasks) if tasks is not None else split_tasks(env_id, split)
    episodes = len(tasks) if episodes is None else episodes
    chosen = [tasks[i % len(tasks)] for i in range(episodes)]
    settings = sampling(greedy, temperature, max_new_tokens, env_id)
    return evaluate_tasks(policy, env_id, chosen, settings, env_kwargs, batch_size, seed, split, progress)


def evaluate_tasks(policy, env_id: str, tasks: Sequence[Task], settings: SamplingSettings,
                   env_kwargs: dict | None = None, batch_size: int = 64, seed: int | None = 0,
                   split: str = "eval", progress: bool = False) -> EvalResult:
    """One episode per task with exactly these sampling ``settings``, summarised (`run_episodes`, `summarise`).

    `evaluate` picks the tasks and settings from a split and the profile; the training loop
    passes its own held-out tasks and settings here.
    """
    trajs = run_episodes(policy, env_id, tasks, settings, env_kwargs, batch_size, seed, progress=progress)
    return summarise(env_id, split, trajs, greedy=settings.greedy)


def pass_at_k(policy, env_id: str, n: int, ks: Sequence[int] | None = None, split: str = "eval",
              num_tasks: int | None = None, temperature: float = 1.0, max_new_tokens: int | None = None,
              env_kwargs: dict | None = None, batch_size: int = 64, seed: int = 0) -> Comparison:
    """pass@k for each k in ``ks`` (default 1, 2, 4, ... up to n) from ``n`` samples per task.

    Uses the unbiased estimator 1 - C(n-c, k) / C(n, k) per task (c correct of n), averaged
    over tasks — not "did any of the first k succeed", which is noisier.
    """
    ks = list(ks) if ks is not None else sorted({2 ** i for i in range(int(math.log2(n)) + 1)} | {n})
    tasks, groups = _sample_groups(policy, env_id, n, split, num_tasks, temperature, max_new_tokens,
                                   env_kwargs, batch_size, seed)
    return Comparison(full_id(env_id), split, len(tasks), n, pass_at_k_rates(groups, ks),
                      notes={"temperature": temperature}, trajectories=[t for g in groups for t in g])


def first_try_success(policy, env_id: str, k: int = 8, split: str = "eval", num_tasks: int | None = None,
                      temperature: float = 1.0, max_new_tokens: int | None = None, env_kwargs: dict | None = None,
                      batch_size: int = 64, seed: int = 0) -> Comparison:
    """Success of the first sampled attempt per task, next to pass@1 and pass@k on the same samples.

    First try is what a user gets with one go; pass@k is what k goes and a perfect checker
    would give. The gap is what retries or a verifier could buy at most.
    """
    tasks, groups = _sample_groups(policy, env_id, k, split, num_tasks, temperature, max_new_tokens,
                                   env_kwargs, batch_size, seed)
    rates = {"first_try": first_try_rate(groups), **pass_at_k_rates(groups, sorted({1, k}))}
    return Comparison(full_id(env_id), split, len(tasks), k, rates, notes={"temperature": temperature},
                      trajectories=[t for g in groups for t in g])


def best_of_n(policy, env_id: str, n: int = 8, verifier: Verifier | None = None, split: str = "eval",
              num_tasks: int | None = None, temperature: float = 1.0, max_new_tokens: int | None = None,
              env_kwargs: dict | None = None, batch_size: int = 64, seed: int = 0) -> Comparison:
    """Sample ``n`` candidates per task, keep the one the verifier scores highest (S21).

    Reports, on the same tasks: greedy success (how the policy is usually deployed), the
    first sampled candidate, the best-of-N pick, and pass@N (what a perfect verifier would
    reach). The default verifier is `reward_verifier`: the env's own total reward, which
    knows the answer — an oracle-ish upper bound. A real verifier (unit tests, a reward
    model, a format check) is a function ``Trajectory -> float``.
    """
    verifier = verifier or reward_verifier
    tasks, groups = _sample_groups(policy, env_id, n, split, num_tasks, temperature, max_new_tokens,
                                   env_kwargs, batch_size, seed)
    picked = [best_of_n_pick(g, verifier) for g in groups]
    greedy = evaluate(policy, env_id, split, tasks=tasks, max_new_tokens=max_new_tokens, env_kwargs=env_kwargs,
                      batch_size=batch_size, seed=seed)
    rates = {"greedy": Rate(sum(t.success for t in greedy.trajectories), len(tasks)),
             "first_try": first_try_rate(groups),
             f"best_of_{n}": Rate(sum(t.success for t in picked), len(tasks)),
             **pass_at_k_rates(groups, [n])}
    notes = {"verifier": getattr(verifier, "__name__", repr(verifier)), "temperature": temperature}
    return Comparison(full_id(env_id), split, len(tasks), n, rates, notes=notes, trajectories=picked)


def robustness(policy, env_id: str, num_tasks: int | None = None, max_new_tokens: int | None = None,
               batch_size: int = 64, seed: int = 0) -> dict[str, EvalResult]:
    """Greedy success on the same tasks asked three ways.

    ``"eval"``: the eval tasks that have a paraphrase; ``"paraphrase"``: those tasks in other
    words; ``"renamed"`` (envs with a ``renamed`` flag, i.e. SQL): the eval tasks on a
    database whose tables and columns have other names. A policy that memorised surface
    forms drops on the last two. ``num_tasks`` keeps the first paraphrased tasks only.
    """
    para = split_tasks(env_id, "paraphrase")[:num_tasks]
    originals = {t.id: t for t in split_tasks(env_id, "eval")}
    matched = [originals[t.id.removesuffix("-para")] for t in para if t.id.removesuffix("-para") in originals]
    run = dict(max_new_tokens=max_new_tokens, batch_size=batch_size, seed=seed)
    out = {"eval": evaluate(policy, env_id, "eval", tasks=matched or None, **run),
           "paraphrase": evaluate(policy, env_id, "paraphrase", tasks=para, **run)}
    if "renamed" in inspect.signature(env_class(env_id).__init__).parameters:
        out["renamed"] = evaluate(policy, env_id, "eval", tasks=matched or None, env_kwargs={"renamed": True}, **run)
    return out


def thinking_budget(policy, env_id: str, budgets: Sequence[int] | None = None, split: str = "eval",
                    episodes: int | None = None, batch_size: int = 64, seed: int = 0) -> dict[int, EvalResult]:
    """Greedy success with each per-turn token budget (S27): the same policy, allowed to
    write more or less before its action must end. Default budgets: 1/8, 1/4, 1/2 and all
    of the profile's budget on the env. An action cut off by the budget is invalid."""
    if budgets is None:
        top = sampling(env_id=env_id).max_new_tokens
        budgets = sorted({max(1, top // 8), max(1, top // 4), max(1, top // 2), top})
    return {b: evaluate(policy, env_id, split, episodes, max_new_tokens=b, batch_size=batch_size, seed=seed)
            for b in budgets}


def reflect(policy, env_id: str, split: str = "eval", num_tasks: int | None = None, greedy: bool = True,
            temperature: float = 1.0, max_new_tokens: int | None = None, env_kwargs: dict | None = None,
            batch_size: int = 64, seed: int = 0) -> Comparison:
    """Try every task once; retry each failure once with the reason in the prompt (S26).

    The retry's first observation starts with `reflection_note`: "Previous attempt failed: <reason>". Reports first-try success and success after reflection (a task counts
    if either attempt solved it, so the count can only rise). ``trajectories`` holds the
    corrected episodes — failures turned into successes — which training can add to a batch.
    """
    tasks = split_tasks(env_id, split)[:num_tasks]
    settings = sampling(greedy, temperature, max_new_tokens, env_id)
    first = run_episodes(policy, env_id, tasks, settings, env_kwargs, batch_size, seed)
    failed = [i for i, t in enumerate(first) if not t.success]
    prefixes = [reflection_note(first[i]) for i in failed]
    retries = run_episodes(policy, env_id, [tasks[i] for i in failed], settings, env_kwargs, batch_size,
                   seed + len(tasks), prefixes=prefixes) if failed else []
    corrected = [t for t in retries if t.success]
    rates = {"first_try": Rate(len(tasks) - len(failed), len(tasks)),
             "after_reflection": Rate(len(tasks) - len(failed) + len(corrected), len(tasks))}
    notes = {"retried": len(failed), "fixed": len(corrected), "greedy": greedy}
    return Comparison(full_id(env_id), split, len(tasks), 1, rates, notes=notes, trajectories=corrected)


def run_expert(env_id: str, split: str = "eval", episodes: int | None = None,
               env_kwargs: dict | None = None, tasks: Sequence[Task] | None = None,
               biased: bool = False) -> EvalResult:
    """The env's scripted expert on the tasks of ``split`` (or on ``tasks``), scored like a policy (no model).

    ``biased=True`` plays the env's deliberately imperfect demonstrator instead (`imperfect_action`,
    the careless share of the SFT warm-up) on every turn: what a policy that copied that habit
    and nothing else would score, e.g. GuessNumber's "lowest number still possible".
    """
    tasks = list(tasks) if tasks is not None else split_tasks(env_id, split)
    episodes = len(tasks) if episodes is None else episodes
    env = make(env_id, **(env_kwargs or {}))
    trajs = []
    try:
        for i in range(episodes):
            rng = np.random.default_rng(i)
            act = (lambda e: e.imperfect_action(rng)) if biased else (lambda e: e.expert_action())
            trajs.append(play(env, act, tasks[i % len(tasks)], seed=i))
    finally:
        env.close()
    return summarise(env_id, split, trajs, greedy=True)


# ---------------------------------------------------------------------------- scoring (no model)

def reward_verifier(traj: Trajectory) -> float:
    """The env's total reward of the episode. Oracle-ish: the reward knows the answer, which a
    deployed system does not, so best-of-N with it is an upper bound for real verifiers."""
    return traj.total_reward


def pass_at_k_rates(groups: Sequence[Sequence[Trajectory]], ks: Sequence[int]) -> dict[str, Rate]:
    """``{"pass@k": Rate}``: the unbiased pass@k per task, summed over tasks (n = tasks)."""
    out = {}
    for k in ks:
        if not all(1 <= k <= len(g) for g in groups):
            raise ValueError(f"pass@{k} needs at least {k} samples per task")
        total = sum(unbiased_pass_at_k(len(g), sum(t.success for t in g), k) for g in groups)
        out[f"pass@{k}"] = Rate(total, len(groups))
    return out


def first_try_rate(groups: Sequence[Sequence[Trajectory]]) -> Rate:
    """Success of each task's first sample."""
    return Rate(sum(g[0].success for g in groups), len(groups))


def best_of_n_pick(group: Sequence[Trajectory], verifier: Verifier = reward_verifier) -> Trajectory:
    """The candidate with the highest verifier score (the earliest one on a tie)."""
    return max(group, key=verifier)  # max keeps the first of equal scores


def reflection_note(failed: Trajectory) -> str:
    """The line a retry's first observation starts with, here and in training's retries (S26)."""
    return f"Previous attempt failed: {failure_reason(failed)}\n"


def failure_reason(traj: Trajectory) -> str:
    """Why an episode failed, in one line the policy can read before its next attempt.

    The trajectory does not keep the env's final reply, so this says how the episode ended,
    the last action and the last reply the policy saw.
    """
    if traj.infos and not traj.infos[-1].get("valid", True):
        how = "your last action was invalid"
    elif traj.truncated:
        how = f"you ran out of turns after {traj.num_turns}"
    else:
        how = "your final answer was wrong"
    last_action = f" Last action: {echo(traj.actions[-1])}." if traj.actions else ""
    replies = [m["content"] for m in traj.messages[2:] if m["role"] == "user"]
    seen = f" Last reply seen: {echo(replies[-1], 160)}" if replies else ""
    return f"{how}.{last_action}{seen}"
