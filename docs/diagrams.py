"""Draw the course's diagrams into docs/images/: `.venv/bin/python docs/diagrams.py`.

    agent_env_loop.png      the policy and the env exchanging actions and observations, turn by turn
    trajectory_tokens.png   one real episode's tokens coloured by role, with the loss mask under them
    grpo_group.png          a GRPO group: G episodes of one task, their rewards and advantages
    gae_recursion.png       GAE over turns: δ_t from rewards and values, A_t summed back from the end
    lora_update.png         LoRA: a frozen W plus the low-rank product B·A, and what each costs
    failure_signatures.png  each failure mode the course trains into being, by the logged numbers that give it away

Each figure is computed from the library where there is something to compute (the GuessNumber
expert's episode, `group_advantages`, `gae`), so the pictures and the code cannot disagree. The
token figure tokenises that episode with the tiny policy's tokenizer, which the first run of the
kit builds into AGENTLAB_CACHE (a few minutes, once). Pass names to draw only some:
`docs/diagrams.py grpo_group lora_update`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no window, and the same output on every machine
import matplotlib.pyplot as plt
import torch
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

from agentlab.advantages import gae, group_advantages
from agentlab.envs import make
from agentlab.rollout import ACTION, OBSERVATION, PROMPT, play

OUT = Path(__file__).resolve().parent / "images"
DPI = 110
ROLE_COLOURS = {PROMPT: "#d9d9d9", OBSERVATION: "#9ecae1", ACTION: "#fdae6b"}
ROLE_NAMES = {PROMPT: "prompt (system + task)", OBSERVATION: "observation (the env's reply)",
              ACTION: "action (the policy's tokens)"}
POS, NEG, FROZEN, TRAINED = "#31a354", "#de2d26", "#bdbdbd", "#fd8d3c"


def expert_episode(seed: int = 3):
    """The GuessNumber expert's episode: bisection, found on the fourth guess (no model needed)."""
    return play(make("agentlab/GuessNumber-v0"), lambda env: env.expert_action(), seed=seed)


def _box(ax, x, y, w, h, text, colour, size=10, **kw):
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.08", fc=colour, ec="#444",
                                lw=1.0))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=size, **kw)


def _arrow(ax, start, end, colour="#444", style="-|>", rad=0.0, lw=1.4):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=14, color=colour, lw=lw,
                                 connectionstyle=f"arc3,rad={rad}"))


# ---------------------------------------------------------------------------- the agent–env loop

def agent_env_loop(path: Path) -> None:
    traj = expert_episode()
    fig, ax = plt.subplots(figsize=(10, 5.2))
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 5.2)
    ax.axis("off")
    _box(ax, 0.6, 3.5, 2.8, 1.2, "policy π_θ\n(the language model)", ROLE_COLOURS[ACTION], size=11)
    _box(ax, 6.6, 3.5, 2.8, 1.2, "environment\nreset() · step(action)", ROLE_COLOURS[OBSERVATION], size=11)
    _arrow(ax, (3.5, 4.45), (6.5, 4.45), rad=-0.15)
    ax.text(5, 4.95, "action a_t: text the model writes, e.g. guess(8)", ha="center", fontsize=9.5)
    _arrow(ax, (6.5, 3.75), (3.5, 3.75), rad=-0.15)
    ax.text(5, 3.05, "observation o_t+1, reward r_t, terminated / truncated", ha="center", fontsize=9.5)

    ax.text(0.2, 2.45, "one episode, turn by turn (the GuessNumber expert):", fontsize=10, weight="bold")
    obs = [traj.messages[1]["content"]] + [m["content"] for m in traj.messages[3::2]]
    width = 9.6 / traj.num_turns
    for t, (action, reward) in enumerate(zip(traj.actions, traj.rewards)):
        x = 0.2 + t * width
        _box(ax, x, 1.45, width - 0.25, 0.7, _wrap(obs[t], 26), ROLE_COLOURS[OBSERVATION], size=7.5)
        _box(ax, x + 0.3, 0.55, width - 0.85, 0.5, action, ROLE_COLOURS[ACTION], size=9, family="monospace")
        _arrow(ax, (x + (width - 0.25) / 2, 1.43), (x + (width - 0.25) / 2, 1.07), lw=1.0)
        ax.text(x + (width - 0.25) / 2, 0.28, f"turn {t}: r = {reward:g}", ha="center", fontsize=8.5)
        if t + 1 < traj.num_turns:
            _arrow(ax, (x + width - 0.55, 0.8), (x + width + 0.02, 1.6), lw=1.0, rad=0.2)
    ax.text(9.8, 0.02, f"'{obs[-1]}' → terminated",
            ha="right", fontsize=8.5, style="italic")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def _wrap(text: str, width: int) -> str:
    words, lines, line = text.split(), [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return "\n".join([*lines, line][:3])


# ---------------------------------------------------------------------------- tokens and the loss mask

def trajectory_tokens(path: Path) -> None:
    from agentlab.policy import load_policy
    from agentlab.sft import tokenise

    policy = load_policy("tiny")  # built on first use, then cached; only its tokenizer is needed here
    traj = tokenise(policy, expert_episode())
    pieces = [policy.tokenizer.decode([i]).replace("\n", "⏎") for i in traj.token_ids]
    fig, ax = plt.subplots(figsize=(11, 6.2))
    row_width, x, y, char_w, h = 100.0, 0.0, 0.0, 0.95, 1.0
    for piece, role, keep in zip(pieces, traj.roles, traj.loss_mask):
        w = max(1.6, char_w * len(piece) + 0.6)
        if x + w > row_width:
            x, y = 0.0, y - 2.0
        ax.add_patch(Rectangle((x, y), w - 0.2, h, fc=ROLE_COLOURS[role], ec="#777", lw=0.4))
        ax.text(x + (w - 0.2) / 2, y + h / 2, piece, ha="center", va="center", fontsize=6.2, family="monospace")
        ax.add_patch(Rectangle((x, y - 0.45), w - 0.2, 0.3, fc="#252525" if keep else "#f0f0f0", ec="none"))
        x += w
    ax.set_xlim(-1, row_width + 1)
    ax.set_ylim(y - 1.2, 1.8)
    ax.axis("off")
    handles = [Rectangle((0, 0), 1, 1, fc=ROLE_COLOURS[r], ec="#777") for r in (PROMPT, OBSERVATION, ACTION)]
    handles.append(Rectangle((0, 0), 1, 1, fc="#252525"))
    labels = [ROLE_NAMES[r] for r in (PROMPT, OBSERVATION, ACTION)] + ["loss mask = 1 (dark bar under a token)"]
    ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 1.06), ncol=4, fontsize=8, frameon=False)
    n_action = sum(traj.loss_mask)
    ax.set_title(f"One GuessNumber episode as the tiny policy's tokens: {len(pieces)} tokens, {n_action} of them "
                 f"trained on (the policy's actions and their end-of-turn)", fontsize=10, pad=22)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


# ---------------------------------------------------------------------------- a GRPO group

def grpo_group(path: Path) -> None:
    rewards = torch.tensor([1.1, 0.1, 0.3, 1.2, 0.0, 0.2])  # (G,) one task, six sampled episodes
    adv = group_advantages(rewards, group_size=len(rewards))  # (G,)
    mean, std = rewards.mean().item(), rewards.std(unbiased=False).item()
    fig, (ax_r, ax_a) = plt.subplots(1, 2, figsize=(10, 3.8))
    idx = range(len(rewards))
    ax_r.bar(idx, rewards, color="#9ecae1", ec="#444")
    ax_r.axhline(mean, color="#444", ls="--")
    ax_r.text(len(rewards) - 0.5, mean + 0.03, f"group mean {mean:.2f}, std {std:.2f}", ha="right", fontsize=9)
    ax_r.set_xticks(list(idx), [f"episode {i}" for i in idx], fontsize=8)
    ax_r.set_ylabel("reward R_i")
    ax_r.set_title("G = 6 episodes sampled for the same task", fontsize=10)
    ax_a.bar(idx, adv, color=[POS if a > 0 else NEG for a in adv.tolist()], ec="#444")
    ax_a.axhline(0, color="#444", lw=0.8)
    for i, a in enumerate(adv.tolist()):
        ax_a.text(i, a + (0.08 if a > 0 else -0.2), f"{a:+.2f}", ha="center", fontsize=8.5)
    ax_a.set_xticks(list(idx), [f"episode {i}" for i in idx], fontsize=8)
    ax_a.set_ylabel("advantage A_i")
    ax_a.set_title("A_i = (R_i − mean) / std: every action token of episode i gets A_i", fontsize=10)
    ax_a.set_ylim(-1.8, 1.8)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


# ---------------------------------------------------------------------------- GAE over turns

def gae_recursion(path: Path) -> None:
    gamma, lam = 0.99, 0.9
    rewards = torch.tensor([[0.1, 0.1, 0.1, 1.1]])  # (1, T) the expert episode's rewards
    values = torch.tensor([[0.6, 0.7, 0.9, 1.0]])  # (1, T) what a critic might predict
    adv, _ = gae(rewards, values, torch.ones_like(rewards), gamma, lam)  # terminated: V after the end is 0
    next_v = torch.cat([values[0, 1:], torch.zeros(1)])
    delta = rewards[0] + gamma * next_v - values[0]
    T = rewards.shape[1]
    fig, ax = plt.subplots(figsize=(10.5, 4.2))
    ax.set_xlim(-0.6, T + 0.4)
    ax.set_ylim(-0.2, 4.5)
    ax.axis("off")
    for t in range(T):
        _box(ax, t, 2.9, 0.8, 0.8, f"s_{t}\nV = {values[0, t]:.2f}", ROLE_COLOURS[OBSERVATION], size=9)
        _arrow(ax, (t + 0.82, 3.3), (t + 0.98, 3.3))
        ax.text(t + 0.9, 3.85, f"r_{t} = {rewards[0, t]:.1f}", ha="center", fontsize=8.5)
        ax.text(t + 0.4, 2.35, f"δ_{t} = r_{t} + γV(s_{t + 1}) − V(s_{t})\n= {delta[t]:+.3f}" + ("\n(V(s_" + str(T) + ") = 0: the end)" if t == T - 1 else ""), ha="center",
                fontsize=8)
        _box(ax, t + 0.05, 0.9, 0.7, 0.7, f"A_{t}\n{adv[0, t]:+.3f}", "#fdd0a2", size=9)
        if t + 1 < T:
            _arrow(ax, (t + 1.03, 1.25), (t + 0.77, 1.25), colour=TRAINED)
            ax.text(t + 0.9, 1.62, "γλ·", ha="center", fontsize=8.5, color=TRAINED)
    _box(ax, T, 2.9, 0.35, 0.8, "end\nV=0", "#f0f0f0", size=8)
    ax.text(T / 2, 0.25, f"A_t = δ_t + γλ·A_t+1, computed from the last turn back (γ = {gamma}, λ = {lam}; the "
            "episode terminated, so the value after its last turn is 0; a truncated one would use the critic's "
            "V(s_T))", ha="center", fontsize=8.5, wrap=True)
    ax.text(T / 2, 4.3, "GAE over turns: one advantage per turn, spread over that turn's action tokens",
            ha="center", fontsize=10.5, weight="bold")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


# ---------------------------------------------------------------------------- LoRA

def lora_update(path: Path) -> None:
    d = k = 896  # Qwen2.5-0.5B's hidden size: one attention projection is d × k
    r = 16
    full, low = d * k, r * (d + k)
    fig, ax = plt.subplots(figsize=(10, 4.2))
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 4.4)
    ax.axis("off")
    ax.add_patch(Rectangle((0.3, 0.6), 3.0, 3.0, fc=FROZEN, ec="#444"))
    ax.text(1.8, 2.1, f"W\n{d} × {k}\nfrozen\n(4-bit on a GPU)", ha="center", va="center", fontsize=10)
    ax.text(3.7, 2.1, "+", fontsize=20, ha="center", va="center")
    ax.add_patch(Rectangle((4.2, 0.6), 0.45, 3.0, fc=TRAINED, ec="#444"))
    ax.text(4.42, 0.35, f"B\n{d} × {r}", ha="center", va="top", fontsize=9)
    ax.text(4.95, 3.37, "·", fontsize=22, ha="center", va="center")
    ax.add_patch(Rectangle((5.3, 3.15), 3.0, 0.45, fc=TRAINED, ec="#444"))
    ax.text(6.8, 2.95, f"A   {r} × {k}", ha="center", va="top", fontsize=9)
    ax.text(8.45, 3.37, "× α/r", fontsize=11, va="center")
    ax.text(5.3, 1.75, f"trained: r·(d + k) = {low:,} numbers\nagainst d·k = {full:,} for W "
            f"({100 * low / full:.1f}%)", fontsize=9.5, va="center")
    ax.text(5.3, 0.85, "B starts at 0, so at the first update ΔW = 0 and the policy is\nthe reference: "
            "GRPO's π_ref is the same model with the adapter off", fontsize=9, va="center", style="italic")
    ax.set_title("LoRA: W' = W + (α/r)·B·A, a rank-r update to a frozen weight (Hu et al., 2021)", fontsize=10.5)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


# What each failure mode does to the logged numbers, as the notebooks' asserts check it on their own runs
# (an arrow is an assert there; a blank is a number that section does not check). Keep in step with them.
SIGNATURES = {
    "shortcut\n(03 §6)": {"reward": "↑", "success": "–", "tell": "reads ↓"},
    "reward hacking\n(08 §5)": {"reward": "≫ success", "success": "–", "Self-BLEU": "↑", "tell": "distinct\nprograms ↓"},
    "learning rate too large\n(10 §1)": {"success": "–", "invalid actions": "↑", "KL to reference": "↑",
                                          "entropy": "↑", "equal-reward groups": "↑", "tell": "kl_spike alarm"},
    "entropy collapse\n(10 §2)": {"reward": "↑", "success": "↓", "entropy": "↓", "Self-BLEU": "↑",
                                   "tell": "repeats ↑"},
}
SIGNATURE_COLUMNS = ["reward", "success", "invalid actions", "KL to reference", "entropy", "Self-BLEU",
                     "equal-reward groups", "tell"]


def failure_signatures(path: Path) -> None:
    rows = list(SIGNATURES)
    fig, ax = plt.subplots(figsize=(11.5, 3.9))
    colours = {"↑": "#fdae6b", "↓": "#9ecae1", "–": "#e0e0e0"}
    for r, mode in enumerate(rows):
        y = len(rows) - 1 - r
        ax.text(-0.6, y, mode, ha="right", va="center", fontsize=9.5)
        for c, column in enumerate(SIGNATURE_COLUMNS):
            mark = SIGNATURES[mode].get(column, "")
            width = 1.6 if column == "tell" else 0.9
            x = c + (0.35 if column == "tell" else 0)
            face = colours.get(mark, "#dfeee0" if mark else "white")
            ax.add_patch(Rectangle((x - width / 2, y - 0.42), width, 0.84, fc=face, ec="#999", lw=0.6))
            ax.text(x, y, mark, ha="center", va="center", fontsize=15 if len(mark) == 1 else 8.5)
    for c, column in enumerate(SIGNATURE_COLUMNS):
        ax.text(c + (0.35 if column == "tell" else 0), len(rows) - 0.3, column, ha="center", va="bottom",
                fontsize=8.5, rotation=0 if len(column) < 10 else 12)
    ax.set_xlim(-3.0, len(SIGNATURE_COLUMNS) + 0.4)
    ax.set_ylim(-0.6, len(rows) + 0.3)
    ax.axis("off")
    ax.set_title("Failure modes by the numbers that give them away: ↑ rose, ↓ fell, – did not rise "
                 "(each mark is an assert of that section; blank: not checked there)", fontsize=9.5)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


FIGURES = {"agent_env_loop": agent_env_loop, "trajectory_tokens": trajectory_tokens, "grpo_group": grpo_group,
           "gae_recursion": gae_recursion, "lora_update": lora_update, "failure_signatures": failure_signatures}


def main(names: list[str]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name in names or list(FIGURES):
        if name not in FIGURES:
            raise SystemExit(f"no figure {name!r}; known: {', '.join(FIGURES)}")
        path = OUT / f"{name}.png"
        FIGURES[name](path)
        print(f"{path.relative_to(OUT.parent.parent)}: {path.stat().st_size / 1024:.0f} KB")


if __name__ == "__main__":
    main(sys.argv[1:])
