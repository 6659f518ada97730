"""Exercises of notebook 09 (long horizons): a step-level success rate, and a horizon schedule."""

from __future__ import annotations

import math

from agentlab.exercises import exercise, first_mismatch
from agentlab.metrics import step_level_rates
from agentlab.train import TrainConfig, max_steps_at

# ---------------------------------------------------------------------------- 09.step_level_rate


def _step(**checks) -> dict:
    """An info dict as env.step returns it, with only the fields this exercise needs."""
    return {"valid": True, "tool": None, "reward_components": {}, "checks": dict(checks)}


# Episodes of different lengths (so a mean of per-episode rates differs from the pooled rate),
# steps where the check is absent, and steps where it is present but None (did not apply).
_EPISODES = [
    [_step(search_hit=True), _step(read_after_search=True), _step()],
    [_step(search_hit=False), _step(search_hit=True), _step(read_after_search=False),
     _step(read_after_search=None), _step(read_after_search=False), _step()],
    [_step(search_hit=True), _step(read_after_search=True)],
    [_step(optimal_move=True), _step(optimal_move=False), _step(optimal_move=True)],
]
_NEVER = [[_step(search_hit=True), _step()], [_step(optimal_move=False)]]  # no read_after_search at all


def _reference_rate(episodes, check):
    return step_level_rates([s.get("checks", {}) for ep in episodes for s in ep]).get(check, math.nan)


# -- wrong answers (each is a mistake learners make; the check must name it)
def _rate_over_all_steps(episodes, check):
    steps = [s for ep in episodes for s in ep]
    passed = sum(bool(s["checks"].get(check)) for s in steps)
    return passed / len(steps) if steps else math.nan


def _rate_mean_of_episodes(episodes, check):
    per_episode = [_reference_rate([ep], check) for ep in episodes]
    per_episode = [r for r in per_episode if not math.isnan(r)]
    return sum(per_episode) / len(per_episode) if per_episode else math.nan


def _rate_none_as_failure(episodes, check):
    seen = [s["checks"][check] for ep in episodes for s in ep if check in s["checks"]]
    return sum(bool(v) for v in seen) / len(seen) if seen else math.nan


def _rate_zero_when_unseen(episodes, check):
    rate = _reference_rate(episodes, check)
    return 0.0 if math.isnan(rate) else rate


def _is(x, y) -> bool:
    if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
        return True
    try:
        return math.isclose(float(x), float(y), abs_tol=1e-9)
    except (TypeError, ValueError):
        return False


@exercise("09.step_level_rate",
          wrong=[_rate_over_all_steps, _rate_mean_of_episodes, _rate_none_as_failure, _rate_zero_when_unseen])
def check_step_level_rate(fn) -> str | None:
    """write step_level_rate(episodes, check) -> share of the steps carrying `check` (not None) that passed;
    math.nan if none did"""
    return (first_mismatch(("search_hit", "read_after_search", "optimal_move"), lambda check: fn(_EPISODES, check),
                           lambda check: _reference_rate(_EPISODES, check), _is, _explain_rate)
            or _check_never_measured(fn))


def _check_never_measured(fn) -> str | None:
    try:
        got = fn(_NEVER, "read_after_search")
    except Exception as err:  # noqa: BLE001 - say which case broke it
        return (f"when no step carried the check your function raised {type(err).__name__}: {err}; "
                "return math.nan: nothing was measured")
    if not (isinstance(got, float) and math.isnan(got)):
        return (f"when no step carried the check nothing was measured, so return math.nan; you returned {got!r} "
                "(a 0 would read as 'always failed')")
    return None


def _explain_rate(check, got, want) -> str:
    if _is(got, _rate_over_all_steps(_EPISODES, check)):
        return (f"for {check!r} you divided by every step ({sum(len(e) for e in _EPISODES)}); count only the "
                f"steps whose info['checks'] holds {check!r}: a step the check does not apply to is no failure")
    if _is(got, _rate_none_as_failure(_EPISODES, check)):
        return (f"for {check!r} you counted a step whose check is None as a failure; None means the check did "
                "not apply to that step: leave it out of both counts")
    if _is(got, _rate_mean_of_episodes(_EPISODES, check)):
        return (f"for {check!r} you averaged each episode's rate; pool the steps of all episodes instead "
                "(passed steps / applicable steps), so a long episode weighs by its steps")
    return f"for {check!r} the rate is {want:.4f} ({check!r} passed on that share of its steps); you returned {got!r}"


# ---------------------------------------------------------------------------- 09.horizon_schedule

# (update, updates, first, last): none lands on x.5, so any rounding to the nearest step agrees.
_SCHEDULE_CASES = [
    (0, 30, 10, 40), (10, 30, 10, 40), (29, 30, 10, 40), (0, 3, 4, 12), (1, 3, 4, 12), (2, 3, 4, 12),
    (5, 10, 4, 12), (7, 10, 4, 12), (1, 4, 4, 12), (20, 30, 10, 40), (2, 7, 20, 5), (1, 4, 6, 6),
]


def _reference_schedule(update, updates, first, last):
    """The training loop's own schedule (`agentlab.train.max_steps_at`) for a run of ``updates``."""
    return max_steps_at(TrainConfig(updates=updates, horizon=(first, last)), update)


def _schedule_over_updates(update, updates, first, last):
    return int(round(first + update / updates * (last - first)))


def _schedule_truncated(update, updates, first, last):
    return int(first + update / max(1, updates - 1) * (last - first))


def _schedule_one_update_crash(update, updates, first, last):
    return int(round(first + update / (updates - 1) * (last - first)))


def _schedule_unrounded(update, updates, first, last):
    return first + update / max(1, updates - 1) * (last - first)


@exercise("09.horizon_schedule",
          wrong=[_schedule_over_updates, _schedule_truncated, _schedule_one_update_crash, _schedule_unrounded])
def check_horizon_schedule(fn) -> str | None:
    """write horizon_schedule(update, updates, first, last) -> int: max_steps rising linearly from `first`
    (update 0) to `last` (update updates-1), rounded"""
    try:
        got = fn(0, 1, 4, 12)
    except Exception as err:  # noqa: BLE001 - say which case broke it
        return (f"a run of one update (updates=1) raised {type(err).__name__}: {err}; there is no 'last update' "
                "to reach, so use first (divide by max(1, updates - 1))")
    if got != 4:
        return f"a run of one update uses first = 4; you returned {got!r}"
    return first_mismatch(_SCHEDULE_CASES, lambda case: fn(*case), lambda case: _reference_schedule(*case),
                          lambda got, want: _is_whole(got) and got == want, _explain_schedule)


def _is_whole(got) -> bool:
    return not isinstance(got, bool) and isinstance(got, (int, float)) and got == int(got)


def _explain_schedule(case, got, want) -> str:
    update, updates, first, last = case
    where = f"update {update} of {updates}, first={first}, last={last}"
    if not _is_whole(got):
        exact = _schedule_unrounded(*case)
        return (f"max_steps is a whole number of steps: at {where} return {want} (the exact value {exact:.2f}, "
                f"rounded); you returned {got!r}")
    if update == updates - 1 and got == _schedule_over_updates(*case):
        return (f"at the final update ({where}) the limit should have reached last = {last}, you returned {got}: "
                "the fraction of the run done is update / (updates - 1), not update / updates")
    if got == _schedule_truncated(*case):
        exact = _schedule_unrounded(*case)
        return f"at {where} the exact value is {exact:.2f}: round it to {want}, do not cut off the decimals"
    if got == _schedule_over_updates(*case):
        return (f"at {where} expected {want}, got {got}: the fraction of the run done is update / (updates - 1), "
                "so the final update reaches last")
    return f"at {where} the limit should be {want}; you returned {got!r}"
