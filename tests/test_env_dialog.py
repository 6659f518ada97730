"""Dialog-v0: useful vs needless questions, slot matching, the act-on-a-guess shortcut."""

import json

import numpy as np

import agentlab
from agentlab.envs.dialog import DOMAINS, LEVELS, DialogEnv
from agentlab.evaluate import run_expert
from agentlab.tasks import load_tasks


def task(difficulty=0, seed=0, domain=None, missing=None):
    """A generated task, optionally the first one in a domain / with a given missing slot."""
    env = DialogEnv()
    for s in range(seed, seed + 2000):
        t = env.generate_task(np.random.default_rng(s), difficulty)
        if (domain is None or t.data["domain"] == domain) and (missing is None or missing in t.data["missing"]):
            return t
    raise AssertionError("no such task")


def started(t):
    env = agentlab.make("Dialog")
    obs, _ = env.reset(seed=0, options={"task": t})
    return env, obs


def act_string(t, **override):
    return "act(" + ", ".join(f"{s}={override.get(s, t.answer[s])}" for s in t.data["slots"]) + ")"


def test_levels_match_the_table():
    for d, (n_stated, n_missing, n_values, distract, steps) in LEVELS.items():
        for seed in range(20):
            t = task(d, seed=seed)
            assert len(t.data["stated"]) == n_stated and len(t.data["missing"]) == n_missing
            assert t.max_steps == steps
            for s in t.data["missing"]:
                assert len(t.data["values"][s]) == n_values and t.answer[s] in t.data["values"][s]
            for s in t.data["stated"]:
                assert DOMAINS[t.data["domain"]]["slots"][s]["say"].format(v=t.answer[s]) in t.query
            if distract:
                dis = t.data["distractor"]
                assert dis["slot"] in t.data["missing"] and dis["value"] != t.answer[dis["slot"]]
                assert "Last time" in t.query
            else:
                assert t.data["distractor"] is None


def test_the_first_observation_names_every_slot():
    t = task(2)
    _, obs = started(t)
    assert t.query in obs and ", ".join(t.data["slots"]) in obs


def test_expert_asks_exactly_the_missing_slots():
    for d in range(4):
        for seed in range(10):
            t = task(d, seed=seed)
            env, _ = started(t)
            asks, done = 0, False
            while not done:
                action = env.expert_action()
                _, r, term, trunc, info = env.step(action)
                if info["tool"] == "ask":
                    asks += 1
                    assert info["checks"] == {"useful_question": True} and r == 0.1
                done = term or trunc
            assert info["success"] and asks == len(t.data["missing"])


def test_a_question_about_a_stated_or_known_slot_is_needless():
    t = task(1)
    env, _ = started(t)
    stated, missing = t.data["stated"][0], t.data["missing"][0]
    obs, r, _, _, info = env.step(f"ask(what {stated}?)")
    assert r == -0.1 and info["reward_components"] == {"needless_question": -0.1}
    assert "already said" in obs and info["checks"] == {"useful_question": False}
    _, r, _, _, _ = env.step(f"ask(which {missing} please)")
    assert r == 0.1
    _, r, _, _, info = env.step(f"ask(what {missing}?)")  # known now
    assert r == -0.1 and not info["checks"]["useful_question"]


def test_synonyms_find_the_slot_and_unrelated_questions_get_nothing():
    t = task(2, domain="restaurant", missing="time")
    env, _ = started(t)
    obs, r, _, _, info = env.step("ask(When should I book it?)")
    assert obs == f"User: At {t.answer['time']}." and r == 0.1
    obs, r, _, _, info = env.step("ask(do you like the weather?)")
    assert obs == "User: I'm not sure what you mean." and r == 0.0 and info["valid"]
    t = task(2, domain="restaurant", missing="people")
    env, _ = started(t)
    obs, r, _, _, _ = env.step("ask(how many of you?)")
    assert t.answer["people"] in obs and r == 0.1


def test_a_domain_slot_outside_the_request_is_not_asked_for():
    t = task(0, domain="pizza")
    other = next(s for s in DOMAINS["pizza"]["slots"] if s not in t.data["slots"])
    env, _ = started(t)
    obs, r, _, _, _ = env.step(f"ask(what {other}?)")
    assert "don't mind" in obs and r == 0.0


def test_act_succeeds_only_when_every_slot_matches():
    t = task(1)
    env, _ = started(t)
    _, r, term, _, info = env.step(act_string(t).upper().replace("ACT(", "act("))  # case is ignored
    assert term and info["success"] and r == 1.0
    m = t.data["missing"][0]
    wrong = next(v for v in DOMAINS[t.data["domain"]]["slots"][m]["values"] if v != t.answer[m])
    env, _ = started(t)
    _, r, term, _, info = env.step(act_string(t, **{m: wrong}))
    assert term and not info["success"] and info["reward_components"] == {"wrong": -0.3}


def test_malformed_acts_are_invalid_and_do_not_end_the_dialogue():
    t = task(1)
    first, *rest = t.data["slots"]
    bad = [
        "act()",
        "act(" + ", ".join(f"{s}={t.answer[s]}" for s in rest) + ")",  # a slot missing
        act_string(t)[:-1] + ", colour=red)",  # unknown slot
        act_string(t)[:-1] + f", {first}={t.answer[first]})",  # a slot twice
        f"act({first})",  # no value
        "ask(   )",
        "ask(?!)",
    ]
    env, _ = started(t)
    for action in bad:
        obs, r, term, trunc, info = env.step(action)
        assert not info["valid"] and "Invalid action" in obs and r == -0.1 and not term, action
        if trunc:
            env, _ = started(t)


def test_a_repeated_question_pays_the_repeat_penalty_too():
    t = task(0)
    env, _ = started(t)
    q = f"ask(what {t.data['missing'][0]}?)"
    env.step(q)
    _, r, _, _, info = env.step(q)
    assert info["reward_components"] == {"needless_question": -0.1, "repeat": -0.05}


def test_acting_on_a_guess_wins_about_half_at_level_0_and_rarely_at_level_3():
    env = DialogEnv()
    rng = np.random.default_rng(0)
    for d, lo, hi in [(0, 0.35, 0.65), (3, 0.0, 0.02)]:
        wins = 0
        for seed in range(300):
            t = env.generate_task(np.random.default_rng(seed), d)
            env.reset(seed=0, options={"task": t})
            guess = {s: str(rng.choice(t.data["values"][s])) for s in t.data["missing"]}
            wins += env.step(act_string(t, **guess))[4]["success"]
        assert lo <= wins / 300 <= hi, (d, wins)


def test_imperfect_demonstrator_is_valid_and_biased():
    """It fills the last missing slot with that slot's first value instead of asking: it wins
    exactly when that value is the answer."""
    tasks = load_tasks(DialogEnv.task_file(), "eval")
    played = run_expert("agentlab/Dialog-v0", tasks=tasks, biased=True)
    assert played.invalid_rate == 0.0
    for t, traj in zip(tasks, played.trajectories, strict=True):
        last = t.data["missing"][-1]
        assert traj.success == (t.answer[last] == t.data["values"][last][0]), t.id
    assert 0.1 < played.success_rate < 0.7


def test_generation_is_deterministic_and_paraphrase_keeps_the_goal():
    env = DialogEnv()
    for d in range(4):
        a = env.generate_task(np.random.default_rng(9), d)
        assert a == env.generate_task(np.random.default_rng(9), d)
        p = env.paraphrase(a, np.random.default_rng(1))
        assert p.query != a.query and p.answer == a.answer
        for s in a.data["stated"]:
            assert DOMAINS[a.data["domain"]]["slots"][s]["say"].format(v=a.answer[s]) in p.query


def test_task_file_is_ascii_and_covers_every_level():
    raw = open(DialogEnv.task_file(), "rb").read()
    raw.decode("ascii")
    doc = json.loads(raw)
    assert doc["env"] == "agentlab/Dialog-v0" and len(raw) < 2_000_000
    for split in ("train", "eval", "paraphrase"):
        assert {t["difficulty"] for t in doc["splits"][split]} == {0, 1, 2, 3}
