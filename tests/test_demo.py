"""`agentlab demo` writes the JSON of docs/design.md, a plot and a report (a short run)."""

import json

from agentlab.demo import DEMO_ENV, LAZY_SHARE, run_demo
from agentlab.profiles import profile
from agentlab.warmup import warm_policy_path


def test_demo_writes_the_contract(tmp_path, capsys):
    path = tmp_path / "demo.json"
    summary = run_demo("ci", str(path), str(tmp_path / "demo"), updates=2)
    doc = json.loads(path.read_text())
    assert doc == json.loads(json.dumps(summary))
    assert {"env", "algo", "profile", "seconds", "eval_episodes", "before", "after"} <= set(doc)
    assert doc["env"] == "agentlab/GuessNumber-v0" and doc["algo"] == "grpo" and doc["profile"] == "ci"
    assert doc["lr"] == profile("ci").rl_lr and doc["quantization"] is None  # what the run used: the profile's
    assert doc["temperature"] == 1.0  # the tiny demo's sampling temperature
    for side in ("before", "after"):
        rate = doc[side]["success_rate"]
        lo, hi = doc[side]["success_ci95"]
        assert 0.0 <= lo <= rate <= hi <= 1.0
    assert doc["updates"] == 2 and (tmp_path / "demo" / "demo.png").stat().st_size > 1000
    config = json.loads((tmp_path / "demo" / "config.json").read_text())
    lazy = warm_policy_path(profile("ci"), envs=[DEMO_ENV], progress=False, imperfect_share=LAZY_SHARE)
    assert config["policy"] == str(lazy)  # the run starts from the demo's lazier warm-up
    out = capsys.readouterr().out
    assert "greedy success" in out and "guess(" in out
