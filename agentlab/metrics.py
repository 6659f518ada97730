"""Training and evaluation diagnostics, and the alarm rules read from their histories.

Each is a small function you can call on your own data.

Reward alone hides most failures: a policy can hold its reward while it collapses onto one
action, stops exploring, or learns a shortcut. These numbers show what is going on.

======================  ===================================  ===================================
metric                  what it measures                     healthy (and what bad looks like)
======================  ===================================  ===================================
success_rate            share of episodes ending in          rises; quote it with
                        ``success``                          ``wilson_interval`` (20 episodes
                                                             give about ±0.2)
mean_return             mean total reward per episode        rises; read the components too:
                                                             reward can rise as success falls
mean_turns              turns per episode                    steady, or falls as the agent gets
                                                             efficient; a drop to 1–2 turns is
                                                             the "answer at once" shortcut
action_distribution     share of each tool among actions     several tools in use; one tool at
                                                             ~100% is collapse or a shortcut
step_level_rates        share of step checks passed (e.g.    move before success does: the
                        "the read after a search opened      earliest sign, up or down
                        a useful page")
invalid_rate            share of actions that did not        falls towards 0 within a few
                        parse or were not allowed            updates
entropy                 policy entropy per action token      falls slowly; a fast fall to ~0 is
                        (nats)                               entropy collapse (the same action
                                                             again and again)
approx_kl (k3)          KL between the current policy and    PPO: under ~0.02 per update, above
                        the old one (PPO) or the reference   0.05 the steps are too big; GRPO's
                        (GRPO), per token                    KL to the reference grows slowly
clip_fraction           share of tokens whose ratio left     0.05–0.2; ~0: lr too small; above
                        [1 − ε, 1 + ε]                       0.3: too large
explained_variance      share of the returns' variance the   rises towards 1 (0.5+ is good);
                        critic explains (PPO)                ≤ 0: no better than a constant
zero_variance_fraction  share of GRPO groups with equal      10–25% early, more late as tasks
(agentlab.advantages)   rewards: they give no gradient       get solved; ~1: tasks too easy or
                                                             too hard for this policy
self_bleu               n-gram overlap between the samples   ~0.2 is diverse; climbing towards
                        of one group                         0.7 is mode collapse
grad_norm               L2 norm of all gradients, before     steady; spikes follow batches of
(algos.losses)          clipping                             mixed difficulty
pass_at_k               chance that at least one of k        ≥ success rate; the gap is what
                        samples succeeds                     best-of-N with a verifier can add
======================  ===================================  ===================================

`episode_metrics` computes the episode rows at once, with the keys `train` logs. The alarms
at the end (`entropy_collapse`, `diversity_collapse`, `shortcut`) read the histories of these
metrics and say when one of the bad patterns above has set in.

The tensor maths behind the per-token rows (`masked_mean`, `entropy_from_logp`,
`entropy_from_logits`, `kl_k3`, `approx_kl`, `clip_fraction`, `explained_variance`) lives in
`agentlab.tensors`, which the losses import; it is importable from here as well. Everything
defined here returns Python floats or dicts. Rates over nothing (no
episodes) are NaN; means over an empty mask are 0.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import torch

from agentlab.tensors import (  # noqa: F401  (listed in the table above, so importable from here too)
    approx_kl,
    clip_fraction,
    entropy_from_logits,
    entropy_from_logp,
    explained_variance,
    kl_k3,
    masked_mean,
)

if TYPE_CHECKING:  # for annotations only: metrics needs no rollout machinery
    from agentlab.rollout import Trajectory

__all__ = [
    "masked_mean",
    "success_rate",
    "mean_return",
    "mean_turns",
    "mean_components",
    "action_distribution",
    "step_level_rates",
    "invalid_rate",
    "episode_metrics",
    "entropy_from_logp",
    "entropy_from_logits",
    "kl_k3",
    "approx_kl",
    "clip_fraction",
    "explained_variance",
    "tokenize",
    "sentence_bleu",
    "self_bleu",
    "group_self_bleu",
    "wilson_interval",
    "pass_at_k",
    "entropy_collapse",
    "diversity_collapse",
    "shortcut",
    "kl_spike",
    "active_alarms",
]


# ---------------------------------------------------------------------------------------------
# Episode metrics (Python lists in, floats out)
# ---------------------------------------------------------------------------------------------
def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if len(xs) else float("nan")


def success_rate(successes: Sequence[bool]) -> float:
    """Share of episodes that succeeded. NaN for no episodes."""
    return _mean([float(bool(s)) for s in successes])


def mean_return(episode_rewards: Sequence[float | Sequence[float]]) -> float:
    """Mean undiscounted return per episode.

    Args:
        episode_rewards: one entry per episode, either its total reward or the list of its
            per-turn rewards (summed here).
    """
    return _mean([_episode_total(r) for r in episode_rewards])


def _episode_total(r) -> float:
    if isinstance(r, torch.Tensor):
        return float(r.sum())
    if isinstance(r, Iterable):
        return float(sum(r))
    return float(r)


def mean_turns(turns: Sequence[int]) -> float:
    """Mean number of turns per episode (pass ``len(traj.rewards)`` or similar per episode)."""
    return _mean([float(t) for t in turns])


def mean_components(components: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Mean of each reward component over episodes (or steps); a missing component counts 0.

    Args:
        components: e.g. ``[{"correct": 1.0, "format": -0.1}, {"correct": 0.0}]``.

    Returns:
        ``{"correct": 0.5, "format": -0.05}``.
    """
    names = sorted({name for c in components for name in c})
    return {name: _mean([float(c.get(name, 0.0)) for c in components]) for name in names}


def action_distribution(tools: Sequence[str | None]) -> dict[str, float]:
    """Share of each tool among actions, most used first; ``None`` (no valid tool) is ``"none"``.

    Example: ``["guess", "guess", None, "search"]`` → ``{"guess": 0.5, "none": 0.25, "search": 0.25}``.
    """
    counts = Counter("none" if t is None else t for t in tools)
    n = sum(counts.values())
    return {tool: c / n for tool, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))}


def step_level_rates(checks: Sequence[Mapping[str, bool | None]]) -> dict[str, float]:
    """Pass rate of each step-level check, over the steps where it applied.

    Args:
        checks: one dict per step, check name → passed (True/False), or None / absent when
            the check did not apply to that step (e.g. "read after search" on a guess).

    Returns:
        check name → share of applicable steps that passed.
    """
    passed: Counter[str] = Counter()
    seen: Counter[str] = Counter()
    for step in checks:
        for name, ok in step.items():
            if ok is None:
                continue
            seen[name] += 1
            passed[name] += bool(ok)
    return {name: passed[name] / seen[name] for name in sorted(seen)}


def invalid_rate(valid: Sequence[bool]) -> float:
    """Share of actions that were invalid (``info["valid"]`` False). NaN for no actions."""
    return _mean([float(not v) for v in valid])


# ---------------------------------------------------------------------------------------------
# Diversity: BLEU and Self-BLEU (Papineni et al., 2002; Zhu et al., 2018)
# ---------------------------------------------------------------------------------------------
_TOKEN = re.compile(r"\w+|[^\w\s]")


def tokenize(text: str) -> list[str]:
    """Split on whitespace and punctuation, keeping each punctuation mark as a token.

    ``"guess(8) now!"`` → ``["guess", "(", "8", ")", "now", "!"]``.
    """
    return _TOKEN.findall(text)


def _ngrams(tokens: Sequence[str], n: int) -> Counter:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def sentence_bleu(hypothesis: str, references: Sequence[str], max_n: int = 4) -> float:
    """BLEU of one text against one or more reference texts, in [0, 1].

        p_n  = Σ_g min(count_hyp(g), max_ref count_ref(g)) / Σ_g count_hyp(g)   (clipped precision)
        BLEU = BP · exp( (1/N) Σ_n log p_n )                                     (geometric mean)
        BP   = 1 if c > r else exp(1 − r / c)                                    (brevity penalty)

    with c the hypothesis length and r the reference length closest to c (the shorter on a
    tie). Smoothing (Lin & Och, 2004): for n ≥ 2 add 1 to the numerator and denominator, so a
    short text is not scored 0 just because it has no matching 4-gram. Unigrams are not
    smoothed, so texts with no word in common score 0. Identical texts score 1.

    Args:
        hypothesis: the text to score.
        references: texts to compare against.
        max_n: longest n-gram N.
    """
    hyp = tokenize(hypothesis)
    refs = [tokenize(r) for r in references]
    if not hyp or not refs:
        return 0.0
    log_precisions = []
    for n in range(1, max_n + 1):
        hyp_counts = _ngrams(hyp, n)
        max_ref_counts: Counter = Counter()
        for ref in refs:
            max_ref_counts |= _ngrams(ref, n)  # | keeps the max count of each n-gram
        matches = sum(min(c, max_ref_counts[g]) for g, c in hyp_counts.items())
        total = sum(hyp_counts.values())
        if n > 1:
            matches, total = matches + 1, total + 1
        if matches == 0:
            return 0.0
        log_precisions.append(math.log(matches / total))
    c = len(hyp)
    r = min((len(ref) for ref in refs), key=lambda length: (abs(length - c), length))
    brevity_penalty = 1.0 if c > r else math.exp(1.0 - r / c)
    return brevity_penalty * math.exp(sum(log_precisions) / max_n)


def self_bleu(texts: Sequence[str], max_n: int = 4) -> float:
    """Self-BLEU: each text's BLEU against all the others as references, averaged.

    High means the texts repeat each other (1 for identical texts); a group of samples whose
    Self-BLEU climbs from ~0.2 towards 0.7 during training is collapsing onto one answer.
    NaN for fewer than two texts.
    """
    if len(texts) < 2:
        return float("nan")
    scores = [sentence_bleu(t, [*texts[:i], *texts[i + 1 :]], max_n) for i, t in enumerate(texts)]
    return sum(scores) / len(scores)


def group_self_bleu(texts: Sequence[str], group_size: int, max_n: int = 4) -> float:
    """Mean Self-BLEU within each contiguous group of ``group_size`` texts (samples of one task)."""
    if group_size < 2 or len(texts) % group_size != 0:
        raise ValueError(
            f"need groups of >= 2 texts and len(texts) a multiple of group_size, "
            f"got {len(texts)} texts and group_size {group_size}"
        )
    scores = [self_bleu(texts[i : i + group_size], max_n) for i in range(0, len(texts), group_size)]
    return _mean(scores)


# ---------------------------------------------------------------------------------------------
# The episode metrics of a batch of trajectories
# ---------------------------------------------------------------------------------------------
def episode_metrics(trajs: Sequence[Trajectory], group_size: int | None = None) -> dict[str, float]:
    """Every metric that comes from the episodes themselves, with the keys `train` logs.

    ``success_rate``, ``mean_return``, ``mean_turns``, ``invalid_rate`` (over all actions),
    ``self_bleu`` (within contiguous groups of ``group_size``; only when it is given), then
    ``reward/<component>`` (mean episode total), ``action/<tool>`` (share of actions) and
    ``step/<check>`` (pass rate over the steps that carried the check).
    """
    infos = [info for t in trajs for info in t.infos]
    out = {
        "success_rate": success_rate([t.success for t in trajs]),
        "mean_return": mean_return([t.rewards for t in trajs]),
        "mean_turns": mean_turns([t.num_turns for t in trajs]),
        # Every env's step info holds "valid"; only hand-built trajectories may lack it, and an
        # action nothing marked invalid counts as valid, as in evaluate.failure_reason.
        "invalid_rate": invalid_rate([info.get("valid", True) for info in infos]),
    }
    if group_size is not None:
        out["self_bleu"] = group_self_bleu(["\n".join(t.actions) for t in trajs], group_size)
    out.update({f"reward/{k}": v for k, v in mean_components([t.component_totals() for t in trajs]).items()})
    out.update({f"action/{k}": v for k, v in action_distribution([i.get("tool") for i in infos]).items()})
    out.update({f"step/{k}": v for k, v in step_level_rates([i.get("checks") or {} for i in infos]).items()})
    return out


# ---------------------------------------------------------------------------------------------
# Evaluation statistics
# ---------------------------------------------------------------------------------------------
def wilson_interval(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a rate of ``k`` successes in ``n`` trials (z=1.96: 95%).

    Better than ``p ± z·sqrt(p(1−p)/n)`` for small n and rates near 0 or 1: it never leaves
    [0, 1] and is not empty at k = 0. ``n = 0`` gives ``(0.0, 1.0)``: nothing is known.
    """
    if n < 0 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return 0.0, 1.0
    p = k / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    lo = 0.0 if k == 0 else max(0.0, centre - half)  # exact at the ends, where rounding
    hi = 1.0 if k == n else min(1.0, centre + half)  # would otherwise leave 1e-16 gaps
    return lo, hi


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al., 2021): chance that k of the n samples, drawn without
    replacement, include at least one of the c correct ones.

        pass@k = 1 − C(n − c, k) / C(n, k) = 1 − Π_{i = n−c+1}^{n} (1 − k / i)

    The product avoids huge binomials. ``k = 1`` gives ``c / n``.
    """
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:  # every draw of k must hit a correct sample
        return 1.0
    prob_all_wrong = 1.0
    for i in range(n - c + 1, n + 1):
        prob_all_wrong *= 1.0 - k / i
    return 1.0 - prob_all_wrong


# ---------------------------------------------------------------------------------------------
# Alarms: rules over metric histories (lists of floats, NaN = not logged)
# ---------------------------------------------------------------------------------------------
def _finite(xs: Sequence[float]) -> list[float]:
    return [float(x) for x in xs if x is not None and math.isfinite(float(x))]


def entropy_collapse(entropy: Sequence[float], window: int = 3, ratio: float = 0.25,
                     floor: float = 0.05) -> bool:
    """Entropy collapse: the mean of the last ``window`` entropies is below ``floor`` nats, or
    below ``ratio`` × the mean of the first ``window`` (the policy repeats itself)."""
    xs = _finite(entropy)
    if len(xs) < window:
        return False
    recent = sum(xs[-window:]) / window
    if recent < floor:
        return True
    if len(xs) < 2 * window:
        return False
    early = sum(xs[:window]) / window
    return early > 0 and recent < ratio * early


def diversity_collapse(self_bleu: Sequence[float], window: int = 3, threshold: float = 0.7) -> bool:
    """Diversity collapse: Self-BLEU within groups averaged over the last ``window`` updates
    reached ``threshold`` (~0.2 is diverse; 0.7 means the samples repeat one answer)."""
    xs = _finite(self_bleu)
    return len(xs) >= window and sum(xs[-window:]) / window >= threshold


def shortcut(turns: Sequence[float], success: Sequence[float], window: int = 5, lookback: int = 20,
             shrink: float = 0.25, flat: float = 0.05) -> bool:
    """The shortcut pattern: episodes got shorter by ``shrink`` (25%) while success did not rise
    by more than ``flat``. Compares the first and last ``window`` of the last ``lookback``
    updates — an agent that got efficient also gets more successful; one that learned to stop
    early (answer at once, give up) does not."""
    pairs = [(float(t), float(s)) for t, s in zip(turns, success)
             if t is not None and s is not None and math.isfinite(float(t)) and math.isfinite(float(s))]
    pairs = pairs[-lookback:]
    if len(pairs) < 2 * window:
        return False
    t0 = sum(t for t, _ in pairs[:window]) / window
    t1 = sum(t for t, _ in pairs[-window:]) / window
    s0 = sum(s for _, s in pairs[:window]) / window
    s1 = sum(s for _, s in pairs[-window:]) / window
    return t0 > 0 and t1 <= (1 - shrink) * t0 and s1 - s0 <= flat


def kl_spike(approx_kl: Sequence[float], threshold: float = 0.1) -> bool:
    """A too-large step: some update's ``approx_kl`` (new policy against the one that sampled the
    batch) went above ``threshold``, five times the ~0.02 a healthy PPO update stays under. Stays
    lit after the spike, because the damage (often a jump in invalid actions) shows in later updates."""
    return any(x > threshold for x in _finite(approx_kl))


def active_alarms(history: Mapping[str, Sequence[float]]) -> list[str]:
    """Names of the alarms that fire on a metric history (keys as logged by `train`)."""
    out = []
    if entropy_collapse(history.get("entropy", [])):
        out.append("entropy_collapse")
    if diversity_collapse(history.get("self_bleu", [])):
        out.append("diversity_collapse")
    if shortcut(history.get("mean_turns", []), history.get("success_rate", [])):
        out.append("shortcut")
    if kl_spike(history.get("approx_kl", [])):
        out.append("kl_spike")
    return out
