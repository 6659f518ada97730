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


def test_the_course_on_a_profile_writes_a_row_per_notebook_and_resumes(tmp_path, monkeypatch):
    """`make course PROFILE=...`: each notebook's row is written as it finishes, on the profile asked for,
    and a resumed run skips the notebooks the file already holds (and runs a failed one again when asked)."""
    import json

    import bench.notebooks as course

    ran = []

    def fake(path, timeout_s, profile):
        ran.append(path.name)
        return {"notebook": path.name, "profile": profile, "seconds": 60.0, "passed": path.name != "01_b.ipynb",
                "summary": "1 failed" if path.name == "01_b.ipynb" else "3 passed", "output": "x" * 5000}

    books = [tmp_path / name for name in ("00_a.ipynb", "01_b.ipynb", "02_c.ipynb")]
    monkeypatch.setattr(course, "find_notebooks", lambda pattern: books)
    monkeypatch.setattr(course, "run_notebook", fake)
    out = tmp_path / "course-cpu.jsonl"
    monkeypatch.setattr(course, "find_notebooks", lambda pattern: books[:2])  # stopped after two notebooks
    course.run(profile="cpu", out=str(out))
    monkeypatch.setattr(course, "find_notebooks", lambda pattern: books)
    text = course.run(profile="cpu", out=str(out), resume=True)
    assert ran == ["00_a.ipynb", "01_b.ipynb", "02_c.ipynb"]  # none twice
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["notebook"] for r in rows] == ran and {r["profile"] for r in rows} == {"cpu"}
    assert all(len(r["output"]) <= 3000 for r in rows)
    assert {r["commit"] for r in rows} == {course.git_revision()}  # this checkout's, in every row
    assert "AGENTLAB_PROFILE=cpu" in text and "2/3 passed" in text and "**FAIL**" in text
    course.run(profile="cpu", out=str(out), resume=True, retry_failed=True)  # only the failed one again
    assert ran[3:] == ["01_b.ipynb"] and len(out.read_text().splitlines()) == 4
    course.run(profile="cpu", out=str(out))  # without resume the file starts over
    assert len(out.read_text().splitlines()) == 3 and len(ran) == 7


def test_phase_limits_match_hand_arithmetic():
    """bench.phases: a pass's FLOP, a decode step's FLOP and bytes, and which of the two sets the limit."""
    from bench.phases import bound_by, decode_step_work, limit_s, pass_flops

    assert pass_flops(1000, 200, tokens=50, scored=10) == 2 * (1000 * 50 + 200 * 10) == 104_000
    flops, nbytes = decode_step_work(1000, 200, weight_bytes=4800, kv_bytes=64, rows=4, attended=100)
    assert (flops, nbytes) == (2 * 1200 * 4, 4800 + 64 * 100) == (9600, 11_200)
    # SmolLM2-sized: 135 M float32 weights, 8 rows, 20 GB/s and 100 GFLOP/s: reading 540 MB takes 27 ms,
    # the 2.16 GFLOP 21.6 ms, so a decode step is bound by memory at 27 ms
    flops, nbytes = decode_step_work(107_000_000, 28_000_000, 540_000_000, kv_bytes=0, rows=8, attended=0)
    assert flops == 2.16e9 and abs(limit_s(flops, nbytes, 100.0, 20.0) - 0.027) < 1e-12
    assert bound_by(flops, nbytes, 100.0, 20.0) == "memory"
    # a scoring pass of 4,096 tokens through the same body, 512 scored: 0.905 TFLOP, 9.05 s at 100 GFLOP/s
    flops = pass_flops(107_000_000, 28_000_000, 4096, 512)
    assert flops == 2 * (107e6 * 4096 + 28e6 * 512) and abs(limit_s(flops, 0, 100.0, 20.0) - 9.05216) < 1e-9
    assert bound_by(flops, 540e6, 100.0, 20.0) == "compute"


def test_phase_tokens_count_a_shared_prompt_once():
    """A scoring pass reads a group's shared prompt once when the policy shares prompts (as `Policy.score`)."""
    from types import SimpleNamespace

    import torch

    from bench.phases import tokens_read

    ids = torch.tensor([[1, 2, 3, 4, 5, 6], [1, 2, 3, 7, 8, 0], [9, 2, 3, 4, 5, 6]])  # rows 0 and 1 share [1, 2]
    attn = torch.tensor([[1] * 6, [1] * 5 + [0], [1] * 6])
    only = torch.tensor([[0, 0, 1, 1, 1], [0, 0, 1, 1, 0], [0, 0, 1, 1, 1]])  # scoring starts at position 2
    assert tokens_read(SimpleNamespace(share_prompts=False), ids, attn, only) == 17
    assert tokens_read(SimpleNamespace(share_prompts=True), ids, attn, only) == 2 + 2 + 4 + 3 + 4 == 15


def test_phases_bench_runs_on_the_tiny_policy(tmp_path):
    """`python -m bench.phases --model tiny --quick` end to end: a row per phase, each against a limit
    that the model's sizes (checked against its config) and the measured machine give."""
    import json

    from bench.phases import run

    out = tmp_path / "phases.jsonl"
    text = run(quick=True, model="tiny", json_path=str(out))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["phase"][:2] for r in rows] == ["1.", "1b", "2.", "3.", "4."]
    for r in rows:
        assert r["phase"] in text and r["s"] > 0 and r["limit_s"] > 0
        assert abs(r["ratio"] - r["s"] / r["limit_s"]) < 1e-9 and r["goal_met"] == (r["ratio"] <= 1.5)
    # the tiny config: hidden 96, intermediate 256, 3 layers of 4 heads (4 for K and V) of 24, vocabulary 1024, tied
    layer = 4 * 96 * 96 + 3 * 96 * 256 + 2 * 96  # attention, MLP, two norms
    lora = 8 * (4 * (96 + 96) + 2 * (96 + 256) + (256 + 96))  # r=8 on q, k, v, o, gate, up, down
    r = rows[0]
    assert (r["n_body"] - r["n_lora"], r["n_lora"], r["n_head"]) == (3 * layer + 96, 3 * lora, 1024 * 96)
    assert r["weight_bytes"] == 4 * (r["n_body"] + r["n_head"]) and r["kv_bytes"] == 2 * 3 * 4 * 24 * 4
    assert r["gbps"] > 0 and r["gflops"] > 0 and r["threads"] >= 1
    # in micro-batches, as a run's preflight plans them: the same passes over the same tokens, cut smaller
    split = tmp_path / "split.jsonl"
    text = run(quick=True, model="tiny", json_path=str(split), micro_batch_tokens=200)
    parts = [json.loads(line) for line in split.read_text().splitlines()]
    assert "micro-batches of at most 200 tokens" in text and all(p["micro_batch_tokens"] == 200 for p in parts)
    assert [p["work"] for p in parts[2:]] == [r["work"] for r in rows[2:]]  # phases 2-4: tokens, scored, FLOP


def test_gradient_ab_runs_each_arm_inside_its_context_interleaved():
    """`bench.phases.gradient_ab` (behind bench.entropy_ab and bench.malloc_ab) on the tiny policy: each repeat
    runs every arm once, in order, inside that arm's context, and reports what the pass cost."""
    import contextlib

    from bench.phases import gradient_ab

    entered = []

    def arm(name):
        @contextlib.contextmanager
        def context():
            entered.append(name)
            yield
        return context

    rows = gradient_ab({"A": arm("A"), "B": arm("B")}, repeats=2, model_name="tiny", quick=True)
    assert entered == ["A", "B", "A", "B"] and [(r["arm"], r["repeat"]) for r in rows] == [
        ("A", 0), ("B", 0), ("A", 1), ("B", 1)]
    for r in rows:
        assert r["forward_s"] > 0 and r["backward_s"] > 0 and r["user_s"] > 0 and r["peak_rss"] > 0
