"""Write the task files ``tasks/<env>.json`` from each env's seeded generator.

    python -m agentlab.envs.build_tasks            # all envs
    python -m agentlab.envs.build_tasks GuessNumber

Splits: ``train`` (seeds from 0), ``eval`` (held out: seeds from 100_000, and no task whose
id is in train where the task space allows), ``paraphrase`` (eval tasks asked in other
words). Every difficulty level appears in every split. An env with a ``task_splits(sizes)`` method
(TextCraft, HumanEval, Wordle: real items, held out by item) writes its own splits.
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np

from agentlab.envs import ENV_IDS, env_class
from agentlab.tasks import tasks_dir, write_tasks

SIZES = {"train": 160, "eval": 80, "paraphrase": 40}  # tasks per split, spread over difficulties


def held_out_splits(env, sizes: dict[str, int]) -> dict[str, list]:
    """Splits for an env whose generator draws from train items and, with ``held=True``, from held-out
    ones (TextCraft's goal items, Wordle's secrets): every level in each split, no eval item in train."""
    def draw(n: int, held: bool, seed: int) -> list:
        levels = range(env.max_difficulty + 1)
        return [env.generate_task(np.random.default_rng(seed + i), d, held=held)
                for d in levels for i in range(n // len(levels))]

    evals = draw(sizes["eval"], True, 100_000)
    rng = np.random.default_rng(7)
    para = [dataclasses.replace(env.paraphrase(t, rng), id=t.id + "-para")
            for t in evals[:: max(1, len(evals) // sizes["paraphrase"])][: sizes["paraphrase"]]]
    return {"train": draw(sizes["train"], False, 0), "eval": evals, "paraphrase": para}


def build(env_id: str) -> dict:
    env = env_class(env_id)()
    if hasattr(env, "task_splits"):  # envs on real items (recipes, words, problems) hold out by item
        splits = env.task_splits(SIZES)
        write_tasks(tasks_dir() / f"{env.name.lower()}.json", env_id, splits)
        return {k: len(v) for k, v in splits.items()}
    levels = range(env.max_difficulty + 1)

    def draw(seed0: int, n: int, avoid: set[str]) -> list:
        tasks, seen, seed = [], set(avoid), seed0
        per_level = {d: n // len(levels) + (1 if d < n % len(levels) else 0) for d in levels}
        for d, k in per_level.items():
            tries = 0
            while k > 0:
                task = env.generate_task(np.random.default_rng(seed), d)
                seed, tries = seed + 1, tries + 1
                if task.id in seen:
                    if tries < 50 * n:  # held out where the task space allows
                        continue
                    task = dataclasses.replace(task, id=f"{task.id}-s{seed - 1}")  # a tiny space repeats
                seen.add(task.id)
                tasks.append(task)
                k -= 1
        return tasks

    train = draw(0, SIZES["train"], set())
    evals = draw(100_000, SIZES["eval"], {t.id for t in train})
    rng = np.random.default_rng(7)
    para = []
    for t in evals[:: max(1, len(evals) // SIZES["paraphrase"])][: SIZES["paraphrase"]]:
        p = env.paraphrase(t, rng)
        para.append(dataclasses.replace(p, id=t.id + "-para"))
    splits = {"train": train, "eval": evals, "paraphrase": para}
    write_tasks(tasks_dir() / f"{env.name.lower()}.json", env_id, splits)
    return {k: len(v) for k, v in splits.items()}


if __name__ == "__main__":
    wanted = sys.argv[1:] or ENV_IDS
    for name in wanted:
        env_id = name if name.startswith("agentlab/") else f"agentlab/{name}-v0"
        print(env_id, build(env_id))
