"""The `agentlab` command: eval's JSON contract, play driven through stdin, the budget arithmetic."""

from __future__ import annotations

import argparse
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agentlab.budget import compute_budget
from agentlab.cli import COMMANDS, build_parser, main
from agentlab.profiles import profile

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


def test_eval_of_a_model_shows_its_progress(tiny_path, capsys, tmp_path):
    # a real model may take many minutes over a split: the command shows episodes and successes as they end
    assert main(["eval", "--env", "GuessNumber", "--policy", str(tiny_path), "--episodes", "2",
                 "--max-new-tokens", "4", "--json", str(tmp_path / "a.json")]) == 0
    out = capsys.readouterr()
    assert "episodes GuessNumber" in out.err and "2/2" in out.err and "success 0/2" in out.err, out.err
    assert "policy=" in out.out
    assert json.loads((tmp_path / "a.json").read_text())["action_format"] == "call"  # the tiny model's own
    assert main(["eval", "--env", "GuessNumber", "--policy", str(tiny_path), "--episodes", "1", "--max-new-tokens", "4",
                 "--action-format", "tool_call", "--json", str(tmp_path / "b.json")]) == 0
    assert json.loads((tmp_path / "b.json").read_text())["action_format"] == "tool_call"


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


def test_help_prints_a_percent_sign_once():
    parser = build_parser("eval")  # eval's docstring: "... with a 95% interval."
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for text in (sub.choices["eval"].format_help(), parser.format_help()):  # its description; its line in the list
        text = " ".join(text.split())
        assert "95% interval" in text and "%%" not in text, text


def test_train_passes_the_warm_up_share_to_the_run(monkeypatch, tmp_path, capsys):
    import agentlab.train
    import agentlab.warmup

    seen = []
    monkeypatch.setattr(agentlab.warmup, "warm_policy_path",  # which warm-up was asked for, not built
                        lambda prof, envs=None, imperfect_share=None, **kw: f"warm-{envs[0]}-{imperfect_share}")

    def no_training(cfg, policy, resume=False):  # what the command asked for, not trained
        seen.append(cfg)
        evals = [{"update": 0, "success_rate": 0.25}]
        return agentlab.train.TrainResult(policy=policy, history=[], evals=evals, out_dir=tmp_path)

    monkeypatch.setattr(agentlab.train, "train", no_training)
    monkeypatch.setattr(agentlab.train, "load_training_policy", lambda cfg: None)  # no model either
    assert main(["train", "--env", "GuessNumber", "--imperfect-share", "0.6", "--out", str(tmp_path)]) == 0
    assert main(["train", "--env", "GuessNumber", "--out", str(tmp_path)]) == 0
    # the share names the run's starting policy; without one the run loads the env's own warm-up itself
    assert [cfg.policy for cfg in seen] == ["warm-agentlab/GuessNumber-v0-0.6", None]
    assert seen[0].env_id == "agentlab/GuessNumber-v0" and "0.25" in capsys.readouterr().out


def test_demo_passes_its_quantization_to_the_run(monkeypatch, tmp_path):
    import agentlab.demo

    seen = []
    monkeypatch.setattr(agentlab.demo, "run_demo", lambda *args, **kw: seen.append(kw["quantization"]))
    for flag in ("4bit", "none", "profile"):
        assert main(["demo", "--profile", "ci", "--quantization", flag, "--out", str(tmp_path)]) == 0
    assert seen == ["4bit", None, "profile"]
    cfg = agentlab.demo.demo_config("real-cpu", policy="warm", env_id="Dialog", quantization="4bit")
    assert cfg.quantization == "4bit" and cfg.temperature == 0.8  # the real-model recipe, in 4-bit
    assert agentlab.demo.demo_config("ci", policy="warm").quantization is None  # the ci profile's, filled in


def test_demo_passes_its_learning_rate_temperature_and_questions_to_the_run(monkeypatch, tmp_path):
    import agentlab.demo

    seen = []
    monkeypatch.setattr(agentlab.demo, "run_demo",
                        lambda *args, **kw: seen.append((kw.get("lr"), kw.get("temperature"), kw.get("tasks_per_update"))))
    assert main(["demo", "--profile", "ci", "--lr", "2e-4", "--temperature", "0.9", "--tasks-per-update", "16",
                 "--out", str(tmp_path)]) == 0
    assert main(["demo", "--profile", "ci", "--out", str(tmp_path)]) == 0
    assert seen == [(2e-4, 0.9, 16), (None, None, None)]
    recipe = agentlab.demo.demo_config("real-cpu", policy="warm", env_id="WebSearch")
    wider = agentlab.demo.demo_config("real-cpu", policy="warm", env_id="WebSearch", tasks_per_update=16)
    assert (recipe.tasks_per_update, wider.tasks_per_update) == (8, 16)  # the profile's, and the flag's
    assert wider.grpo.minibatch_size == recipe.grpo.minibatch_size == 64  # the step's size stays: two steps, not one
    with pytest.raises(ValueError, match="tasks_per_update must be at least 1"):
        agentlab.demo.demo_config("ci", policy="warm", tasks_per_update=0)
    for name, recipe_temperature in (("real-cpu", 0.8), ("ci", 1.0)):  # the real-model recipe and the tiny one
        cfg = agentlab.demo.demo_config(name, policy="warm", env_id="Dialog", lr=3e-4, temperature=0.9)
        assert (cfg.lr, cfg.temperature) == (3e-4, 0.9)
        cfg = agentlab.demo.demo_config(name, policy="warm", env_id="Dialog")
        assert (cfg.lr, cfg.temperature) == (profile(name).rl_lr, recipe_temperature)  # the profile's rate, the recipe's temperature
        with pytest.raises(ValueError, match="temperature must be above 0"):  # checked where every run is resolved
            agentlab.demo.demo_config(name, policy="warm", env_id="Dialog", temperature=0)


def test_train_resume_says_where_it_starts(monkeypatch, tmp_path, capsys, tiny_path):
    Loading = stop_before_the_run(monkeypatch, tiny_path)
    for flags in (["--resume"], ["--resume", "--checkpoint-seconds", "0", "--micro-batch-tokens", "4096"]):
        with pytest.raises(Loading):
            main(["train", "--env", "GuessNumber", "--profile", "ci", "--out", str(tmp_path / "run"), *flags])
        assert f"{tmp_path / 'run'} has no checkpoint: starting from update 0" in capsys.readouterr().out
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["checkpoint_seconds"] == 0 and config["micro_batch_tokens"] == 4096


# ---------------------------------------------------------------------------- every TrainConfig field a flag

def test_train_help_lists_every_field_with_its_doc_and_default():
    from agentlab.flags import leaves
    from agentlab.train import TrainConfig

    run = agentlab("train", "--help")
    assert run.returncode == 0, run.stderr
    text = " ".join(run.stdout.split())  # argparse wraps lines anywhere
    fields = list(leaves(TrainConfig))
    assert len(fields) > 40 and {"grpo.beta", "ppo.clip_coef", "shaping.zscore", "lr"} <= {f[0] for f in fields}
    for name, _, default, doc in fields:
        assert doc, f"TrainConfig field {name} has no comment for --help to show"
        start = re.search(rf"--{re.escape(name.replace('_', '-'))}[ ,]", text).start()
        entry = text[start:start + 400]
        assert " ".join(doc.split()[:4]) in entry, (name, entry)
        assert "(default:" in entry


def stop_before_the_run(monkeypatch, tiny_path):
    """``agentlab train`` up to the point where train() has written config.json and said where it
    starts: the untrained tiny model stands in for the warm-up, and the memory preflight stops it."""
    import agentlab.train
    from agentlab.policy import load_policy

    class Stopped(Exception):
        pass

    def stop(*args):
        raise Stopped

    monkeypatch.setattr(agentlab.train, "load_training_policy", lambda cfg: load_policy(str(tiny_path)))
    monkeypatch.setattr(agentlab.train, "preflight", stop)
    return Stopped


def test_a_runs_config_json_passed_back_repeats_the_run(monkeypatch, tmp_path, tiny_path):
    from agentlab.flags import from_dict
    from agentlab.train import TrainConfig

    loading = stop_before_the_run(monkeypatch, tiny_path)
    first = tmp_path / "first"
    flags = ["--env", "Maze", "--profile", "ci", "--lr", "3e-4", "--grpo.beta", "0.1", "--grpo.clip_coef=0.3",
             "--shaping.zscore", "--difficulty", "0,1", "--horizon", "2,4", "--env-kwargs", '{"max_steps": 6}',
             "--quantization", "none", "--steps", "7", "--no-grpo.drop-zero-variance", "--grpo.advantage", "gigpo",
             "--out", str(first)]
    with pytest.raises(loading):
        main(["train", *flags])
    written = json.loads((first / "config.json").read_text())
    cfg = from_dict(TrainConfig, written)
    assert (cfg.env_id, cfg.lr, cfg.grpo.beta, cfg.grpo.clip_coef, cfg.updates) == ("agentlab/Maze-v0", 3e-4, 0.1, 0.3, 7)
    assert cfg.shaping.zscore and not cfg.grpo.drop_zero_variance and cfg.name == "maze-grpo"
    assert cfg.grpo.advantage == "gigpo"
    assert (cfg.difficulty, cfg.horizon, cfg.env_kwargs, cfg.quantization) == ([0, 1], (2, 4), {"max_steps": 6}, None)
    assert cfg.policy == str(tiny_path)  # the model the run started from, also where the profile chose it

    for again, extra in [("again", []), ("changed", ["--grpo.beta", "0.2", "--seed", "3"])]:
        with pytest.raises(loading):
            main(["train", "--config", str(first / "config.json"), "--out", str(tmp_path / again), *extra])
    repeated = json.loads((tmp_path / "again" / "config.json").read_text())
    assert {**repeated, "out_dir": None} == {**written, "out_dir": None}  # all but the folder: the same run
    changed = json.loads((tmp_path / "changed" / "config.json").read_text())
    assert (changed["grpo"]["beta"], changed["seed"], changed["lr"]) == (0.2, 3, 3e-4)  # flags win over the file


def test_train_says_what_is_wrong_with_a_config(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    for content, message in [('{"lr": "fast"}', "bad.json: lr: expected float | None, got 'fast'"),
                             ('{"grpo": {"betta": 0.1}}', "unknown field(s) ['betta'] for GRPOSettings (grpo)"),
                             ("{not json", "Expecting property name")]:
        bad.write_text(content)
        assert main(["train", "--config", str(bad)]) == 2
        assert message in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", "--grpo.beta", "high"])
    assert "invalid float value: 'high'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", "--grpo.advantage", "gigpoo"])
    assert "invalid choice: 'gigpoo'" in capsys.readouterr().err


# ---------------------------------------------------------------------------- quiet console

def test_loading_a_lora_policy_warns_of_nothing(tiny_path, caplog):
    import logging
    import warnings

    from agentlab.policy import LoraSettings, load_policy

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        load_policy(str(tiny_path), lora=LoraSettings(r=4, alpha=8))
    assert [str(w.message) for w in caught if not issubclass(w.category, DeprecationWarning)] == []
    # bitsandbytes' kernel notice (logged at import on CPUs with AVX512-BF16) is dropped; its other messages are not
    logger = logging.getLogger("bitsandbytes.backends.cpu.ops")
    with caplog.at_level(logging.WARNING, logger=logger.name):
        logger.warning("Failed to load CPU gemm_4bit_forward from kernels-community: %s. Please ...", "offline")
        logger.warning("another bitsandbytes message")
    assert [r.getMessage() for r in caplog.records] == ["another bitsandbytes message"]
