"""The notebook suite: wall time and pass/fail of each notebook on the ``ci`` profile.

Each notebook runs on its own under ``pytest --nbval-lax`` (the way ``make test-notebooks``
runs them all), in a child process with ``AGENTLAB_PROFILE=ci``, so one slow or failing
notebook shows up on its own row. The first notebook may also pay for building and warming
the cached tiny policy, if nothing has built it yet.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from bench.common import progress, table

ROOT = Path(__file__).resolve().parent.parent
PATTERN = "notebooks/*.ipynb"
TIMEOUT_S = 1800  # per notebook


def find_notebooks(pattern: str = PATTERN) -> list[Path]:
    """Notebooks matching ``pattern`` (relative to the repository root), in order, checkpoints left out."""
    return sorted(p for p in ROOT.glob(pattern) if ".ipynb_checkpoints" not in p.parts)


def is_summary(line: str) -> bool:
    """pytest's last line: "17 passed in 42.03s", "1 failed, 16 passed in 40.1s", "1 error in 3.2s"."""
    return " in " in line and any(word in line for word in ("passed", "failed", "error", "skipped"))


def run_notebook(path: Path, timeout_s: float = TIMEOUT_S) -> dict:
    """``pytest --nbval-lax`` on one notebook; seconds, passed, and pytest's summary line."""
    cmd = [sys.executable, "-m", "pytest", "-q", "--nbval-lax", "-p", "no:cacheprovider", str(path.relative_to(ROOT))]
    env = {**os.environ, "AGENTLAB_PROFILE": "ci"}
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)
        output, returncode = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as err:
        output, returncode = f"timed out after {timeout_s:.0f} s\n{err.stdout or ''}", -1
    seconds = time.perf_counter() - start
    lines = [line.strip("= ") for line in output.strip().splitlines() if line.strip()]
    summary = next((line for line in reversed(lines) if is_summary(line)), lines[-1] if lines else "")
    return {"notebook": path.name, "seconds": seconds, "passed": returncode == 0, "summary": summary,
            "output": output}


def run(quick: bool = False, pattern: str = PATTERN) -> str:
    """Time every notebook, and return the RESULTS.md section (``quick`` changes nothing here)."""
    notebooks = find_notebooks(pattern)
    if not notebooks:
        return f"No notebook matches `{pattern}`."
    results = []
    for path in progress(notebooks, "notebooks"):
        r = run_notebook(path)
        print(f"  {r['notebook']}: {r['seconds']:.0f} s, {'passed' if r['passed'] else 'FAILED'}", flush=True)
        results.append(r)
    total = sum(r["seconds"] for r in results)
    n_passed = sum(r["passed"] for r in results)
    rows = [[f"`{r['notebook']}`", r["seconds"], "pass" if r["passed"] else "**FAIL**", r["summary"]]
            for r in results]
    rows.append(["**total**", total, f"{n_passed}/{len(results)} passed", ""])
    body = [f"Each notebook matching `{pattern}` under `pytest --nbval-lax` with `AGENTLAB_PROFILE=ci`, one "
            "process per notebook (wall seconds, pytest start-up included).", "",
            table(["notebook", "seconds", "result", "pytest summary"], rows)]
    for r in results:
        if not r["passed"]:
            body += ["", f"End of the output of `{r['notebook']}`:", "", "```", r["output"][-3000:].strip(), "```"]
    return "\n".join(body)
