"""WebSearch-v0: the S5 constraint, useful-only process rewards (S8), ranking, the shortcut (S18)."""

import json

import numpy as np
import pytest

import agentlab
from agentlab.envs.websearch import CHAINS, LANGUAGES, WebSearchEnv
from agentlab.evaluate import run_expert
from agentlab.tasks import load_tasks


def task(difficulty=0, seed=0, kind=None):
    """A generated task, optionally the first one of a given kind."""
    env = WebSearchEnv()
    for s in range(seed, seed + 500):
        t = env.generate_task(np.random.default_rng(s), difficulty)
        if kind is None or t.data["kind"] == kind:
            return t
    raise AssertionError(f"no {kind} task")


def started(t, **kwargs):
    env = agentlab.make("WebSearch", **kwargs)
    env.reset(seed=0, options={"task": t})
    return env


def distractor(t):
    """A document the question does not need."""
    return next(d for d in t.data["docs"] if d["id"] not in {h["doc"] for h in t.data["hops"]})


def test_finish_is_refused_until_a_search_and_a_read():
    t = task(0)
    env = started(t)
    hop = t.data["hops"][0]
    obs, reward, term, trunc, info = env.step(f"finish({t.answer})")
    assert "Not allowed now" in obs and not info["valid"] and not term
    assert info["reward_components"] == {"format": -0.1}
    env.step(f"search({hop['entity']})")
    obs, _, term, _, info = env.step(f"finish({t.answer})")  # a search alone is not enough
    assert "Not allowed now" in obs and not term
    env.step(f"read({hop['doc']})")
    _, reward, term, _, info = env.step(f"finish({t.answer})")
    assert term and info["success"] and info["valid"] and reward == 1.0


def test_without_the_constraint_a_guess_can_finish_at_once():
    t = task(0)
    env = started(t, require_evidence=False)
    _, reward, term, _, info = env.step(f"finish({t.answer})")
    assert term and info["success"] and reward == 1.0
    env = started(t, require_evidence=False)
    _, reward, term, _, info = env.step("finish(Nowhere)")
    assert term and not info["success"] and info["reward_components"] == {"wrong": -0.2}


def test_the_shortcut_is_tempting_at_low_difficulty():
    """Guessing one language wins about 1/3 of level-0 language questions, 1/6 at level 3."""
    env = WebSearchEnv(require_evidence=False)
    for difficulty, lo, hi in [(0, 0.22, 0.45), (3, 0.08, 0.25)]:
        wins = n = 0
        for s in range(600):
            t = env.generate_task(np.random.default_rng(s), difficulty)
            if CHAINS[t.data["kind"]][1] != "language":
                continue
            env.reset(seed=0, options={"task": t})
            wins += env.step(f"finish({LANGUAGES[0]})")[4]["success"]
            n += 1
        assert n > 20 and lo <= wins / n <= hi, (difficulty, wins, n)


def test_the_expert_query_ranks_the_needed_document_first():
    env = WebSearchEnv()
    for t in load_tasks(WebSearchEnv.task_file(), "eval"):
        env.reset(seed=0, options={"task": t})
        for hop in t.data["hops"]:
            ranked = env.rank(hop["entity"])
            assert ranked[0] == (hop["doc"], 1.0), (t.id, hop, ranked[:3])
            assert ranked[1][1] < 1.0
    assert env.rank("the of what") == []  # stop words only: nothing to match


def test_relevance_counts_title_words_fully_and_body_words_half():
    t = task(2, kind="birth_capital")
    env = started(t)
    person, country = t.data["hops"]
    scores = dict(env.rank(country["entity"]))
    assert scores[country["doc"]] == 1.0
    assert scores[person["doc"]] == pytest.approx(0.5)  # "born in <country>" is in its body
    assert all(0.0 <= s <= 1.0 for s in scores.values())


def test_search_pays_only_when_it_finds_a_needed_document_and_only_once():
    t = task(1)
    env = started(t)
    hop = t.data["hops"][0]
    _, r, _, _, info = env.step("search(zzqx unrelated words)")
    assert r == 0.0 and info["checks"] == {"search_hit": False} and info["valid"]
    _, r, _, _, info = env.step(f"search({distractor(t)['title']})")
    assert info["reward_components"]["search_valid"] == 0.0 and not info["checks"]["search_hit"]
    _, r, _, _, info = env.step(f"search({hop['entity']})")
    assert info["reward_components"] == {"search_valid": 0.2} and info["checks"]["search_hit"]
    _, r, _, _, info = env.step(f"search(who is {hop['entity']})")  # found again: no second payment
    assert info["reward_components"]["search_valid"] == 0.0 and info["checks"]["search_hit"]


def test_read_pays_only_for_a_needed_document_and_only_once():
    t = task(2)
    env = started(t)
    hop = t.data["hops"][0]
    env.step(f"search({hop['entity']})")
    _, r, _, _, info = env.step(f"read({distractor(t)['id']})")
    assert r == 0.0 and info["checks"] == {"read_after_search": False}
    _, r, _, _, info = env.step(f"read({hop['doc']})")
    assert r == 0.3 and info["checks"] == {"read_after_search": False}  # useful, but a read came before
    env.step(f"search({hop['entity']})")
    _, r, _, _, info = env.step(f"read([{hop['doc'].upper()}])")  # brackets and case are tolerated
    assert info["valid"] and r == 0.0 and info["checks"] == {"read_after_search": True}


def test_a_repeated_action_is_penalised():
    t = task(0)
    env = started(t)
    query = f"search({t.data['hops'][0]['entity']})"
    _, r1, _, _, _ = env.step(query)
    _, r2, _, _, info = env.step(query)
    assert r1 == 0.2 and info["reward_components"] == {"search_valid": 0.0, "repeat": -0.05} and r2 == -0.05


def test_bad_arguments_are_invalid_not_errors():
    env = started(task(0), require_evidence=False)
    for action in ["read(d1000)", "read()", "search(   )", "finish( )", "search(" + "x" * 3000 + ")"]:
        obs, r, term, trunc, info = env.step(action)
        if action.startswith("search(x"):
            assert info["valid"] and "No results" in obs
            continue
        assert not info["valid"] and "Invalid action" in obs and r == -0.1 and not term


def test_multi_hop_tasks_need_every_hop():
    for difficulty, hops in [(0, 1), (1, 1), (2, 2), (3, 3)]:
        t = task(difficulty, seed=11)
        assert len(t.data["hops"]) == hops == len(CHAINS[t.data["kind"]][0])
        docs = {d["id"]: d for d in t.data["docs"]}
        last = docs[t.data["hops"][-1]["doc"]]
        assert t.answer in last["text"]
        if hops > 1:
            assert t.answer not in docs[t.data["hops"][0]["doc"]]["text"]
        # each hop's document names the next hop's entity
        for a, b in zip(t.data["hops"], t.data["hops"][1:]):
            assert b["entity"] in docs[a["doc"]]["text"]


def test_level_0_observations_are_short():
    t = task(0)
    env = agentlab.make("WebSearch")
    obs, _ = env.reset(seed=0, options={"task": t})
    assert len(obs) < 60
    hits, _, _, _, _ = env.step(f"search({t.query})")
    assert len(hits.splitlines()) <= 4 and len(hits) < 120
    text, _, _, _, _ = env.step(f"read({t.data['hops'][0]['doc']})")
    assert len(text) < 130


def test_generation_is_deterministic_and_varied():
    env = WebSearchEnv()
    for d in range(4):
        a = env.generate_task(np.random.default_rng(5), d)
        b = env.generate_task(np.random.default_rng(5), d)
        c = env.generate_task(np.random.default_rng(6), d)
        assert a == b and a.id != c.id and a.difficulty == d


def test_imperfect_demonstrator_is_valid_and_biased():
    """It answers with the first fact of the last document read: right exactly on the questions
    that ask for that fact (systematic, not random)."""
    tasks = load_tasks(WebSearchEnv.task_file(), "eval")
    played = run_expert("agentlab/WebSearch-v0", tasks=tasks, biased=True)
    assert played.invalid_rate == 0.0
    for t, traj in zip(tasks, played.trajectories, strict=True):
        assert traj.success == (CHAINS[t.data["kind"]][1] in ("capital", "occupation", "industry")), t.id
    assert 0.2 < played.success_rate < 0.8


def test_paraphrase_keeps_the_entity_and_the_answer():
    env = WebSearchEnv()
    for d in range(4):
        t = task(d, seed=3)
        p = env.paraphrase(t, np.random.default_rng(0))
        assert p.query != t.query and t.data["hops"][0]["entity"] in p.query
        assert p.answer == t.answer and p.data == t.data


def test_task_file_is_ascii_small_and_held_out():
    path = WebSearchEnv.task_file()
    raw = open(path, "rb").read()
    assert len(raw) < 2_000_000
    raw.decode("ascii")
    doc = json.loads(raw)
    assert doc["env"] == "agentlab/WebSearch-v0"
    levels = {t["difficulty"] for t in doc["splits"]["eval"]}
    assert levels == {0, 1, 2, 3}
