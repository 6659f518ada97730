"""Headless tests of the widgets: build each one, move its controls from Python, and check
that what it displays changed to the right values (no browser; see tests/browser for one)."""

import math

import pytest
import torch

from agentlab.advantages import gae, group_advantages
from agentlab.rollout import ACTION, OBSERVATION, PROMPT, Trajectory
from agentlab.tasks import Task
from agentlab.widgets import (
    AdvantageExplorer,
    EnvPlayground,
    TrainingDashboard,
    TrajectoryViewer,
    reward_breakdown,
    token_html,
)


def make_traj(rewards, success=False, env_id="agentlab/GuessNumber-v0", task_id="t0", truncated=False, group=-1):
    """A synthetic episode: 3 prompt tokens, then per turn 2 action tokens and 2 observation tokens."""
    ids, roles, turn_index, logprobs = [1, 2, 3], [PROMPT] * 3, [-1] * 3, [0.0] * 3
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]
    components, infos = [], []
    for t, r in enumerate(rewards):
        ids += [10 + t, 99]
        roles += [ACTION, ACTION]
        turn_index += [t, t]
        logprobs += [-0.1 * (t + 1), -2.0]
        messages += [{"role": "assistant", "content": f"guess({t})"}, {"role": "user", "content": f"reply {t}"}]
        ids += [50, 51]
        roles += [OBSERVATION, OBSERVATION]
        turn_index += [-1, -1]
        logprobs += [0.0, 0.0]
        components.append({"correct": 1.0, "consistent": r - 1.0} if r >= 1 else {"consistent": r} if r > 0
                          else {"format": r})
        infos.append({"valid": r >= 0, "tool": "guess" if r >= 0 else None, "checks": {"consistent_guess": r > 0}})
    return Trajectory(env_id=env_id, task_id=task_id, messages=messages, token_ids=ids, roles=roles,
                      turn_index=turn_index, logprobs=logprobs, actions=[f"guess({t})" for t in range(len(rewards))],
                      rewards=list(rewards), components=components, infos=infos,
                      terminated=not truncated, truncated=truncated, success=success, group=group)


@pytest.fixture
def trajs():
    return [
        make_traj([0.1, 0.1, 1.1], success=True, task_id="guess-a", group=0),
        make_traj([0.1, -0.1, 0.0, 0.1], task_id="guess-a", group=0, truncated=True),
        make_traj([1.1], success=True, task_id="guess-b", group=1),
        make_traj([-0.1, 0.1], env_id="agentlab/Maze-v0", task_id="maze-c", group=1),
    ]


def turn_gae(rewards, values, gamma, lam, last_value=None):
    r = torch.tensor([rewards], dtype=torch.float64)
    v = torch.tensor([values], dtype=torch.float64)
    last = None if last_value is None else torch.tensor([last_value], dtype=torch.float64)
    adv, ret = gae(r, v, torch.ones_like(r), gamma, lam, last)
    return adv[0].tolist(), ret[0].tolist()


# ---------------------------------------------------------------------------- token view and chart

def test_token_html_colours_roles_and_hover_details():
    traj = make_traj([0.1, 1.1], success=True)
    page = token_html(traj, overlay="role")
    assert page.count('class="al-tok ') == len(traj.token_ids)
    assert page.count("al-role-action") == 4 and page.count("al-role-prompt") == 3
    assert "logprob -0.100" in page and "loss mask 1" in page and "loss mask 0" in page
    adv = [0.5, -0.5]
    by_adv = token_html(traj, overlay="advantage", advantages=adv)
    assert by_adv != page and "advantage +0.500" in by_adv and "advantage -0.500" in by_adv
    assert "rgba(44,160,44" in by_adv and "rgba(214,39,40" in by_adv  # green for +, red for -
    masked = token_html(traj, overlay="mask")
    assert masked.count("#9fd59f") == sum(traj.loss_mask)
    with pytest.raises(ValueError):
        token_html(traj, overlay="colour")


def test_reward_breakdown_stacks_components_and_marks_totals(trajs):
    fig = reward_breakdown(trajs[0])
    ax = fig.axes[0]
    total = [line for line in ax.lines if line.get_label() == "total"][0]
    assert total.get_ydata().tolist() == pytest.approx(trajs[0].rewards)
    assert {t.get_text() for t in ax.get_legend().get_texts()} >= {"correct", "consistent"}
    per_episode = reward_breakdown(trajs).axes[0]
    total = [line for line in per_episode.lines if line.get_label() == "total"][0]
    assert total.get_ydata().tolist() == pytest.approx([t.total_reward for t in trajs])
    assert "episode" in per_episode.get_xlabel()


# ---------------------------------------------------------------------------- EnvPlayground

def test_playground_step_updates_observation_reward_and_episode():
    task = Task(id="g", type="guess", query="Find the hidden number between 1 and 16.", answer=11,
                tools=["guess"], max_steps=5, difficulty=0, data={"lo": 1, "hi": 16})
    pg = EnvPlayground("GuessNumber", task=task)
    assert "between 1 and 16" in pg.observation.value
    pg.action.value = "guess(8)"
    pg.step_button.click()
    assert "too low" in pg.observation.value
    assert "consistent" in pg.reward.value and "+0.100" in pg.reward.value
    assert "guess(8)" in pg.episode.value and pg.action.value == ""
    assert pg.chart.value  # the reward chart was drawn

    pg.action.value = "hello"  # invalid: the format penalty shows up
    pg.step_button.click()
    assert "Invalid action" in pg.observation.value
    assert "format" in pg.reward.value and "-0.100" in pg.reward.value
    assert pg.episode.value.count("<tr") == 3  # header + two turns

    pg.expert_button.click()
    assert pg.action.value == "guess(12)"  # bisects the range 9..16
    while not pg.done:
        pg.expert_button.click()
        pg.step_button.click()
    assert "correct" in pg.observation.value and "success" in pg.status.value
    assert pg.step_button.disabled
    html = pg.to_html()
    assert "guess(8)" in html and "al-reward" in html
    pg.reset_button.click()
    assert pg.steps == [] and not pg.step_button.disabled and "no step yet" in pg.reward.value


# ---------------------------------------------------------------------------- TrajectoryViewer

def test_viewer_filters_change_the_list(trajs):
    v = TrajectoryViewer(trajs)
    assert len(v.selector.options) == 4 and v.selected is trajs[0]
    v.success.value = "success"
    assert v.shown == [0, 2] and [i for _, i in v.selector.options] == [0, 2]
    assert "<b>2</b> of 4" in v.header.value
    v.success.value = "failure"
    assert v.shown == [1, 3] and v.selected is trajs[1]
    v.env.value = "agentlab/Maze-v0"
    assert v.shown == [3] and "maze-c" in v.header.value
    v.success.value, v.env.value = "all", "all"
    v.task.value = "guess-a"
    assert v.shown == [0, 1]
    v.task.value = "no such task"
    assert v.shown == [] and v.selected is None and "no trajectory matches" in v.turns.value


def test_viewer_shows_turns_by_reward_and_token_overlays(trajs):
    v = TrajectoryViewer(trajs)
    v.selector.value = 1
    assert v.turns.value.count('class="al-turn"') == 4 and "reply 2" in v.turns.value
    assert "rgba(214,39,40" in v.turns.value  # the -0.1 turn is red
    role_view = v.tokens.value
    v.overlay.value = "advantage"
    assert v.tokens.value != role_view and "colour: advantage" in v.tokens.value
    # default advantage without a critic: the return-to-go of each turn
    togo = [0.1, 0.0, 0.1, 0.1]
    assert v.token_advantages(1)[3:5] == pytest.approx([togo[0]] * 2)
    assert f"advantage {togo[2]:+.3f}" in v.tokens.value
    custom = TrajectoryViewer(trajs, advantages=[[1.0, 2.0, 3.0], [0, 0, 0, -4.0], [5.0], [6.0, 7.0]])
    custom.selector.value = 1
    custom.overlay.value = "advantage"
    assert "advantage -4.000" in custom.tokens.value
    v.show_chart.value = True
    assert v.chart.value and v.chart.layout.display is None
    assert "al-turns" in v.to_html()


# ---------------------------------------------------------------------------- AdvantageExplorer

def test_explorer_lambda_and_gamma_sliders_show_gae(trajs):
    values = [0.5, 0.4, 0.9]
    ex = AdvantageExplorer(trajs, values=values, chart=False)
    before = ex.shown_advantages
    assert before == pytest.approx(turn_gae(trajs[0].rewards, values, 0.99, 0.95)[0])
    ex.gae_lambda.value = 0.3
    expected, returns = turn_gae(trajs[0].rewards, values, 0.99, 0.3)
    assert ex.shown_advantages == pytest.approx(expected) and ex.shown_advantages != pytest.approx(before)
    for a, r in zip(expected, returns):
        assert f"{a:+.3f}" in ex.turn_table.value and f"{r:+.3f}" in ex.turn_table.value
    assert "λ = 0.30" in ex.formula.value and f"{expected[0]:+.3f}" in ex.formula.value
    ex.gamma.value = 0.5
    assert ex.shown_advantages == pytest.approx(turn_gae(trajs[0].rewards, values, 0.5, 0.3)[0])
    # the δ terms shown are the one-step TD errors
    deltas = [r + 0.5 * nv - v for r, nv, v in zip(trajs[0].rewards, values[1:] + [0.0], values)]
    assert ex.compute()["deltas"] == pytest.approx(deltas)
    # λ = 0 gives δ itself; λ = 1, γ = 1 gives return-to-go minus V
    ex.gae_lambda.value = 0.0
    assert ex.shown_advantages == pytest.approx(deltas)


def test_explorer_values_box_bootstrap_and_token_view(trajs):
    ex = AdvantageExplorer(trajs, chart=False)
    ex.index.value = 1  # truncated: one extra value in the box bootstraps it
    vals = ex.values
    assert len(vals) == trajs[1].num_turns + 1
    assert ex.shown_advantages == pytest.approx(turn_gae(trajs[1].rewards, vals[:4], 0.99, 0.95, vals[4])[0])
    assert "truncated" in ex.formula.value
    ex.values_text.value = "0, 0, 0, 0, 2.0"
    assert ex.shown_advantages == pytest.approx(turn_gae(trajs[1].rewards, [0.0] * 4, 0.99, 0.95, 2.0)[0])
    adv = ex.shown_advantages
    assert f"advantage {adv[2]:+.3f}" in ex.token_view.value  # per-token view follows the turns
    ex.method.value = "group"
    g = ex.shown_group_advantages[1]
    assert f"advantage {g:+.3f}" in ex.token_view.value


def test_explorer_group_size_and_scale(trajs):
    ex = AdvantageExplorer(trajs, chart=False)
    assert list(ex.group_size.options) == [1, 2, 4] and ex.group_size.value == 2  # from traj.group
    totals = [t.total_reward for t in trajs]
    assert ex.shown_group_advantages == pytest.approx(group_advantages(torch.tensor(totals), 2).tolist())
    ex.group_size.value = 4
    ex.scale.value = "none"
    expected = group_advantages(torch.tensor(totals, dtype=torch.float64), 4, scale="none").tolist()
    assert ex.shown_group_advantages == pytest.approx(expected)
    assert "4 groups" not in ex.group_table.value and "1 groups of 4" in ex.group_table.value
    assert f"{expected[3]:+.3f}" in ex.group_table.value
    with_chart = AdvantageExplorer(trajs[:1])
    assert with_chart.chart.value and with_chart.values == [0.0] * 3  # one episode: V = 0
    assert len(with_chart.figure().axes[0].patches) == 2 * trajs[0].num_turns


def test_explorer_shows_every_per_turn_estimator_by_hand(trajs):
    # Group 0 (two GuessNumber samples) with γ = 1 and no scaling, computed by hand. Returns to go:
    # sample 0 [1.3, 1.2, 1.1]; sample 1 [0.1, 0.0, 0.1, 0.1]. Turns t > 0 start from the reply before
    # ("reply t-1", the same text in both samples), turn 0 from the task: all shared but sample 1's last.
    ex = AdvantageExplorer(trajs, gamma=1.0, scale="none", chart=False)
    hand = {  # sample 0, then sample 1
        # the other sample's return from the same turn, when it got there
        "turn_baseline": ([1.2, 1.2, 1.0], [-1.2, -1.2, -1.0, 0.1]),
        # episode (1.3 − 0.7 = +0.6, −0.6) plus the step group's (±0.6, ±0.6, ±0.5; alone: 0)
        "gigpo": ([1.2, 1.2, 1.1], [-1.2, -1.2, -1.1, -0.6]),
        # per-index means 0.1, 0, 0.55, 0.1 subtracted from every reward, then summed to the end
        "turn_index": ([0.65, 0.65, 0.55], [-0.65, -0.65, -0.55, 0.0]),
        "group": ([0.6] * 3, [-0.6] * 4),
    }
    for index in (0, 1):
        ex.index.value = index
        per_turn = ex.compute()["per_turn"]
        for key, rows in hand.items():
            assert per_turn[key] == pytest.approx(rows[index], abs=1e-5), (key, index)
    for key in ("gigpo", "turn_baseline", "turn_index"):
        ex.method.value = key
        first = hand[key][1][0]
        assert f"advantage {first:+.3f}" in ex.token_view.value  # the tokens follow the picked estimator
        assert f"<b>{first:+.3f}</b>" in ex.estimator_table.value
    assert "reply 2" in ex.estimator_table.value and "GiGPO" in ex.to_html()  # the state GiGPO groups turn 3 by


# ---------------------------------------------------------------------------- TrainingDashboard

def test_dashboard_records_history_tolerates_missing_keys_and_lights_alarms(trajs):
    dash = TrainingDashboard(min_interval=0.0)
    assert "waiting" in dash.status.value and dash.alarms == []
    for u in range(12):
        m = {"success_rate": 0.4, "mean_turns": 5.0 if u < 5 else 2.0, "entropy": 1.0 if u < 6 else 0.05,
             "self_bleu": 0.2, "action/guess": 0.9, "loss": "n/a"}
        if u % 2:
            m["approx_kl"] = 0.01
        if u >= 6:
            m["step/consistent_guess"] = 0.5
        dash(u, m, [])
    h = dash.history
    assert h["update"] == list(range(12)) and all(len(v) == 12 for v in h.values())
    assert math.isnan(h["approx_kl"][0]) and h["approx_kl"][1] == 0.01
    assert math.isnan(h["step/consistent_guess"][0]) and "loss" not in h
    assert dash.alarms == ["entropy_collapse", "shortcut"]
    assert 'data-alarm="entropy_collapse"' in dash.alarm_view.value
    assert dash.alarm_view.value.count("al-alarm-on") == 2
    assert "consistent_guess" in dash.panels.value and "not logged" in dash.panels.value  # zero_var_frac
    assert dash.panels.value.count("<svg") == 10 and "update 11" in dash.status.value
    # metrics missing from the loop are filled in from the trajectories
    dash(12, {}, trajs)
    assert dash.history["success_rate"][-1] == pytest.approx(0.5)
    assert dash.history["mean_turns"][-1] == pytest.approx(2.5)
    assert "reward/correct" in dash.history and "action/none" in dash.history
    fig = dash.figure()
    assert len(fig.axes) == 10 and fig.axes[6].get_title().startswith("⚠")
    assert "al-dashboard" in dash.to_html()


def test_dashboard_throttles_redraws():
    dash = TrainingDashboard(min_interval=60.0)
    draws = dash.draws
    for u in range(5):
        dash.update(u, {"success_rate": 0.1 * u})
    assert dash.draws == draws + 1  # the first update draws, the rest wait
    assert "update 0" in dash.status.value
    dash.update(5, {"success_rate": 0.6}, force=True)
    assert dash.draws == draws + 2 and "update 5" in dash.status.value
    dash.update(6, {"success_rate": 0.7})
    dash.close()
    assert "update 6" in dash.status.value


def test_dashboard_shows_the_sampler_mismatch_panel_only_once_it_is_logged():
    """A run that samples from the trainer logs no sampler_clip_frac: no extra panel, the usual ten."""
    dash = TrainingDashboard(min_interval=0.0)
    title = "sampler mismatch (share of tokens)"
    for u in range(3):
        dash(u, {"success_rate": 0.1 * u, "approx_kl": 0.01})
    assert dash.panels.value.count("<svg") == 10 and title not in dash.panels.value
    assert len(dash.figure().axes) == 10
    fed = {3: (0.25, 0.02), 4: (0.5, 0.0), 5: (0.125, 0.0625)}  # update: (sampler_clip_frac, is_capped_frac)
    for u, (clip, capped) in fed.items():
        dash(u, {"success_rate": 0.5, "sampler_kl": 0.01, "sampler_clip_frac": clip, "is_capped_frac": capped})
    assert dash.panels.value.count("<svg") == 11 and title in dash.panels.value and title in dash.to_html()
    assert "sampler_clip_frac 0.125" in dash.panels.value  # the last value, beside its curve
    fig = dash.figure()
    ax = next(ax for ax in fig.axes if ax.get_title() == title)
    lines = {line.get_label(): line for line in ax.lines}
    assert set(lines) == {"sampler_clip_frac", "is_capped_frac"}
    assert list(lines["sampler_clip_frac"].get_xdata()) == list(range(6))
    ys = lines["sampler_clip_frac"].get_ydata()
    assert all(math.isnan(y) for y in ys[:3])  # updates before the sampler metrics came: gaps, not zeros
    assert list(ys[3:]) == [clip for clip, _ in fed.values()]
    assert list(lines["is_capped_frac"].get_ydata()[3:]) == [capped for _, capped in fed.values()]
