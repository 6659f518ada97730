"""Widgets that show what an agent sees, does and is rewarded for, and how training is going.

    EnvPlayground(env)            play an env by hand: observation, reward by component, episode
    TrajectoryViewer(trajs)       browse episodes turn by turn; tokens coloured by role, with
                                  logprob / advantage / loss-mask overlays and hover details
    TrainingDashboard()           pass to train(callbacks=[...]): live curves and alarms
    AdvantageExplorer(trajs)      sliders for γ, λ, group size and scaling; GAE terms shown
    reward_breakdown(x)           stacked reward components per turn or per episode (a Figure)

Every widget is an object whose ``.widget`` is the ipywidgets box (a notebook shows it when
the object is the cell's last expression) and whose controls are attributes, so a test or a
notebook cell can move them: ``explorer.gae_lambda.value = 0.5``. Where widgets do not
render (nbval, a static HTML export) use the static views: ``.to_html()`` returns the same
content as an HTML string and ``.figure()`` a matplotlib Figure.

Plots are made with ``matplotlib.figure.Figure`` directly, not pyplot, so nothing is drawn
twice and no figure is left open. The dashboard's live curves are small inline SVGs rather
than matplotlib images, which are far slower to redraw, so it can redraw after every update
without slowing training (``figure()`` gives the matplotlib version; ``bench/dashboard.py``
measures the cost).
"""

from __future__ import annotations

import html
import io
import itertools
import math
import time
import zlib
from collections.abc import Mapping, Sequence

import ipywidgets as W
import numpy as np
import torch
from matplotlib.figure import Figure

from agentlab.advantages import gae, group_advantages, spread_to_tokens
from agentlab.algos.grpo import ADVANTAGES, GRPOSettings, anchor_states, turn_advantages
from agentlab.metrics import active_alarms, episode_metrics
from agentlab.rollout import ACTION, OBSERVATION, PROMPT, ROLE_NAMES, Trajectory, load_jsonl

__all__ = [
    "EnvPlayground",
    "TrajectoryViewer",
    "TrainingDashboard",
    "AdvantageExplorer",
    "reward_breakdown",
    "token_html",
    "turns_html",
    "ALARMS",
]

ROLE_COLOURS = {PROMPT: "#e6e6e6", OBSERVATION: "#cfe2ff", ACTION: "#ffd8a8"}
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf"]
OVERLAYS = ("role", "logprob", "advantage", "mask")


# ============================================================================ small helpers

def _esc(text) -> str:
    return html.escape(str(text), quote=True)


def _fmt(x: float, digits: int = 3) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:+.{digits}f}"


def _diverging(x: float, scale: float) -> str:
    """Background colour for a signed number: green above 0, red below, white at 0."""
    if scale <= 0 or not math.isfinite(x):
        return "rgba(255,255,255,0)"
    a = min(abs(x) / scale, 1.0) * 0.6
    return f"rgba(44,160,44,{a:.2f})" if x > 0 else f"rgba(214,39,40,{a:.2f})"


def _png(fig: Figure, dpi: int = 80) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def _as_trajectories(data) -> list[Trajectory]:
    """A Trajectory, a list of them, or a path to a jsonl file of them."""
    if isinstance(data, Trajectory):
        return [data]
    if isinstance(data, (str, bytes)) or hasattr(data, "__fspath__"):
        return load_jsonl(data)
    return list(data)


# Reward components keep their colour in every chart: common names fixed, others hashed.
COMPONENT_COLOURS = {"correct": "#2ca02c", "success": "#2ca02c", "format": "#d62728", "repeat": "#ff7f0e",
                     "consistent": "#1f77b4", "step": "#7f7f7f"}


def _colour_of(name: str) -> str:
    return COMPONENT_COLOURS.get(name) or PALETTE[zlib.crc32(name.encode()) % len(PALETTE)]


def _token_texts(traj: Trajectory, tokenizer) -> list[str]:
    """The text of every token, or ``⟨id⟩`` without a tokenizer (a Policy works too)."""
    tok = getattr(tokenizer, "tokenizer", tokenizer)
    if tok is None:
        return [f"⟨{i}⟩" for i in traj.token_ids]
    return [tok.decode([i], skip_special_tokens=False) for i in traj.token_ids]


def turn_rewards_to_tokens(traj: Trajectory, per_turn: Sequence[float]) -> list[float]:
    """Give each action token the value of its turn (0 elsewhere), via `spread_to_tokens`."""
    if not traj.token_ids:
        return []
    values = torch.tensor([list(per_turn)], dtype=torch.float64)  # (1, turns)
    index = torch.tensor([traj.turn_index])  # (1, L)
    return spread_to_tokens(values, index)[0].tolist()


# ============================================================================ HTML views

def token_html(traj: Trajectory, tokenizer=None, overlay: str = "role",
               advantages: Sequence[float] | None = None, max_tokens: int = 3000) -> str:
    """Every token of an episode as a coloured ``<span>``; hover shows role, id, logprob,
    advantage and loss mask.

    ``overlay`` picks the colour: ``"role"`` (grey prompt, blue observation, orange action),
    ``"logprob"`` (red where the sampled token was unlikely), ``"advantage"`` (green above 0,
    red below) or ``"mask"`` (only loss-carrying tokens coloured). ``advantages``: one per
    token (length L) or one per turn.
    """
    if overlay not in OVERLAYS:
        raise ValueError(f"overlay must be one of {OVERLAYS}, got {overlay!r}")
    texts = _token_texts(traj, tokenizer)
    L = len(texts)
    if advantages is None:
        adv = [0.0] * L
    elif len(advantages) == L:
        adv = list(advantages)
    else:
        adv = turn_rewards_to_tokens(traj, advantages)
    mask = traj.loss_mask
    scale = max((abs(a) for a in adv), default=0.0)
    spans = []
    for i, text in enumerate(texts[:max_tokens]):
        role, lp = traj.roles[i], traj.logprobs[i] if i < len(traj.logprobs) else 0.0
        if overlay == "role":
            bg = ROLE_COLOURS.get(role, "#fff")
        elif overlay == "logprob":
            # p = 1 → white, p → 0 → red; non-action tokens were not sampled: light grey
            bg = f"rgba(214,39,40,{0.7 * (1 - math.exp(lp)):.2f})" if role == ACTION else "#f4f4f4"
        elif overlay == "advantage":
            bg = _diverging(adv[i], scale) if role == ACTION else "#f4f4f4"
        else:
            bg = "#9fd59f" if mask[i] else "#f4f4f4"
        tip = (f"{ROLE_NAMES.get(role, role)} · id {traj.token_ids[i]} · turn {traj.turn_index[i]} · "
               f"logprob {lp:.3f} (p={math.exp(lp):.2f}) · advantage {adv[i]:+.3f} · loss mask {mask[i]}")
        shown = _esc(text).replace("\n", "↵\n")
        spans.append(f'<span class="al-tok al-role-{ROLE_NAMES.get(role, role)}" '
                     f'style="background:{bg};border-right:1px solid #fff" title="{_esc(tip)}">{shown}</span>')
    more = f"<i> … {L - max_tokens} more tokens</i>" if L > max_tokens else ""
    legend = " ".join(f'<span style="background:{c};padding:0 4px">{ROLE_NAMES[r]}</span>'
                      for r, c in ROLE_COLOURS.items())
    return (f'<div class="al-tokens"><div style="font-size:11px;margin-bottom:2px">colour: {overlay} '
            f"&nbsp; roles: {legend} &nbsp; (hover a token for details)</div>"
            f'<div style="font-family:monospace;font-size:12px;white-space:pre-wrap;line-height:1.6">'
            f'{"".join(spans)}{more}</div></div>')


def _observations(traj: Trajectory) -> list[str]:
    """The env's reply to each turn (the user messages after the first), '' where absent."""
    users = [m["content"] for m in traj.messages if m.get("role") == "user"][1:]
    return [users[t] if t < len(users) else "" for t in range(traj.num_turns)]


def turns_html(traj: Trajectory) -> str:
    """One row per turn, coloured by its reward: action, reply, reward and its components."""
    scale = max((abs(r) for r in traj.rewards), default=0.0)
    obs = _observations(traj)
    rows = []
    for t, r in enumerate(traj.rewards):
        comps = traj.components[t] if t < len(traj.components) else {}
        info = traj.infos[t] if t < len(traj.infos) else {}
        parts = ", ".join(f"{k} {v:+.2f}" for k, v in comps.items() if v) or "0"
        valid = "" if info.get("valid", True) else " ✗ invalid"
        action = traj.actions[t] if t < len(traj.actions) else ""
        rows.append(
            f'<tr class="al-turn" style="background:{_diverging(r, scale)}"><td>{t}</td>'
            f"<td><code>{_esc(action)}</code>{valid}</td><td>{_esc(obs[t])}</td>"
            f"<td>{r:+.3f}</td><td>{_esc(parts)}</td></tr>")
    end = "success" if traj.success else ("terminated" if traj.terminated else
                                          "truncated" if traj.truncated else "unfinished")
    return ('<table class="al-turns" style="border-collapse:collapse;font-size:12px">'
            "<tr><th>turn</th><th>action</th><th>env reply</th><th>reward</th><th>components</th></tr>"
            f'{"".join(rows)}</table><div style="font-size:12px">return {traj.total_reward:+.3f} · {end}</div>')


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], cls: str = "", styles=None) -> str:
    head = "".join(f"<th style='padding:0 6px'>{h}</th>" for h in header)
    body = "".join(
        f"<tr style='{styles[i] if styles else ''}'>" + "".join(f"<td style='padding:0 6px'>{c}</td>" for c in row)
        + "</tr>" for i, row in enumerate(rows))
    return f'<table class="{cls}" style="border-collapse:collapse;font-size:12px"><tr>{head}</tr>{body}</table>'


# ============================================================================ reward breakdown

def reward_breakdown(data, ax=None, title: str | None = None) -> Figure:
    """Stacked reward components: per turn for one Trajectory (or a list of component
    dicts, one per turn), per episode for a list of Trajectories. Positive parts stack up,
    negative parts down; the black dot is the total."""
    if isinstance(data, Trajectory):
        comps, labels, what = data.components, [f"t{t}" for t in range(data.num_turns)], "turn"
    elif len(data) and isinstance(data[0], Trajectory):
        comps = [t.component_totals() for t in data]
        labels, what = [str(i) for i in range(len(data))], "episode"
    else:
        comps, labels, what = list(data), [f"t{t}" for t in range(len(data))], "turn"
    names = sorted({k for c in comps for k in c})
    if ax is None:
        fig = Figure(figsize=(max(3.0, 0.35 * len(comps) + 2.0), 2.6))
        ax = fig.add_subplot()
    x = np.arange(len(comps))
    up, down = np.zeros(len(comps)), np.zeros(len(comps))
    for name in names:
        v = np.array([float(c.get(name, 0.0)) for c in comps])
        pos, neg = np.clip(v, 0, None), np.clip(v, None, 0)
        colour = _colour_of(name)
        ax.bar(x, pos, bottom=up, color=colour, label=name, width=0.7)
        ax.bar(x, neg, bottom=down, color=colour, width=0.7)
        up, down = up + pos, down + neg
    ax.plot(x, up + down, "o", color="black", markersize=3, label="total")
    ax.axhline(0, color="#888", linewidth=0.6)
    ax.set_xticks(x, labels, fontsize=7)
    ax.set_xlabel(what, fontsize=8)
    ax.set_ylabel("reward", fontsize=8)
    ax.set_title(title or f"reward by component, per {what}", fontsize=9)
    if names:
        ax.legend(fontsize=7, loc="best", frameon=False)
    ax.figure.tight_layout()
    return ax.figure


class _Shown:
    """Shared plumbing: show ``self.widget`` in a notebook; ``to_html`` for static output."""

    widget: W.Widget

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    def _repr_html_(self) -> str:  # used where widgets cannot render (static exports)
        return self.to_html()

    def to_html(self) -> str:
        raise NotImplementedError


# ============================================================================ EnvPlayground

class EnvPlayground(_Shown):
    """Play an env by hand: type an action, press Step; see the reply, the reward by
    component and the episode so far. "Expert" writes the scripted expert's next action."""

    def __init__(self, env, seed: int | None = 0, task=None, **env_kwargs):
        if isinstance(env, str):
            from agentlab.envs import make

            env = make(env, **env_kwargs)
        self.env = env
        self.base = getattr(env, "unwrapped", env)
        self.task = task
        self.steps: list[dict] = []  # {"action", "obs", "reward", "components", "info"}
        self.action = W.Textarea(placeholder=f"e.g. {self.base.example_action}", rows=2,
                                 layout=W.Layout(width="60%"))
        self.step_button = W.Button(description="Step", button_style="primary")
        self.expert_button = W.Button(description="Expert", tooltip="fill in the scripted expert's next action")
        self.reset_button = W.Button(description="Reset")
        self.seed = W.IntText(value=0 if seed is None else seed, description="seed", layout=W.Layout(width="150px"))
        self.status = W.HTML()
        self.observation = W.HTML()
        self.reward = W.HTML()
        self.episode = W.HTML()
        self.chart = W.Image(format="png")
        self.step_button.on_click(lambda _: self.step())
        self.expert_button.on_click(lambda _: self._fill_expert())
        self.reset_button.on_click(lambda _: self.reset(self.seed.value))
        tools = "<br>".join(_esc(d) for d in self.base.tools.values())
        self.widget = W.VBox([
            W.HTML(f"<b>{_esc(self.base.name)}</b> — tools:<br><code>{tools}</code>"),
            W.HBox([self.action, W.VBox([self.step_button, self.expert_button])]),
            W.HBox([self.reset_button, self.seed]),
            self.status, self.observation,
            W.HBox([self.reward, self.chart]),
            self.episode,
        ])
        self.reset(seed)

    def reset(self, seed: int | None = None) -> str:
        options = {"task": self.task} if self.task is not None else None
        obs, info = self.env.reset(seed=seed, options=options)
        self.obs, self.info, self.steps = obs, info, []
        self.done = False
        self._render()
        return obs

    def step(self, action: str | None = None):
        """Send ``action`` (default: the text box) to the env; returns Gymnasium's 5-tuple."""
        action = self.action.value if action is None else action
        if self.done:
            self.status.value = "<b style='color:#d62728'>The episode is over: press Reset.</b>"
            return None
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps.append({"action": action, "obs": obs, "reward": reward,
                           "components": dict(info["reward_components"]), "info": info})
        self.obs, self.info, self.done = obs, info, terminated or truncated
        self.action.value = ""
        self._render()
        return obs, reward, terminated, truncated, info

    def _fill_expert(self) -> None:
        if not self.done:
            self.action.value = self.base.expert_action()

    # -- views ------------------------------------------------------------------------------------
    def _status_html(self) -> str:
        total = sum(s["reward"] for s in self.steps)
        end = ""
        if self.done:
            end = " · <b>success</b>" if self.info.get("success") else " · <b>episode over</b>"
        return f"task {_esc(self.info.get('task_id', self.base.task.id if self.base.task else ''))} · " \
               f"turn {len(self.steps)} / {self.base.max_steps} · return {total:+.3f}{end}"

    def _reward_html(self) -> str:
        if not self.steps:
            return "<i>no step yet</i>"
        last = self.steps[-1]
        totals: dict[str, float] = {}
        for s in self.steps:
            for k, v in s["components"].items():
                totals[k] = totals.get(k, 0.0) + v
        names = sorted(totals)
        rows = [[_esc(k), _fmt(last["components"].get(k, 0.0)), _fmt(totals[k])] for k in names]
        rows.append(["<b>reward</b>", f"<b>{last['reward']:+.3f}</b>", f"<b>{sum(totals.values()):+.3f}</b>"])
        info = last["info"]
        checks = ", ".join(f"{k}: {'✓' if v else '✗'}" for k, v in info.get("checks", {}).items())
        extra = f"valid {info.get('valid')} · tool {info.get('tool')}" + (f" · {checks}" if checks else "")
        return _table(["component", "this step", "episode"], rows, cls="al-reward") + \
            f"<div style='font-size:11px'>{_esc(extra)}</div>"

    def _episode_html(self) -> str:
        rows, styles = [], []
        scale = max((abs(s["reward"]) for s in self.steps), default=0.0)
        for t, s in enumerate(self.steps):
            parts = ", ".join(f"{k} {v:+.2f}" for k, v in s["components"].items() if v) or "0"
            rows.append([str(t), f"<code>{_esc(s['action'])}</code>", _esc(s["obs"]), f"{s['reward']:+.3f}",
                         _esc(parts)])
            styles.append(f"background:{_diverging(s['reward'], scale)}")
        return _table(["turn", "action", "env reply", "reward", "components"], rows, cls="al-episode", styles=styles)

    def _render(self) -> None:
        self.status.value = self._status_html()
        self.observation.value = (f'<pre class="al-obs" style="white-space:pre-wrap;background:#f6f8fa;'
                                  f'padding:4px">{_esc(self.obs)}</pre>')
        self.reward.value = self._reward_html()
        self.episode.value = self._episode_html()
        self.step_button.disabled = self.expert_button.disabled = self.done
        if self.steps:
            self.chart.value = _png(self.figure(), dpi=70)

    def figure(self) -> Figure:
        """The episode's reward by component, per turn."""
        return reward_breakdown([s["components"] for s in self.steps], title="this episode: reward per turn")

    def to_html(self) -> str:
        return (f"<div class='al-playground'><div>{self._status_html()}</div>{self.observation.value}"
                f"{self._reward_html()}{self._episode_html()}</div>")


# ============================================================================ TrajectoryViewer

def _default_turn_advantages(traj: Trajectory) -> list[float]:
    """Without given advantages: each turn's return-to-go (GAE with γ = λ = 1 and no critic)."""
    if traj.num_turns == 0:
        return []
    r = torch.tensor([traj.rewards], dtype=torch.float64)  # (1, T)
    adv, _ = gae(r, torch.zeros_like(r), torch.ones_like(r), gamma=1.0, gae_lambda=1.0)
    return adv[0].tolist()


class TrajectoryViewer(_Shown):
    """Browse trajectories: filter by success, env and task; pick one; see its turns coloured
    by reward and its tokens coloured by role, or by logprob, advantage or loss mask.

    ``trajectories``: a list, one Trajectory, or a jsonl path. ``tokenizer`` (or a Policy)
    turns token ids into text. ``advantages``: per trajectory, one value per turn or per
    token; default: each turn's return-to-go (see `_default_turn_advantages`).
    """

    def __init__(self, trajectories, tokenizer=None, advantages: Sequence[Sequence[float]] | None = None,
                 max_tokens: int = 3000):
        self.trajectories = _as_trajectories(trajectories)
        self.tokenizer = tokenizer
        self.advantages = advantages
        self.max_tokens = max_tokens
        self._quiet = False
        envs = sorted({t.env_id for t in self.trajectories})
        self.success = W.Dropdown(options=["all", "success", "failure"], value="all", description="outcome")
        self.env = W.Dropdown(options=["all", *envs], value="all", description="env")
        self.task = W.Text(value="", placeholder="task id contains…", description="task")
        self.overlay = W.ToggleButtons(options=list(OVERLAYS), value="role", description="colour")
        self.selector = W.Select(options=[], rows=6, layout=W.Layout(width="95%"))
        self.show_chart = W.Checkbox(value=False, description="reward charts")
        self.header = W.HTML()
        self.turns = W.HTML()
        self.tokens = W.HTML()
        self.chart = W.Image(format="png")
        for control in (self.success, self.env, self.task):
            control.observe(lambda _: self._refilter(), names="value")
        for control in (self.selector, self.overlay, self.show_chart):
            control.observe(lambda _: self._render(), names="value")
        self.widget = W.VBox([
            W.HBox([self.success, self.env, self.task]),
            self.selector, self.header, self.turns, self.overlay, self.tokens, self.show_chart, self.chart,
        ], layout=W.Layout(width="100%"))
        self.widget.add_class("al-viewer")
        self._refilter()

    # -- filtering --------------------------------------------------------------------------------
    @property
    def shown(self) -> list[int]:
        """Indices of the trajectories that pass the filters, in order."""
        want = self.success.value
        return [i for i, t in enumerate(self.trajectories)
                if (want == "all" or t.success == (want == "success"))
                and (self.env.value == "all" or t.env_id == self.env.value)
                and self.task.value.strip() in t.task_id]

    @property
    def selected(self) -> Trajectory | None:
        i = self.selector.value
        return None if i is None else self.trajectories[i]

    def _label(self, i: int) -> str:
        t = self.trajectories[i]
        mark = "✓" if t.success else "✗"
        return f"#{i} {mark} {t.env_id.split('/')[-1]} · {t.task_id} · {t.num_turns} turns · return {t.total_reward:+.2f}"

    def _refilter(self) -> None:
        shown = self.shown
        keep = self.selector.value if self.selector.value in shown else (shown[0] if shown else None)
        self._quiet = True  # one render at the end, not one per trait change
        try:
            self.selector.options = [(self._label(i), i) for i in shown]
            self.selector.value = keep
        finally:
            self._quiet = False
        self._render()

    # -- views ------------------------------------------------------------------------------------
    def token_advantages(self, i: int) -> list[float]:
        traj = self.trajectories[i]
        adv = self.advantages[i] if self.advantages is not None else _default_turn_advantages(traj)
        return list(adv) if len(adv) == len(traj.token_ids) else turn_rewards_to_tokens(traj, adv)

    def _header_html(self) -> str:
        n, k = len(self.trajectories), len(self.shown)
        wins = sum(self.trajectories[i].success for i in self.shown)
        head = f"<b>{k}</b> of {n} trajectories shown · {wins} succeeded"
        t = self.selected
        if t is not None:
            head += (f"<br>selected: {_esc(t.env_id)} · task {_esc(t.task_id)} · difficulty {t.difficulty} · "
                     f"{len(t.token_ids)} tokens ({sum(t.loss_mask)} trained on) · T={t.temperature}")
        return f"<div class='al-header' style='font-size:12px'>{head}</div>"

    def _render(self) -> None:
        if self._quiet:
            return
        self.header.value = self._header_html()
        t = self.selected
        if t is None:
            self.turns.value, self.tokens.value = "<i>no trajectory matches the filters</i>", ""
        else:
            self.turns.value = turns_html(t)
            self.tokens.value = token_html(t, self.tokenizer, self.overlay.value,
                                           self.token_advantages(self.selector.value), self.max_tokens)
        self.chart.layout.display = None if self.show_chart.value else "none"
        if self.show_chart.value:
            self.chart.value = _png(self.figure(), dpi=70)

    def figure(self) -> Figure:
        """Reward by component: per turn of the selected trajectory, per episode of those shown."""
        fig = Figure(figsize=(9, 2.8))
        left, right = fig.subplots(1, 2, width_ratios=[1, 2])
        if self.selected is not None:
            reward_breakdown(self.selected, ax=left, title="selected: per turn")
        shown = [self.trajectories[i] for i in self.shown[:40]]
        if shown:
            reward_breakdown(shown, ax=right, title="shown episodes (first 40)")
            right.set_xticks(range(len(shown)), [str(i) for i in self.shown[:40]], fontsize=6)
        return fig

    def to_html(self) -> str:
        return f"<div class='al-viewer'>{self._header_html()}{self.turns.value}{self.tokens.value}</div>"


# ============================================================================ AdvantageExplorer

def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0] or [1]


def _by_turn_critic(trajs: Sequence[Trajectory]) -> list[float]:
    """A stand-in critic when no values are given: V(s_t) = the mean undiscounted
    return-to-go at turn t over the given episodes that reached turn t."""
    T = max(t.num_turns for t in trajs)
    sums, counts = [0.0] * (T + 1), [0] * (T + 1)
    for traj in trajs:
        togo = np.cumsum(traj.rewards[::-1])[::-1]
        for t, g in enumerate(togo):
            sums[t] += float(g)
            counts[t] += 1
    return [s / c if c else 0.0 for s, c in zip(sums, counts)]


# what the explorer's tokens can show: GAE, GRPO's episode advantage, and the critic-free per-turn ones
PER_TURN = tuple(a for a in ADVANTAGES if a != "episode")
_SHOWN = {  # key: (button label, tooltip)
    "gae": ("GAE (PPO)", "tokens show the GAE advantage of their turn"),
    "group": ("group (GRPO)", "tokens show their episode's group-relative advantage"),
    "gigpo": ("GiGPO", "episode advantage plus the step group's (turns from the same state)"),
    "turn_baseline": ("turn baseline", "turn t's return against the other samples' returns from turn t"),
    "turn_index": ("turn index (biased)", "normalised per turn index: biased if the policy picks when to stop"),
}
ESTIMATORS = {k: _SHOWN.get(k, (k, k)) for k in ("gae", "group", *PER_TURN)}


class AdvantageExplorer(_Shown):
    """Move γ, λ, the group size and the scaling; see per-turn and per-token advantages.

    GAE (PPO) uses the selected trajectory's rewards and a critic's values V(s_t), editable in
    the "V(s_t)" box: ``values=`` if given, else the mean return-to-go at each turn over all
    given trajectories (with one trajectory that is its own return, so every δ would be 0:
    then V = 0). Give one extra value to bootstrap a truncated episode.
    Group-relative advantages (GRPO) use every trajectory's return, in contiguous groups.
    The critic-free per-turn estimators of `agentlab.algos.grpo` (GiGPO, the turn baseline and the
    biased turn-index one) use the same groups, with γ as their ``turn_gamma``; the estimator table
    puts all five side by side for the selected trajectory, turn by turn, and ``method`` picks the
    one the tokens are coloured by.
    ``chart=False`` leaves out the δ/A bar chart (a matplotlib image redrawn on every change).
    """

    def __init__(self, trajectories, values: Sequence[float] | None = None, tokenizer=None, index: int = 0,
                 gamma: float = 0.99, gae_lambda: float = 0.95, group_size: int | None = None,
                 scale: str = "group", chart: bool = True):
        self.trajectories = _as_trajectories(trajectories)
        self.show_chart = chart  # the δ/A bar chart: a matplotlib image, the slowest part of a redraw
        if not self.trajectories:
            raise ValueError("AdvantageExplorer needs at least one trajectory")
        self.tokenizer = tokenizer
        self._given_values = None if values is None else [float(v) for v in values]
        n = len(self.trajectories)
        self.critic = _by_turn_critic(self.trajectories) if n > 1 else None
        self.index = W.Dropdown(options=[(f"#{i} {t.task_id} (return {t.total_reward:+.2f})", i)
                                         for i, t in enumerate(self.trajectories)], value=index,
                                description="trajectory", layout=W.Layout(width="420px"))
        slider = dict(min=0.0, max=1.0, step=0.01, continuous_update=False, readout_format=".2f",
                      style={"description_width": "110px"}, layout=W.Layout(width="420px"))
        self.gamma = W.FloatSlider(value=gamma, description="γ (gamma)", **slider)
        self.gae_lambda = W.FloatSlider(value=gae_lambda, description="λ (gae_lambda)", **slider)
        self.gamma.add_class("al-gamma")
        self.gae_lambda.add_class("al-gae-lambda")
        sizes = _divisors(n)
        default_g = group_size or self._group_size_from_ids(sizes)
        self.group_size = W.SelectionSlider(options=sizes, value=default_g if default_g in sizes else sizes[-1],
                                            description="group size", continuous_update=False,
                                            style={"description_width": "110px"}, layout=W.Layout(width="420px"))
        self.scale = W.Dropdown(options=["group", "batch", "none"], value=scale, description="scale")
        self.method = W.ToggleButtons(options=[(label, key) for key, (label, _) in ESTIMATORS.items()], value="gae",
                                      tooltips=[tip for _, tip in ESTIMATORS.values()])
        self.values_text = W.Text(description="V(s_t)", layout=W.Layout(width="600px"),
                                  continuous_update=False)
        self.formula = W.HTML()
        self.turn_table = W.HTML()
        self.token_view = W.HTML()
        self.group_table = W.HTML()
        self.estimator_table = W.HTML()
        self.chart = W.Image(format="png")
        self.turn_table.add_class("al-advantages")
        self._set_values_text()
        self.index.observe(lambda _: (self._set_values_text(), self._render()), names="value")
        for control in (self.gamma, self.gae_lambda, self.group_size, self.scale, self.method, self.values_text):
            control.observe(lambda _: self._render(), names="value")
        self.widget = W.VBox([
            W.HBox([self.index, self.method]), self.gamma, self.gae_lambda, self.values_text,
            self.formula, W.HBox([self.turn_table, self.chart]),
            self.token_view, W.HBox([self.group_size, self.scale]), self.group_table, self.estimator_table,
        ])
        self.widget.add_class("al-explorer")
        self._render()

    # -- inputs -----------------------------------------------------------------------------------
    @property
    def trajectory(self) -> Trajectory:
        return self.trajectories[self.index.value]

    def _group_size_from_ids(self, sizes: list[int]) -> int:
        groups = [t.group for t in self.trajectories]
        if min(groups) < 0:
            return sizes[-1]
        runs = [len(list(g)) for _, g in itertools.groupby(groups)]
        return runs[0] if len(set(runs)) == 1 else sizes[-1]

    def _set_values_text(self) -> None:
        t = self.trajectory
        if self._given_values is not None:
            v = self._given_values
        elif self.critic is not None:
            v = self.critic[: t.num_turns + (1 if t.truncated else 0)]
        else:
            v = [0.0] * t.num_turns
        self.values_text.value = ", ".join(f"{x:.3f}" for x in v)

    @property
    def values(self) -> list[float]:
        """V(s_t) per turn as parsed from the box (padded with 0 / cut to the turns), plus the
        bootstrap value V(s_T) when one extra is given."""
        try:
            parsed = [float(x) for x in self.values_text.value.replace(";", ",").split(",") if x.strip()]
        except ValueError:
            parsed = []
        T = self.trajectory.num_turns
        return (parsed + [0.0] * T)[: T + 1] if len(parsed) > T else (parsed + [0.0] * T)[:T]

    # -- the computation --------------------------------------------------------------------------
    def compute(self) -> dict:
        """Everything the explorer shows, for the current controls (float64 tensors → lists)."""
        t = self.trajectory
        T, gamma, lam = t.num_turns, float(self.gamma.value), float(self.gae_lambda.value)
        vals = self.values
        values = torch.tensor([vals[:T]], dtype=torch.float64)  # (1, T)
        rewards = torch.tensor([t.rewards], dtype=torch.float64)  # (1, T)
        mask = torch.ones_like(rewards)
        bootstrap = vals[T] if (t.truncated and len(vals) > T) else 0.0
        last_values = torch.tensor([bootstrap], dtype=torch.float64) if t.truncated else None
        adv, ret = gae(rewards, values, mask, gamma, lam, last_values)
        v = values[0].tolist()
        next_v = v[1:] + [bootstrap]
        deltas = [r + gamma * nv - cv for r, nv, cv in zip(t.rewards, next_v, v)]
        totals = torch.tensor([tr.total_reward for tr in self.trajectories], dtype=torch.float64)
        g = int(self.group_size.value)
        g_adv = group_advantages(totals, g, scale=self.scale.value).tolist()
        per_turn = {"gae": adv[0].tolist(), "group": [g_adv[self.index.value]] * T}
        for key in PER_TURN:  # the same groups; gamma discounts their per-turn returns
            s = GRPOSettings(advantage=key, adv_scale=self.scale.value, turn_gamma=gamma)
            per_turn[key] = turn_advantages(self.trajectories, totals.float(), g, s)[self.index.value, :T].tolist()
        return {"rewards": list(t.rewards), "values": v, "next_values": next_v, "deltas": deltas,
                "advantages": adv[0].tolist(), "returns": ret[0].tolist(), "group_advantages": g_adv,
                "per_turn": per_turn, "token_advantages": turn_rewards_to_tokens(t, per_turn[self.method.value])}

    @property
    def shown_advantages(self) -> list[float]:
        """The per-turn GAE advantages in the table now."""
        return list(self._shown["advantages"])

    @property
    def shown_group_advantages(self) -> list[float]:
        return list(self._shown["group_advantages"])

    # -- views ------------------------------------------------------------------------------------
    def _formula_html(self, c: dict) -> str:
        g, lam = self.gamma.value, self.gae_lambda.value
        gl = g * lam
        terms = " + ".join(f"({gl:.2f})<sup>{k}</sup>·({d:+.3f})" if k else f"({d:+.3f})"
                           for k, d in enumerate(c["deltas"][:4]))
        more = " + …" if len(c["deltas"]) > 4 else ""
        a0 = c["advantages"][0] if c["advantages"] else 0.0
        end = ("truncated: V after the last turn = the extra value (bootstrap)" if self.trajectory.truncated
               else "terminated: V after the last turn = 0")
        return ("<div class='al-formula' style='font-size:13px'>"
                "δ<sub>t</sub> = r<sub>t</sub> + γ·V(s<sub>t+1</sub>) − V(s<sub>t</sub>) &nbsp;&nbsp; "
                "A<sub>t</sub> = Σ<sub>k</sub> (γλ)<sup>k</sup> δ<sub>t+k</sub> &nbsp;&nbsp; "
                "R<sub>t</sub> = A<sub>t</sub> + V(s<sub>t</sub>)<br>"
                f"γ = {g:.2f}, λ = {lam:.2f}, γλ = {gl:.3f} · {end}<br>"
                f"A<sub>0</sub> = {terms}{more} = <b>{a0:+.3f}</b></div>")

    def _turn_table_html(self, c: dict) -> str:
        scale = max((abs(a) for a in c["advantages"]), default=0.0)
        rows = [[str(t), f"{r:+.3f}", f"{v:+.3f}", f"{nv:+.3f}", f"{d:+.3f}", f"<b>{a:+.3f}</b>", f"{R:+.3f}"]
                for t, (r, v, nv, d, a, R) in enumerate(zip(c["rewards"], c["values"], c["next_values"],
                                                            c["deltas"], c["advantages"], c["returns"]))]
        styles = [f"background:{_diverging(a, scale)}" for a in c["advantages"]]
        data = ",".join(f"{a:.6f}" for a in c["advantages"])
        return (f"<div data-advantages='{data}'>"
                + _table(["t", "r<sub>t</sub>", "V(s<sub>t</sub>)", "V(s<sub>t+1</sub>)", "δ<sub>t</sub>",
                          "A<sub>t</sub>", "R<sub>t</sub>"], rows, cls="al-gae-table", styles=styles) + "</div>")

    def _group_html(self, c: dict) -> str:
        g = int(self.group_size.value)
        scale = max((abs(a) for a in c["group_advantages"]), default=0.0)
        rows = [[f"#{i}", str(i // g), _esc(t.task_id), f"{t.total_reward:+.3f}", f"<b>{a:+.3f}</b>"]
                for i, (t, a) in enumerate(zip(self.trajectories, c["group_advantages"]))]
        styles = [f"background:{_diverging(a, scale)}" + (";outline:2px solid #333" if i == self.index.value else "")
                  for i, a in enumerate(c["group_advantages"])]
        divisor = {"group": "std(group)", "batch": "std(all returns)", "none": "1"}[self.scale.value]
        return ("<div style='font-size:12px'>GRPO: A<sub>i</sub> = (R<sub>i</sub> − mean(group)) / "
                f"{divisor} "
                f"· {len(self.trajectories) // g} groups of {g}</div>"
                + _table(["sample", "group", "task", "return R<sub>i</sub>", "A<sub>i</sub>"], rows,
                         cls="al-group-table", styles=styles))

    def _estimator_html(self, c: dict) -> str:
        per_turn = c["per_turn"]
        scale = max((abs(a) for col in per_turn.values() for a in col), default=0.0)
        states = anchor_states(self.trajectory)
        rows = [[str(t), _esc(action[:40]), _esc(state.split(":", 1)[-1][:40] or "(the task)")]
                + [f"<b>{per_turn[k][t]:+.3f}</b>" if k == self.method.value else f"{per_turn[k][t]:+.3f}"
                   for k in ESTIMATORS]
                for t, (action, state) in enumerate(zip(self.trajectory.actions, states))]
        styles = [f"background:{_diverging(per_turn[self.method.value][t], scale)}" for t in range(len(rows))]
        return ("<div style='font-size:12px'>Every estimator on this trajectory, turn by turn (bold: the one "
                "the tokens show; the row's colour follows it). <i>from</i> is the state GiGPO groups the turn by."
                "</div>" + _table(["t", "action", "from", *(label for label, _ in ESTIMATORS.values())], rows,
                                  cls="al-estimator-table", styles=styles))

    def _render(self) -> None:
        c = self._shown = self.compute()
        self.formula.value = self._formula_html(c)
        self.turn_table.value = self._turn_table_html(c)
        self.token_view.value = token_html(self.trajectory, self.tokenizer, "advantage", c["token_advantages"])
        self.group_table.value = self._group_html(c)
        self.estimator_table.value = self._estimator_html(c)
        if self.show_chart:
            self.chart.value = _png(self.figure(), dpi=70)

    def figure(self) -> Figure:
        """Bars of δ_t and A_t per turn for the current γ and λ."""
        c = self._shown
        fig = Figure(figsize=(4.2, 2.4))
        ax = fig.add_subplot()
        x = np.arange(len(c["deltas"]))
        ax.bar(x - 0.2, c["deltas"], width=0.4, label="δ_t (TD error)", color="#9ecae1")
        ax.bar(x + 0.2, c["advantages"], width=0.4, label="A_t (GAE)", color="#3182bd")
        ax.axhline(0, color="#888", linewidth=0.6)
        ax.set_xticks(x, [str(i) for i in x], fontsize=7)
        ax.set_xlabel("turn", fontsize=8)
        ax.set_title(f"γ={self.gamma.value:.2f}  λ={self.gae_lambda.value:.2f}", fontsize=9)
        ax.legend(fontsize=7, frameon=False)
        fig.tight_layout()
        return fig

    def to_html(self) -> str:
        return (f"<div class='al-explorer'>{self.formula.value}{self.turn_table.value}{self.token_view.value}"
                f"{self.group_table.value}{self.estimator_table.value}</div>")


# ============================================================================ TrainingDashboard

# -- alarms: the rules are metrics (agentlab.metrics); here, what each badge says
ALARMS = {
    "entropy_collapse": ("entropy collapse", "policy entropy fell to a fraction of its start: the agent repeats itself"),
    "diversity_collapse": ("diversity collapse", "Self-BLEU within groups ≥ 0.7: samples for a task are near copies"),
    "shortcut": ("shortcut", "episodes got shorter while success stayed flat: look at what the agent now does"),
    "kl_spike": ("KL spike", "one update moved the policy far from the one that sampled its batch (approx_kl > 0.1): "
                 "watch the invalid rate and success after it; lower the learning rate or the PPO epochs, or set "
                 "PPOSettings.target_kl"),
}


# -- the panels: title, the metric keys (a trailing "/" is a family), the alarm that lights it
PANELS = [
    ("success rate", ["success_rate"], "shortcut"),
    ("mean return", ["mean_return"], None),
    ("reward components", ["reward/"], None),
    ("turns per episode", ["mean_turns"], "shortcut"),
    ("actions (share)", ["action/", "invalid_rate"], None),
    ("step-level success", ["step/"], None),
    ("entropy (nats/token)", ["entropy"], "entropy_collapse"),
    ("KL", ["approx_kl", "kl", "sampler_kl"], "kl_spike"),  # sampler_kl: only with a cheaper sampler or is_correction
    ("zero-variance groups", ["zero_var_frac"], None),
    ("Self-BLEU", ["self_bleu"], "diversity_collapse"),
]
# Drawn only once one of their metrics is logged: most runs sample from the trainer and would show an empty panel.
OPTIONAL_PANELS = [
    ("sampler mismatch (share of tokens)", ["sampler_clip_frac", "is_capped_frac"], None),
]


def _svg_panel(title: str, xs: Sequence[int], series: Mapping[str, Sequence[float]], alarm: bool,
               width: int = 230, height: int = 130) -> str:
    """A small line chart as inline SVG (a few hundred characters; no matplotlib)."""
    left, right, top, bottom = 34, 6, 16, 14
    pw, ph = width - left - right, height - top - bottom
    finite = [v for ys in series.values() for v in ys if v is not None and math.isfinite(v)]
    border = "#d62728" if alarm else "#ccc"
    parts = [f'<svg class="al-panel" width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg" '
             f'style="border:{2 if alarm else 1}px solid {border};margin:2px;background:#fff">',
             f'<text x="4" y="11" font-size="10" font-weight="bold" fill="{"#d62728" if alarm else "#333"}">'
             f'{_esc(title)}</text>']
    if finite and xs:
        lo, hi = min(finite), max(finite)
        if hi - lo < 1e-9:
            lo, hi = lo - 0.5, hi + 0.5
        x0, x1 = xs[0], max(xs[-1], xs[0] + 1)

        def px(x):
            return left + (x - x0) / (x1 - x0) * pw

        def py(y):
            return top + (hi - y) / (hi - lo) * ph

        parts.append(f'<text x="2" y="{top + 8}" font-size="8" fill="#666">{hi:.3g}</text>'
                     f'<text x="2" y="{top + ph}" font-size="8" fill="#666">{lo:.3g}</text>'
                     f'<text x="{left}" y="{height - 3}" font-size="8" fill="#666">{x0}</text>'
                     f'<text x="{width - right}" y="{height - 3}" font-size="8" fill="#666" '
                     f'text-anchor="end">{xs[-1]}</text>'
                     f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#eee"/>')
        for k, (name, ys) in enumerate(series.items()):
            colour = PALETTE[k % len(PALETTE)]
            runs, run = [], []
            for x, y in zip(xs, ys):
                if y is None or not math.isfinite(y):
                    runs, run = runs + [run] if run else runs, []
                else:
                    run.append(f"{px(x):.1f},{py(y):.1f}")
            runs = runs + [run] if run else runs
            for run in runs:
                if len(run) == 1:
                    cx, cy = run[0].split(",")
                    parts.append(f'<circle cx="{cx}" cy="{cy}" r="1.8" fill="{colour}"/>')
                else:
                    parts.append(f'<polyline points="{" ".join(run)}" fill="none" stroke="{colour}" '
                                 f'stroke-width="1.4"/>')
            last = next((y for y in reversed(ys) if y is not None and math.isfinite(y)), None)
            if len(series) > 1 or last is not None:
                label = f"{name.split('/')[-1]} {last:.3g}" if last is not None else name.split("/")[-1]
                parts.append(f'<text x="{width - right}" y="{top + 9 + 9 * k}" font-size="8" fill="{colour}" '
                             f'text-anchor="end">{_esc(label)}</text>')
    else:
        parts.append(f'<text x="{width / 2}" y="{height / 2}" font-size="9" fill="#999" '
                     f'text-anchor="middle">not logged</text>')
    parts.append("</svg>")
    return "".join(parts)


class TrainingDashboard(_Shown):
    """Live training curves and alarms. Use as a callback: ``train(cfg, policy, callbacks=[dash])``;
    it is called as ``dash(update, metrics, trajectories)`` after every update.

    Keeps every metric's history (``history``; NaN where a key was not logged) and redraws
    in place at most every ``min_interval`` seconds (``force=True`` or `redraw` to draw now).
    Episode metrics missing from ``metrics`` are filled in from the trajectories when given.
    """

    def __init__(self, min_interval: float = 0.5, title: str = "training"):
        self.min_interval = min_interval
        self.title = title
        self._updates: list[int] = []
        self._history: dict[str, list[float]] = {}
        self._last_draw = -math.inf
        self.draw_seconds = 0.0  # time spent drawing, in total (for measuring the overhead)
        self.draws = 0
        self.status = W.HTML()
        self.alarm_view = W.HTML()
        self.panels = W.HTML()
        self.widget = W.VBox([self.status, self.alarm_view, self.panels])
        self.widget.add_class("al-dashboard")
        self.redraw()
        self._last_draw = -math.inf  # the first update always draws

    # -- data ---------------------------------------------------------------------------------------
    @property
    def history(self) -> dict[str, list[float]]:
        """``{"update": [...], key: [...]}``, all lists the same length."""
        return {"update": list(self._updates), **{k: list(v) for k, v in self._history.items()}}

    @property
    def alarms(self) -> list[str]:
        return active_alarms(self._history)

    def update(self, update: int, metrics: Mapping[str, float], trajectories: Sequence[Trajectory] | None = None,
               force: bool = False) -> None:
        if trajectories and not all(k in metrics for k in ("success_rate", "mean_return", "mean_turns")):
            metrics = {**episode_metrics(trajectories), **dict(metrics)}
        n = len(self._updates)
        self._updates.append(int(update))
        for key, value in metrics.items():
            try:
                value = float(value)
            except (TypeError, ValueError):
                continue  # not a number (e.g. a config string): not plotted
            self._history.setdefault(key, [math.nan] * n).append(value)
        for ys in self._history.values():
            if len(ys) < n + 1:
                ys.append(math.nan)
        if force or time.perf_counter() - self._last_draw >= self.min_interval:
            self.redraw()

    __call__ = update

    def close(self) -> None:
        """Draw the last state (updates that came faster than ``min_interval`` may be skipped)."""
        self.redraw()

    # -- views --------------------------------------------------------------------------------------
    def _series(self, keys: Sequence[str]) -> dict[str, list[float]]:
        out = {}
        for key in keys:
            names = sorted(k for k in self._history if k.startswith(key)) if key.endswith("/") else [key]
            out.update({k: self._history[k] for k in names if k in self._history})
        return out

    def _panels(self) -> list[tuple]:
        """`PANELS`, then each of `OPTIONAL_PANELS` that has a logged metric."""
        return PANELS + [panel for panel in OPTIONAL_PANELS if self._series(panel[1])]

    def _alarm_html(self, active: Sequence[str]) -> str:
        badges = []
        for name, (label, why) in ALARMS.items():
            on = name in active
            style = ("background:#d62728;color:#fff" if on else "background:#eee;color:#999")
            badges.append(f'<span class="al-alarm{" al-alarm-on" if on else ""}" data-alarm="{name}" '
                          f'title="{_esc(why)}" style="{style};padding:2px 8px;margin-right:4px;'
                          f'border-radius:8px;font-size:12px">{"⚠ " if on else ""}{_esc(label)}</span>')
        return "".join(badges)

    def _status_html(self) -> str:
        if not self._updates:
            return f"<b>{_esc(self.title)}</b>: waiting for the first update"
        last = {k: v[-1] for k, v in self._history.items()}
        shown = [("success", "success_rate"), ("return", "mean_return"), ("turns", "mean_turns"),
                 ("entropy", "entropy"), ("kl", "approx_kl"), ("tok/s", "tokens_per_s")]
        bits = " · ".join(f"{label} {last[k]:.3g}" for label, k in shown if k in last and math.isfinite(last[k]))
        return f"<b>{_esc(self.title)}</b>: update {self._updates[-1]} · {bits}"

    def _panels_html(self, active: Sequence[str]) -> str:
        """Every panel as SVG in one wrapping row, each with its alarm lit if it is among ``active``."""
        return ("<div style='display:flex;flex-wrap:wrap'>" + "".join(
            _svg_panel(title, self._updates, self._series(keys), alarm in active if alarm else False)
            for title, keys, alarm in self._panels()) + "</div>")

    def to_html(self) -> str:
        active = self.alarms
        return (f"<div class='al-dashboard'><div>{self._status_html()}</div>"
                f"<div style='margin:4px 0'>{self._alarm_html(active)}</div>{self._panels_html(active)}</div>")

    def redraw(self) -> None:
        start = time.perf_counter()
        active = self.alarms
        self.status.value = self._status_html()
        self.alarm_view.value = self._alarm_html(active)
        self.panels.value = self._panels_html(active)
        self._last_draw = time.perf_counter()
        self.draw_seconds += self._last_draw - start
        self.draws += 1

    def figure(self) -> Figure:
        """The same panels as a matplotlib Figure (for static output and saved reports)."""
        panels = self._panels()
        cols = math.ceil(len(panels) / 2)
        fig = Figure(figsize=(2.8 * cols, 5.2))
        active = self.alarms
        for i, (title, keys, alarm) in enumerate(panels):
            ax = fig.add_subplot(2, cols, i + 1)
            series = self._series(keys)
            for k, (name, ys) in enumerate(series.items()):
                ax.plot(self._updates, ys, color=PALETTE[k % len(PALETTE)], label=name.split("/")[-1], linewidth=1.2)
            lit = bool(alarm) and alarm in active
            ax.set_title(("⚠ " if lit else "") + title, fontsize=9, color="#d62728" if lit else "black")
            ax.tick_params(labelsize=7)
            if len(series) > 1:
                ax.legend(fontsize=6, frameon=False)
            if not series:
                ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="#999")
        fig.supxlabel("update", fontsize=8)
        fig.tight_layout()
        return fig
