"""The `agentlab` command: eval's JSON contract, play driven through stdin, the budget arithmetic."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentlab.budget import compute_budget
from agentlab.cli import COMMANDS, build_parser, main

ROOT = Path(__file__).resolve().parent.parent


def agentlab(*args: str, input: str | None = None) -> subprocess.CompletedProcess:
    """Run the command as a user would (``python -m agentlab.cli`` = the ``agentlab`` script)."""
    return subprocess.run([sys.executable, "-m", "agentlab.cli", *args], input=input, capture_output=True,
                          text=True, cwd=ROOT, timeout=120)


def test_eval_with_the_expert_writes_the_contract(tmp_path):
    out = tmp_path / "eval.json"
    run = agentlab("eval", "--env", "agentlab/GuessNumber-v0", "--policy", "expert", "--episodes", "30",
                   "--json", str(out))
    assert run.returncode == 0, run.stderr
    doc = json.loads(out.read_text())
    assert list(doc)[:4] == ["env", "split", "episodes", "success_rate"]
    assert doc["env"] == "agentlab/GuessNumber-v0" and doc["episodes"] == 30 and doc["policy"] == "expert"
    assert doc["success_rate"] == 1.0
    lo, hi = doc["success_ci95"]
    assert 0.8 < lo < hi == 1.0
    assert "success 1.000" in run.stdout


def test_play_through_stdin_shows_reward_components():
    run = agentlab("play", "--env", "GuessNumber", "--seed", "0", input="guess(8)\n:q\n")
    assert run.returncode == 0, run.stderr
    assert "Find the hidden number between 1 and 16" in run.stdout
    assert "reward +" in run.stdout and ("consistent" in run.stdout or "correct" in run.stdout)


def test_play_expert_hint_invalid_action_and_end_of_input(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO(":expert\nhello\nguess(8)\n"))  # then EOF
    assert main(["play", "--env", "GuessNumber", "--seed", "0"]) == 0
    out = capsys.readouterr().out
    assert "expert: guess(8)" in out
    assert "Invalid action" in out and "format -0.10" in out and "INVALID" in out


def test_play_continues_a_line_ending_in_backslash(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("guess(\\\n8)\n:q\n"))
    assert main(["play", "--env", "GuessNumber", "--seed", "0"]) == 0
    assert "valid, tool guess" in capsys.readouterr().out


def test_budget_reproduces_the_article_example(capsys):
    b = compute_budget(prompts=80_000, candidates=8, length=1200, epochs=2, tokens_per_s=2000)
    assert b.tokens == 80_000 * 8 * 1200 * 2 == 1_536_000_000  # "about 1.5 B tokens"
    assert b.hours == pytest.approx(1_536_000_000 / 2000 / 3600)
    assert main(["budget", "--prompts", "80000", "--candidates", "8", "--length", "1200", "--epochs", "2",
                 "--tokens-per-s", "2000"]) == 0
    out = capsys.readouterr().out
    assert "1,536,000,000 tokens (1.54 B)" in out and "213.3 hours" in out
    with pytest.raises(ValueError, match="candidates"):
        compute_budget(10, 0, 100)


def test_each_subcommand_is_one_entry():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == list(COMMANDS)
    for name, (_, run) in COMMANDS.items():
        assert sub.choices[name].get_default("run") is run
    assert main([]) == 2


def test_train_passes_the_warm_up_share_to_the_run(monkeypatch, tmp_path, capsys):
    import agentlab.train
    import agentlab.warmup

    seen = []
    monkeypatch.setattr(agentlab.warmup, "warm_policy_path",  # which warm-up was asked for, not built
                        lambda prof, envs=None, imperfect_share=None, **kw: f"warm-{envs[0]}-{imperfect_share}")

    def no_training(cfg, resume=False):  # what the command asked for, not trained
        seen.append(cfg)
        evals = [{"update": 0, "success_rate": 0.25}]
        return agentlab.train.TrainResult(policy=None, history=[], evals=evals, out_dir=tmp_path)

    monkeypatch.setattr(agentlab.train, "train", no_training)
    assert main(["train", "--env", "GuessNumber", "--imperfect-share", "0.6", "--out", str(tmp_path)]) == 0
    assert main(["train", "--env", "GuessNumber", "--out", str(tmp_path)]) == 0
    # the share names the run's starting policy; without one the run loads the env's own warm-up itself
    assert [cfg.policy for cfg in seen] == ["warm-agentlab/GuessNumber-v0-0.6", None]
    assert seen[0].env_id == "agentlab/GuessNumber-v0" and "0.25" in capsys.readouterr().out
