"""Failure modes that emerge from training, and the articles' cures: one recipe per phenomenon.

The reference articles' most useful lessons are failures that appear *during* RL: a reward
that climbs while success stays flat, a policy that prints whatever "the code ran" pays for,
samples that collapse onto one play. This module holds the runs that make them happen on the
tiny policy where it can show them, so that the notebooks only start them (with a live `TrainingDashboard`)
and read the diagnostics:

    runs = shortcut_runs()                 # S18, S5    notebook 03 §6: WebSearch, "search once, then finish"
    runs = credit_runs()                   # S19        notebook 04 §7: PPO's turn-level GAE vs GRPO on larger mazes
    runs = reward_hacking_runs()           # S12        notebook 08 §5: Code's analysis tasks paid for "it ran"
    runs = collapse_runs()                 # S20        notebook 10 §2: GuessNumber with a repeated guess overpaid
    cfg = runs["..."]
    result = train(cfg, load_training_policy(cfg), callbacks=[dashboard])

Each ``*_runs`` returns ``{name: TrainConfig}``, the failing run (or the baseline) first and then
the cure(s) or the alternatives, sized for the ``ci`` profile (a few minutes per recipe on two
CPU cores) and started from the same warmed policy. `held_out` measures a trained policy on tasks
that no run trains on, and the small functions below compute the numbers that give a failure
away. The spread of these numbers over three seeds is in ``bench/RESULTS.md`` ("Failure modes
that emerge from training", `python -m bench.run --only phenomena --merge`); the notebooks'
assert margins come from it.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Sequence

import numpy as np

from agentlab import metrics as M
from agentlab.algos.grpo import GRPOSettings
from agentlab.algos.ppo import PPOSettings
from agentlab.envs import make
from agentlab.envs.base import ActionError, parse_action
from agentlab.evaluate import run_episodes
from agentlab.profiles import Profile, profile
from agentlab.rewards import RewardShaping
from agentlab.rollout import SamplingSettings, Trajectory
from agentlab.tasks import Task
from agentlab.train import TrainConfig, resolve
from agentlab.warmup import WarmUp, profile_policy_source

HELD_OUT_SEED = 20_000  # task streams seeded with (HELD_OUT_SEED, i): training draws from (cfg.seed, update)


# ============================================================================ common

def held_out_tasks(env_id: str, difficulty: int, n: int, env_kwargs: dict | None = None) -> list[Task]:
    """``n`` fresh tasks at ``difficulty`` from a seed stream that no training run draws from."""
    env = make(env_id, **(env_kwargs or {}))
    return [env.generate_task(np.random.default_rng([HELD_OUT_SEED, i]), difficulty) for i in range(n)]


def held_out(policy, cfg, tasks: Sequence[Task], greedy: bool = True, seed: int = 0) -> list[Trajectory]:
    """One episode per task with the run's env settings (reward mode, constraints, weights),
    greedy by default (as deployed, S16); sampled at the run's temperature otherwise."""
    cfg = resolve(cfg)
    settings = SamplingSettings(temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens, greedy=greedy)
    env_kwargs = {"reward_mode": cfg.reward_mode, **cfg.env_kwargs}
    return run_episodes(policy, cfg.env_id, list(tasks), settings, env_kwargs, batch_size=len(tasks), seed=seed)


def signature(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """The numbers every experiment here reads: success, return per episode and per turn, turns,
    the share of each tool among the actions, invalid actions and the share of repeated actions."""
    m = M.episode_metrics(trajs)
    out = {k: m[k] for k in ("success_rate", "mean_return", "mean_turns", "invalid_rate")}
    out["return_per_turn"] = m["mean_return"] / m["mean_turns"] if m["mean_turns"] else float("nan")
    out.update({k: v for k, v in m.items() if k.startswith(("action/", "step/"))})
    out["repeat_rate"] = repeat_rate(trajs)
    return out


def repeat_rate(trajs: Sequence[Trajectory]) -> float:
    """Share of actions that repeat the action just before them, word for word (S20's loop)."""
    pairs = [(a.strip(), b.strip()) for t in trajs for a, b in zip(t.actions, t.actions[1:])]
    return sum(a == b for a, b in pairs) / len(pairs) if pairs else 0.0


def sampled_entropy(trajs: Sequence[Trajectory]) -> float:
    """Mean −log π(token) over the sampled action tokens, in nats: a Monte Carlo estimate of the
    per-token entropy the samples were drawn with.

    Unlike the update's ``entropy``, which GRPO measures only on the groups it trains on, this
    covers every episode, so it still reads when a collapsed policy leaves no group with a signal.
    """
    logps = [lp for t in trajs for lp, turn in zip(t.logprobs, t.turn_index) if turn >= 0]
    return -sum(logps) / len(logps) if logps else float("nan")


def distinct_plays(trajs: Sequence[Trajectory], group_size: int) -> float:
    """Mean number of different action sequences among the ``group_size`` samples of a task."""
    texts = ["\n".join(t.actions) for t in trajs]
    return float(np.mean([len(set(texts[i:i + group_size])) for i in range(0, len(texts), group_size)]))


# ============================================================================ S12: reward hacking

SUBMISSION_KINDS = ("real analysis", "prints without computing", "memorised number", "prints nothing",
                    "does not compile", "no submission")
_READS = {"open", "reader", "DictReader", "read_csv", "loadtxt", "genfromtxt"}  # calls that read the data
_AGGREGATES = {"sum", "max", "min", "len", "round", "mean", "median", "sorted", "count"}


def submission(traj: Trajectory) -> str | None:
    """The code an analysis episode submitted (fences stripped as the env strips them), or None."""
    if not traj.actions or not traj.infos or traj.infos[-1].get("tool") != "submit":
        return None
    try:
        code = parse_action(traj.actions[-1], ["run", "submit"]).arg.strip()
    except ActionError:
        return None
    return code.strip("`").removeprefix("python").strip() if code.startswith("```") else code


def classify_submission(code: str | None) -> str:
    """What a submitted analysis program does, read from its syntax tree (it is not run):

    * ``real analysis``: reads the data and computes from it (arithmetic or an aggregate);
    * ``prints without computing``: prints something that is not computed from the data, e.g.
      the column names (the hack of the reference article) or a fixed text;
    * ``memorised number``: prints number literals only, without reading the data;
    * ``prints nothing``, ``does not compile``, ``no submission`` (the episode ended otherwise).

    Whether the printed number is *right* is the env's verdict (``info["checks"]["exact"]``).
    """
    if code is None:
        return "no submission"
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return "does not compile"
    nodes = list(ast.walk(tree))
    called = {_call_name(n.func) for n in nodes if isinstance(n, ast.Call)}
    prints = [n for n in nodes if isinstance(n, ast.Call) and _call_name(n.func) == "print"]
    if not prints:
        return "prints nothing"
    reads = bool(called & _READS) or any(isinstance(n, ast.Constant) and n.value == "data.csv" for n in nodes)
    if not reads:
        literal_only = all(p.args and all(_is_number(a) for a in p.args) for p in prints)
        return "memorised number" if literal_only else "prints without computing"
    computes = bool(called & _AGGREGATES) or any(isinstance(n, (ast.BinOp, ast.AugAssign)) for n in nodes)
    return "real analysis" if computes else "prints without computing"


def _call_name(func: ast.expr) -> str | None:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _is_number(node: ast.expr) -> bool:
    if isinstance(node, ast.UnaryOp):
        return _is_number(node.operand)
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool)


def submissions_table(trajs: Sequence[Trajectory]) -> dict[str, dict[str, float]]:
    """For each kind of submission: its share of the episodes, and the share of those whose
    program ran and printed (what ``analysis_reward="ran"`` pays) and whose number was right."""
    rows: dict[str, list[Trajectory]] = {}
    for t in trajs:
        rows.setdefault(classify_submission(submission(t)), []).append(t)
    table = {}
    for kind in SUBMISSION_KINDS:
        group = rows.get(kind, [])
        checks = [t.infos[-1].get("checks", {}) for t in group]
        table[kind] = {"share": len(group) / len(trajs) if trajs else float("nan"),
                       "ran": M.success_rate([c.get("ran", False) for c in checks]),
                       "exact": M.success_rate([c.get("exact", False) for c in checks])}
    return table


def submission_shares(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """``{"kind/<kind>": share of the episodes}`` for every kind of `classify_submission`."""
    return {f"kind/{kind}": row["share"] for kind, row in submissions_table(trajs).items()}


def held_out_numbers(policy, cfg, tasks: Sequence[Task], samples: int = 0) -> dict[str, float]:
    """`signature` and `submission_shares` of greedy episodes on ``tasks`` and, if ``samples``, the same
    of ``samples`` sampled episodes per task under keys starting with ``sampled/`` (a drift the greedy
    policy hides shows in the samples, e.g. the reward hack of notebook 08 §5), with how alike a task's
    samples are: ``sampled/self_bleu`` (within each task's samples), ``sampled/distinct`` (different
    action sequences per task) and ``sampled/entropy`` (nats per action token, `sampled_entropy`)."""
    greedy = held_out(policy, cfg, tasks)
    found = {**signature(greedy), **submission_shares(greedy)}
    if samples:
        draws = held_out(policy, cfg, list(tasks) * samples, greedy=False, seed=1)
        found.update({f"sampled/{k}": v for k, v in {**signature(draws), **submission_shares(draws)}.items()})
        found["sampled/entropy"] = sampled_entropy(draws)
        if samples > 1:  # draws run task by task `samples` times over; put each task's samples side by side
            n = len(tasks)
            groups = [draws[k * n + j] for j in range(n) for k in range(samples)]
            found["sampled/self_bleu"] = M.group_self_bleu(["\n".join(t.actions) for t in groups], samples)
            found["sampled/distinct"] = distinct_plays(groups, samples)
    return found


# ============================================================================ the recipes

WEBSEARCH, CODE, GUESS, MAZE = "agentlab/WebSearch-v0", "agentlab/Code-v0", "agentlab/GuessNumber-v0", "agentlab/Maze-v0"
# Warm-ups made for one experiment each: the env's easiest relevant level only, so that they take a
# few minutes to build (the env plans in `agentlab.warmup.WARM_UPS` cover every level and take longer).
SHORTCUT_WARM_UP = WarmUp(levels=(0,), episodes=1000, steps=300)
# The analysis warm-up shows the header hack in 30% of its episodes (the rest: the reference program, run
# then submitted). With 150 SFT steps no sampled program compiled and neither reward had anything to pay;
# with 300 no sampled program computed anything; 600 leave both habits for RL to choose between. Steps of
# 16 episodes rather than the profile's 32 halve the build, the longest of the notebooks' warm-ups.
HACKING_WARM_UP = WarmUp(levels=(3,), episodes=400, steps=600, imperfect_share=0.3, batch=16,
                         env_kwargs=(("analysis_share", 1.0), ("careless_analysis", "field_names")))
# 40% of the demonstrations loop on their first guess, so the warmed policy repeats itself about a
# third of the time: GRPO sharpens a paid action that is already likely, and lowers entropy doing so;
# a paid action it rarely samples (the lazy warm-up's repeats) it learns by spreading out instead.
REPEAT_WARM_UP = WarmUp(levels=(0,), imperfect_share=0.4, env_kwargs=(("careless", "repeat"),))


def _base(env_id: str, policy: str, prof: Profile, seed: int, **changes) -> TrainConfig:
    """What every run here shares: GRPO on the profile's sizes, evaluated only at the start and the
    end (the notebooks measure held-out numbers themselves), one checkpoint per update."""
    return TrainConfig(env_id=env_id, algo="grpo", profile=prof.name, policy=policy, seed=seed, eval_every=10_000,
                       checkpoint_every=1, **changes)


def _named(runs: dict[str, TrainConfig], prefix: str) -> dict[str, TrainConfig]:
    safe = lambda s: "".join(c if c.isascii() and c.isalnum() else "-" for c in s).strip("-")  # noqa: E731
    return {name: dataclasses.replace(cfg, name=f"{prefix}-{safe(name)}-seed{cfg.seed}") for name, cfg in runs.items()}


def shortcut_runs(prof: Profile | None = None, seed: int = 0, updates: int = 10) -> dict[str, TrainConfig]:
    """S18 and S5 on WebSearch's easiest level with a sparse reward (outcome only):

    * ``shortcut``: no evidence constraint and a wrong answer costs only −0.05, so answering
      after one search (or none) is cheap, and some answers (a language, a currency) come from
      a set of three: a guess wins a third of the time;
    * ``require_evidence``: the same reward, with the env's constraint (finish is refused before
      a search and a read), the article's first lesson: fix it in the environment;
    * ``wrong −0.2``: no constraint, the article's larger penalty instead.
    """
    prof = prof or profile()
    start = profile_policy_source(prof, envs=[WEBSEARCH], plan=SHORTCUT_WARM_UP)
    base = _base(WEBSEARCH, start, prof, seed, difficulty=0, reward_mode="outcome", updates=updates,
                 tasks_per_update=8, group_size=8)
    return _named({
        "shortcut": dataclasses.replace(base, env_kwargs={"require_evidence": False, "weights": {"wrong": -0.05}}),
        "require_evidence": dataclasses.replace(base, env_kwargs={"require_evidence": True, "weights": {"wrong": -0.05}}),
        "wrong -0.2": dataclasses.replace(base, env_kwargs={"require_evidence": False, "weights": {"wrong": -0.2}}),
    }, "shortcut")


def reward_hacking_runs(prof: Profile | None = None, seed: int = 0, updates: int = 8) -> dict[str, TrainConfig]:
    """S12 on Code's data-analysis tasks (difficulty 3, analysis only), from a warm-up that writes
    the reference program most of the time and prints the header (the hack) otherwise:

    * ``ran``: the hackable reward, 1.0 for any submission that exits cleanly and prints something;
    * ``exact``: the cure, 1.0 only when the printed number equals the answer on a freshly seeded
      hidden table with shuffled columns.
    """
    prof = prof or profile()
    start = profile_policy_source(prof, envs=[CODE], plan=HACKING_WARM_UP)
    base = _base(CODE, start, prof, seed, difficulty=3, reward_mode="outcome", updates=updates,
                 tasks_per_update=6, group_size=6)
    return _named({mode: dataclasses.replace(base, env_kwargs={"analysis_reward": mode, "analysis_share": 1.0})
                   for mode in ("ran", "exact")}, "hacking")


def credit_runs(prof: Profile | None = None, seed: int = 0, updates: int = 8, difficulty: int = 1) -> dict[str, TrainConfig]:
    """S19 on mazes larger than the warm-up's (difficulty 1: 6x6 with walls, up to 20 moves), with the
    process reward (`closer`, a sub-goal reward) and the same episodes for every run:

    * ``GRPO``: one advantage per episode, from its total reward against its group's;
    * ``PPO λ=0.95`` and ``PPO λ=0.99``: a critic and turn-level GAE, each turn its own advantage.
    """
    prof = prof or profile()
    start = profile_policy_source(prof, envs=[MAZE])
    base = _base(MAZE, start, prof, seed, difficulty=difficulty, updates=updates, tasks_per_update=8, group_size=8)
    return _named({
        "GRPO": base,
        "PPO λ=0.95": dataclasses.replace(base, algo="ppo", ppo=PPOSettings(gae_lambda=0.95)),
        "PPO λ=0.99": dataclasses.replace(base, algo="ppo", ppo=PPOSettings(gae_lambda=0.99)),
    }, "credit")


def stop_or_go_gradient(estimator, p: float, stop: float = 0.5, probe: float = 0.0, outcome: float = 1.0,
                        ) -> tuple[float, float]:
    """(expected gradient of a per-turn ``estimator``, the true gradient) in a game where the policy
    decides when the episode ends, both exact (every draw of a group of two is enumerated).

    One decision, at turn 0, with P(go) = p = sigmoid(θ): "stop" ends the episode with reward
    ``stop``; "go" pays ``probe`` and a second, forced turn pays ``outcome``. The estimate is the
    group's mean of d/dθ log π(a_0) · A[i, 0], with ``A = estimator(rewards, mask, 2, gamma=1.0,
    scale="none")``; the true gradient is p (1 − p) (probe + outcome − stop).
    """
    import itertools

    import torch

    episodes, score, prob = {"stop": [stop], "go": [probe, outcome]}, {"stop": -p, "go": 1 - p}, {"stop": 1 - p, "go": p}
    total = 0.0
    for pair in itertools.product(episodes, repeat=2):
        rewards, mask = torch.zeros(2, 2), torch.zeros(2, 2, dtype=torch.bool)
        for i, a in enumerate(pair):
            rewards[i, :len(episodes[a])] = torch.tensor(episodes[a])
            mask[i, :len(episodes[a])] = True
        adv = estimator(rewards, mask, 2, gamma=1.0, scale="none")
        total += prob[pair[0]] * prob[pair[1]] * sum(score[a] * float(adv[i, 0]) for i, a in enumerate(pair)) / 2
    return total, p * (1 - p) * (probe + outcome - stop)


STEP_CREDIT = {"maze": (MAZE, 1), "guess": (GUESS, 0)}  # env → (id, difficulty): 6x6 mazes; 16 numbers in 5 guesses


def step_credit_runs(prof: Profile | None = None, seed: int = 0, env: str = "maze", updates: int = 8
                     ) -> dict[str, TrainConfig]:
    """Per-turn credit at equal samples (the same tasks, groups and updates for every run), from the
    profile's warm-up on the env, with its process reward:

    * ``GRPO``: one advantage per episode (trajectory GRPO);
    * ``GiGPO``: plus a step-level advantage between turns taken from the same state (the env's
      `state_key`: a maze cell, a GuessNumber interval);
    * ``turn baseline``: each turn's return against the other samples' returns from that turn;
    * ``PPO λ=0.95``: a critic and turn-level GAE.
    """
    prof = prof or profile()
    env_id, difficulty = STEP_CREDIT[env]
    start = profile_policy_source(prof, envs=[env_id])
    base = _base(env_id, start, prof, seed, difficulty=difficulty, updates=updates, tasks_per_update=8, group_size=8)
    return _named({
        "GRPO": base,
        "GiGPO": dataclasses.replace(base, grpo=GRPOSettings(advantage="gigpo")),
        "turn baseline": dataclasses.replace(base, grpo=GRPOSettings(advantage="turn_baseline")),
        "PPO λ=0.95": dataclasses.replace(base, algo="ppo", ppo=PPOSettings(gae_lambda=0.95)),
    }, f"step-credit-{env}")


def collapse_runs(prof: Profile | None = None, seed: int = 0, updates: int = 12) -> dict[str, TrainConfig]:
    """S20 on GuessNumber's 1..16 games, from a warm-up that sometimes loops on one guess, with the
    article's second cause of entropy collapse: one action sequence paid far more than the rest.

    * ``repeat paid``: the same guess twice in a row earns +1.0, as much as finding the number;
    * ``entropy bonus``: the same reward, with ``ent_coef`` 0.05 (the article's upper value);
    * ``diversity penalty``: the same reward, a sample with a near-copy in its group loses 0.5;
    * ``repeat penalty``: the article's −0.05 for a repeat instead (GuessNumber's default).
    """
    prof = prof or profile()
    start = profile_policy_source(prof, envs=[GUESS], plan=REPEAT_WARM_UP)
    base = _base(GUESS, start, prof, seed, difficulty=0, updates=updates)
    paid = {"weights": {"repeat": 1.0}}
    return _named({
        "repeat paid": dataclasses.replace(base, env_kwargs=paid),
        "entropy bonus": dataclasses.replace(base, env_kwargs=paid, grpo=GRPOSettings(ent_coef=0.05)),
        "diversity penalty": dataclasses.replace(base, env_kwargs=paid, shaping=RewardShaping(diversity_penalty=0.5)),
        "repeat penalty": dataclasses.replace(base, env_kwargs={"weights": {"repeat": -0.05}}),
    }, "collapse")
