"""The pure parts of two benchmarks: the dtype bench's choice and the scaling bench's plot."""

from bench.dtype import choose
from bench.scaling import plot


def test_dtype_choice_skips_a_faster_variant_whose_loss_does_not_fall():
    rows = {"float32": {"losses": [1.9, 0.5], "sample_tps": 40.0, "train_tps": 250.0},
            "bfloat16 autocast": {"losses": [1.9, 1.6], "sample_tps": 80.0, "train_tps": 600.0},
            "4-bit NF4, float32 compute": {"losses": [1.9, 0.52], "sample_tps": 30.0, "train_tps": 300.0}}
    assert choose(rows) == ("float32", "4-bit NF4, float32 compute")
    assert [r["agrees"] for r in rows.values()] == [True, False, True]


def test_scaling_plot_writes_a_png(tmp_path):
    def side(s):
        return {"total_s": s, "sample_s": s / 2, "update_s": s / 2}

    rows = [{"model": "tiny", "sweep": sweep, "group": g, "turns": t, "agentlab": side(t + g), "peer": side(2 * t + g)}
            for sweep, g, t in [("turns", 8, 5), ("turns", 8, 20), ("group", 4, 10), ("group", 16, 10)]]
    path = plot(rows, tmp_path / "scaling.png")
    assert path.read_bytes()[:4] == b"\x89PNG" and path.stat().st_size > 5000


def test_humaneval_single_turn_counts_only_a_first_answer_that_passes():
    """The published protocol is one answer scored: a pass after a draft run or a refused first action
    counts for the multi-turn score only."""
    from agentlab.envs import make
    from agentlab.rollout import play
    from bench.humaneval import problems, report, row

    task = problems()[0]
    env = make("HumanEval", action_format="tool_call")
    solution = task.answer
    fenced = f"```python\n{solution}\n```"
    at_once = row(play(env, [fenced], task=task), budget=640)
    after_run = row(play(env, [f"run\n{fenced}", fenced], task=task), budget=640)
    after_refusal = row(play(env, [solution, fenced], task=task), budget=640)
    wrong = row(play(env, ["```python\ndef has_close_elements(numbers, threshold):\n    return True\n```"], task=task), 640)
    assert (at_once["single_turn"], at_once["multi_turn"], at_once["first_action"]) == (True, True, "submit")
    assert (after_run["single_turn"], after_run["multi_turn"], after_run["first_action"]) == (False, True, "run")
    assert (after_refusal["single_turn"], after_refusal["multi_turn"]) == (False, True)
    assert after_refusal["first_action"] == "invalid"
    assert not wrong["single_turn"] and not wrong["multi_turn"]
    mixed = row(play(env, [f"```python\n{solution}\nrun(code)\n```"], task=task), 640)  # the tool called in the code
    assert mixed["first_action"] == "submit" and not mixed["single_turn"]
    text = report("qwen2.5-coder-0.5b", [at_once, after_run, after_refusal, wrong, mixed], 640, 60.0)
    assert "0.200 [0.04, 0.62] (1/5)" in text and "0.600" in text and "0.616" in text
    assert "at top level: 1, of which the check passes 1" in text
