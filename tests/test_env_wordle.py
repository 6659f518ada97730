"""Wordle-v0: feedback against the package's own rule, the lists, one game's rewards, the expert, the splits."""

import numpy as np
import pytest

from agentlab.envs.wordle import (GUESS_KINDS, OPENER, WordleEnv, allowed, answers, codes, consistent, feedback,
                                  guess_kinds, held_out, most_informative)
from agentlab.tasks import Task, load_tasks

MARK = {0: "-", 1: "?", 2: "+"}


def task_for(secret: str, difficulty: int = 3, listed=None) -> Task:
    return Task(id=f"w-{secret}", type="wordle", query="Find the word.", answer=secret, max_steps=8,
                difficulty=difficulty, data={"listed": listed})


def test_feedback_matches_the_packages_rule_and_the_vectorised_one():
    from wordle.core.gameplay import get_result

    rng = np.random.default_rng(0)
    words, secrets = sorted(allowed()), answers()
    pairs = [(words[rng.integers(len(words))], secrets[rng.integers(len(secrets))]) for _ in range(2000)]
    pairs += [("speed", "abide"), ("eerie", "there"), ("llama", "hello")]  # repeated letters
    for guess, secret in pairs:
        theirs = "".join(MARK[r.value] for r in get_result(guess, secret))
        assert feedback(guess, secret) == theirs, (guess, secret)
    for guess, _ in pairs[:10]:  # one guess against many words at once, as the expert does it
        expected = [sum({"-": 0, "?": 1, "+": 2}[m] * 3 ** i for i, m in enumerate(feedback(guess, s))) for s in secrets]
        assert codes(guess, secrets).tolist() == expected


def test_the_lists_are_the_packages():
    assert len(answers()) == 2315 and len(allowed()) == 9330 and set(answers()) <= allowed()
    assert all(len(w) == 5 and w.isalpha() for w in allowed())


def test_a_game_pays_letters_placed_once_and_the_solution():
    env = WordleEnv()
    env.reset(seed=0, options={"task": task_for("crane")})
    obs, r, term, _, info = env.step("guess(trace)")  # t- r+ a+ c? e+
    assert obs.startswith("trace: t- r+ a+ c? e+") and r == pytest.approx(0.12) and not term
    obs, r, _, _, info = env.step("guess(brace)")  # no new letter placed; c where trace showed it is not
    assert r == 0.0 and not info["checks"]["consistent"]
    obs, r, term, _, info = env.step("guess(Crane)")
    assert term and info["success"] and r == pytest.approx(1.0 + 0.08) and "Solved in 3" in obs


@pytest.mark.parametrize("action", ["guess(crate s)", "guess(abcde)", "guess(cranes)", "guess()"])
def test_non_words_are_invalid_and_do_not_use_up_a_guess(action):
    env = WordleEnv()
    env.reset(seed=0, options={"task": task_for("crane")})
    obs, reward, _, _, info = env.step(action)
    assert not info["valid"] and reward < 0 and obs.startswith("Invalid action")
    obs, *_ = env.step("guess(trace)")
    assert "5 guesses left" in obs


def test_six_wrong_guesses_end_the_game():
    env = WordleEnv()
    env.reset(seed=0, options={"task": task_for("crane")})
    for i, word in enumerate(["trace", "brace", "grace", "space", "place", "peace"]):
        _, _, term, trunc, info = env.step(f"guess({word})")
        assert term == (i == 5) and not trunc
    assert not info["success"] and "the word was crane" in env.history[-1][1]


def test_listed_levels_show_what_is_still_possible():
    env = WordleEnv()
    task = env.generate_task(np.random.default_rng(3), 1)
    listed, secret = task.data["listed"], task.answer
    assert len(listed) == 20 and secret in listed and f"one of: {', '.join(listed)}" in task.query
    env.reset(seed=0, options={"task": task})
    guess = next(w for w in listed if w != secret)
    obs, *_ = env.step(f"guess({guess})")
    still = obs.split("Still possible: ")[1].rstrip(".").split(", ")
    assert secret in still and guess not in still and set(still) == set(consistent(listed, env.board))


def test_the_expert_keeps_to_consistent_words_and_solves_held_out_words():
    env = WordleEnv()
    secrets = [w for w in answers() if held_out(w)][::8]  # every 8th held-out answer
    turns = []
    for secret in secrets:
        env.reset(seed=0, options={"task": task_for(secret)})
        while True:
            _, _, term, _, info = env.step(env.expert_action())
            assert info["checks"]["consistent"]
            if term:
                break
        turns.append(len(env.board) if info["success"] else 7)
    assert np.mean([t <= 6 for t in turns]) >= 0.98 and np.mean(turns) < 4.0


def test_most_informative_prefers_the_guess_that_splits_most():
    # "crane" tells the other three apart; "brane" (not an answer, but fine here) would not matter.
    words = ["crane", "crate", "craze", "grace"]
    best = most_informative(words)
    groups = {w: len(set(codes(w, tuple(words)))) for w in words}
    assert groups[best] == max(groups.values())
    assert OPENER in answers()


def test_secrets_are_held_out_and_the_careless_player_ignores_yellow():
    env = WordleEnv()
    train = {t.answer for t in load_tasks(env.task_file(), "train")}
    evals = {t.answer for t in load_tasks(env.task_file(), "eval")}
    assert evals and not train & evals and all(held_out(w) for w in evals)
    drawn = [env.generate_task(np.random.default_rng(s), s % 4) for s in range(200)]
    assert not any(held_out(t.answer) for t in drawn)
    assert not any(held_out(w) for t in drawn for w in t.data["listed"] or [])
    env.reset(seed=0, options={"task": task_for("crane")})
    env.step(env.imperfect_action(np.random.default_rng(0)))  # opens like the expert: trace
    careless = env.imperfect_action(np.random.default_rng(0))[6:-1]
    # trace: r, a and e in place, c elsewhere: the careless player keeps the three and ignores the c
    assert careless == next(w for w in answers() if w[1:3] == "ra" and w[4] == "e" and w != "trace")


def test_guess_kinds_sorts_each_guess_by_what_the_task_lists():
    from agentlab.rollout import Trajectory

    env = WordleEnv()
    task = env.generate_task(np.random.default_rng(0), 0)
    listed = task.data["listed"]
    other = next(w for w in sorted(allowed()) if w not in listed)
    traj = Trajectory(env_id="agentlab/Wordle-v0", task_id=task.id,
                      actions=[f"guess({listed[0]})", f"guess( {listed[0].upper()} )", f"guess({other})", "guess(bll)",
                               "I think it is crane"])
    kinds = guess_kinds([traj], [task])
    assert [kinds[k] for k in GUESS_KINDS] == [0.4, 0.2, 0.4]
    assert kinds["distinct guesses"] == 4 / 5  # the listed word twice, written two ways
