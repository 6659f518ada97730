"""The cache folder where built and warmed policies are kept, and the two ways every builder writes
into it: once at a time across processes (`build_lock`), and whole or not at all (`atomic_save`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path


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
    """Write into a temporary sibling folder, then rename: a killed build leaves nothing half-done."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}-"))
    try:
        write(tmp)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
