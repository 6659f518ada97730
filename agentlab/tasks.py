"""Tasks and task files.

A task file ``tasks/<env>.json`` holds the tasks of one environment family in splits:

    {"env": "agentlab/GuessNumber-v0",
     "splits": {"train": [TASK, ...], "eval": [...], "paraphrase": [...]}}

and each TASK is

    {"id": "guess-e-0001", "type": "guess", "query": "Find the hidden number ...",
     "answer": 11, "tools": ["guess"], "max_steps": 6,
     "reward_weights": {"correct": 1.0}, "difficulty": 0, "data": {...}}

``data`` holds what the environment needs beyond the common fields (a maze's grid, a
database seed, hidden tests). `load_tasks` validates every entry and names the file, the
entry and the field when something is wrong.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SPLITS = ("train", "eval", "paraphrase")
REQUIRED = {"id": str, "type": str, "query": str}
OPTIONAL = {
    "answer": object,
    "tools": list,
    "max_steps": int,
    "reward_weights": dict,
    "difficulty": int,
    "data": dict,
}


class TaskFileError(ValueError):
    """A task file or task entry that cannot be used; the message names where and why."""


@dataclass
class Task:
    """One task: what the agent is asked, the checkable answer, and the env-specific data."""

    id: str
    type: str
    query: str
    answer: Any = None
    tools: list[str] = field(default_factory=list)
    max_steps: int | None = None
    reward_weights: dict[str, float] = field(default_factory=dict)
    difficulty: int = 0
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict, where: str = "task") -> "Task":
        return cls(**validate_task(d, where))


def validate_task(d: Any, where: str = "task") -> dict:
    """Check one task entry; return it with defaults filled in. ``where`` prefixes errors."""
    if not isinstance(d, dict):
        raise TaskFileError(f"{where}: expected an object, got {type(d).__name__}")
    label = f"{where} (id {d['id']!r})" if isinstance(d.get("id"), str) else where
    for name, typ in REQUIRED.items():
        if name not in d:
            raise TaskFileError(f"{label}: missing required field {name!r}")
        if not isinstance(d[name], typ) or not d[name].strip():
            raise TaskFileError(f"{label}: field {name!r} must be a non-empty {typ.__name__}")
    unknown = set(d) - set(REQUIRED) - set(OPTIONAL)
    if unknown:
        raise TaskFileError(f"{label}: unknown field(s) {sorted(unknown)}; allowed: {sorted({**REQUIRED, **OPTIONAL})}")
    out = dict(d)
    for name, typ in OPTIONAL.items():
        if name in d and d[name] is not None and not isinstance(d[name], typ):
            raise TaskFileError(f"{label}: field {name!r} must be {typ.__name__}, got {type(d[name]).__name__}")
    if "max_steps" in d and d["max_steps"] is not None and (isinstance(d["max_steps"], bool) or d["max_steps"] < 1):
        raise TaskFileError(f"{label}: field 'max_steps' must be a positive integer, got {d['max_steps']!r}")
    for k, v in (d.get("reward_weights") or {}).items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
            raise TaskFileError(f"{label}: reward_weights[{k!r}] must be a number, got {v!r}")
    if not all(isinstance(t, str) for t in d.get("tools") or []):
        raise TaskFileError(f"{label}: field 'tools' must be a list of tool names")
    return out


def tasks_dir() -> Path:
    """The folder of task files: ``AGENTLAB_TASKS`` or the repository's ``tasks/``."""
    env = os.environ.get("AGENTLAB_TASKS")
    return Path(env) if env else Path(__file__).resolve().parent.parent / "tasks"


def load_tasks(path: str | os.PathLike, split: str = "train") -> list[Task]:
    """Load and validate the tasks of one split of a task file."""
    path = Path(path)
    if not path.exists():
        raise TaskFileError(f"{path}: task file not found (set AGENTLAB_TASKS to the folder that holds it)")
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise TaskFileError(f"{path}: not valid JSON: {err.msg} at line {err.lineno}, column {err.colno}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("splits"), dict):
        raise TaskFileError(f"{path}: expected an object with a 'splits' object ({', '.join(SPLITS)})")
    if split not in doc["splits"]:
        raise TaskFileError(f"{path}: no split {split!r}; the file has {sorted(doc['splits'])}")
    entries = doc["splits"][split]
    if not isinstance(entries, list) or not entries:
        raise TaskFileError(f"{path}: split {split!r} must be a non-empty list of tasks")
    tasks, seen = [], set()
    for i, entry in enumerate(entries):
        task = Task.from_dict(entry, where=f"{path}: {split}[{i}]")
        if task.id in seen:
            raise TaskFileError(f"{path}: {split}[{i}]: duplicate task id {task.id!r}")
        seen.add(task.id)
        tasks.append(task)
    return tasks


def write_tasks(path: str | os.PathLike, env_id: str, splits: dict[str, list[Task]]) -> None:
    """Write a task file (used by ``python -m agentlab.envs.build_tasks``)."""
    doc = {"env": env_id, "splits": {name: [t.to_dict() for t in tasks] for name, tasks in splits.items()}}
    Path(path).write_text(json.dumps(doc, indent=1) + "\n")
