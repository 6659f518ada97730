"""The cache folder where built and warmed policies are kept, and the ways every builder writes into
it and reads it back: once at a time across processes (`build_lock`), whole or not at all
(`atomic_save`, which lists the files in a manifest last), and only when whole (`reusable`, which
checks that manifest and removes a folder that fails it, so that the builder writes it anew).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

MANIFEST = "manifest.json"
# Files up to this size are checked by digest on every load (the tiny policy and its warm-ups, a few
# MB: milliseconds); bigger ones, a real model's weights, by size alone, since hashing 2.5 GB of
# Qwen2.5-Coder-0.5B takes seconds at every load. Size catches the usual damage, a truncated file.
HASH_LIMIT = 64 * 2**20


def cache_dir() -> Path:
    """``AGENTLAB_CACHE`` or ``~/.cache/agentlab``."""
    env = os.environ.get("AGENTLAB_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "agentlab"


@contextlib.contextmanager
def build_lock(out: Path):
    """Hold an exclusive lock on building ``out``, so that processes started together (``accelerate
    launch``, two notebooks) build a cached model once: the others wait, then find it built."""
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks; a concurrent build there is only wasted work
        yield
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def atomic_save(out: Path, write) -> None:
    """Write into a temporary sibling folder, list its files in ``manifest.json``, then rename: a killed
    or failed write (a full disk included) leaves nothing half-done, and a folder already at ``out``
    is replaced only by a whole one."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}-"))
    try:
        try:
            write(tmp)
            write_manifest(tmp)  # last: a folder with a manifest was written whole
        except OSError as err:
            if err.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            raise OSError(err.errno, f"could not write {out} ({os.strerror(err.errno)}): the partial copy was "
                                     f"removed, and {out.name}, if it existed, is as it was") from err
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(folder: Path) -> None:
    """List every file under ``folder`` with its size, and its sha256 up to `HASH_LIMIT`."""
    files = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST):
        entry = {"size": path.stat().st_size}
        if entry["size"] <= HASH_LIMIT:
            entry["sha256"] = _sha256(path)
        files[path.relative_to(folder).as_posix()] = entry
    (folder / MANIFEST).write_text(json.dumps({"files": files}, indent=1))


def manifest_problem(folder: Path) -> str | None:
    """What is wrong with ``folder`` as `atomic_save` wrote it, or None when every file its manifest
    lists is there, at its size and (up to `HASH_LIMIT`) its digest."""
    if not folder.is_dir():
        return "it does not exist"
    try:
        files = json.loads((folder / MANIFEST).read_text())["files"]
    except FileNotFoundError:
        return f"it has no {MANIFEST} (written before caches had one, or cut short)"
    except (ValueError, KeyError, TypeError) as err:
        return f"its {MANIFEST} cannot be read ({type(err).__name__}: {err})"
    for name, want in files.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if (size := path.stat().st_size) != want["size"]:
            return f"{name} is {size} bytes, the manifest says {want['size']}"
        if "sha256" in want and _sha256(path) != want["sha256"]:
            return f"{name} has changed since it was written (its sha256 differs from the manifest's)"
    return None


def reusable(out: Path, what: str) -> bool:
    """Whether the cached folder ``out`` may be loaded. One that is there but not whole is removed,
    with a message saying what was wrong, and False tells the caller to build it again. Call it
    holding `build_lock` (out), lest it remove a folder that another process has just built."""
    if not out.exists():
        return False
    problem = manifest_problem(out)
    if problem is None:
        return True
    print(f"{what} in {out} is not whole: {problem}. Building it again.")
    shutil.rmtree(out)
    return False
