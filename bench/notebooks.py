"""The notebook suite: wall time and pass/fail of each notebook on one profile (``ci`` by default).

Each notebook runs on its own under ``pytest --nbval-lax`` (the way ``make test-notebooks``
runs them all), in a child process with ``AGENTLAB_PROFILE`` set, so one slow or failing
notebook shows up on its own row. The first notebook may also pay for building and warming
the cached policies, if nothing has built them yet.

The whole course on another profile, one row per notebook as it finishes (``make course PROFILE=cpu``):

    python -m bench.notebooks --profile real-cpu --resume     # runs/course-real-cpu.jsonl and .md

``--resume`` keeps the notebooks already in the JSON-lines file, so a run of hours that was stopped
goes on where it stopped; ``--retry-failed`` with it runs again the notebooks whose last row failed or timed
out (the file keeps every row; the table shows each notebook's last). Each notebook run in full also leaves
its executed copy in build/executed/ (notebooks/conftest.py), from which ``make book PROFILE=...`` renders
that profile's edition.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.common import git_revision, jsonl_rows, progress, table

ROOT = Path(__file__).resolve().parent.parent
PATTERN = "notebooks/*.ipynb"
TIMEOUT_S = 1800  # per notebook, on the tiny model's profiles
REAL_TIMEOUT_S = 7200  # per notebook where every notebook trains a real model (a warm-up, then several runs)


def timeout_for(profile: str) -> float:
    """The default seconds one notebook may take on ``profile``."""
    return REAL_TIMEOUT_S if profile in ("real-cpu", "gpu") else TIMEOUT_S


def find_notebooks(pattern: str = PATTERN) -> list[Path]:
    """Notebooks matching ``pattern`` (relative to the repository root), in order, checkpoints left out."""
    return sorted(p for p in ROOT.glob(pattern) if ".ipynb_checkpoints" not in p.parts)


def is_summary(line: str) -> bool:
    """pytest's last line: "17 passed in 42.03s", "1 failed, 16 passed in 40.1s", "1 error in 3.2s"."""
    return " in " in line and any(word in line for word in ("passed", "failed", "error", "skipped"))


def run_notebook(path: Path, timeout_s: float | None = None, profile: str = "ci") -> dict:
    """``pytest --nbval-lax`` on one notebook; seconds, passed, and pytest's summary line."""
    timeout_s = timeout_s or timeout_for(profile)
    # nbval stops a cell after 2,000 s by default; a real model's training cell may need the whole notebook's time
    cmd = [sys.executable, "-m", "pytest", "-q", "--nbval-lax", f"--nbval-cell-timeout={timeout_s:.0f}", "-p",
           "no:cacheprovider", str(path.relative_to(ROOT))]
    env = {**os.environ, "AGENTLAB_PROFILE": profile}
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)
        output, returncode = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as err:
        output, returncode = f"timed out after {timeout_s:.0f} s\n{err.stdout or ''}", -1
    seconds = time.perf_counter() - start
    lines = [line.strip("= ") for line in output.strip().splitlines() if line.strip()]
    summary = next((line for line in reversed(lines) if is_summary(line)), lines[-1] if lines else "")
    return {"notebook": path.name, "profile": profile, "seconds": seconds, "passed": returncode == 0,
            "summary": summary, "output": output}


def run(quick: bool = False, pattern: str = PATTERN, profile: str = "ci", out: str | None = None,
        resume: bool = False, timeout_s: float | None = None, retry_failed: bool = False) -> str:
    """Time every notebook on ``profile`` and return the RESULTS.md section (``quick`` changes nothing here).
    ``out``: a JSON-lines file that gets each notebook's row as it finishes; ``resume`` keeps its rows and
    runs only the notebooks it lacks, and those whose last row failed too if ``retry_failed``."""
    notebooks = find_notebooks(pattern)
    if not notebooks:
        return f"No notebook matches `{pattern}`."
    path_out, done = jsonl_rows(out, resume) if out else (None, [])
    finished = {r["notebook"]: r for r in done if r.get("profile", profile) == profile}  # a notebook's last row
    if retry_failed:
        finished = {name: r for name, r in finished.items() if r["passed"]}
    results = []
    for path in progress(notebooks, f"notebooks on {profile}"):
        r = finished.get(path.name)
        if r is None:
            r = run_notebook(path, timeout_s, profile)
            if path_out is not None:
                with path_out.open("a") as f:
                    # the commit: a course run over several sessions may span changes to the notebooks
                    f.write(json.dumps({**r, "commit": git_revision(), "output": r["output"][-3000:]}) + "\n")
        print(f"  {r['notebook']}: {r['seconds']:.0f} s, {'passed' if r['passed'] else 'FAILED'}", flush=True)
        results.append(r)
    return report(results, pattern, profile)


def report(results: list[dict], pattern: str, profile: str) -> str:
    """The markdown section: one row per notebook, the total, and the end of each failed notebook's output."""
    total = sum(r["seconds"] for r in results)
    n_passed = sum(r["passed"] for r in results)
    rows = [[f"`{r['notebook']}`", r["seconds"], "pass" if r["passed"] else "**FAIL**", r["summary"]]
            for r in results]
    rows.append(["**total**", total, f"{n_passed}/{len(results)} passed", ""])
    body = [f"Each notebook matching `{pattern}` under `pytest --nbval-lax` with `AGENTLAB_PROFILE={profile}`, one "
            "process per notebook (wall seconds, pytest start-up included).", "",
            table(["notebook", "seconds", "result", "pytest summary"], rows)]
    for r in results:
        if not r["passed"]:
            body += ["", f"End of the output of `{r['notebook']}`:", "", "```", r["output"][-3000:].strip(), "```"]
    return "\n".join(body)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run every notebook on one profile; a table of pass/fail and time.")
    parser.add_argument("--profile", default="ci", choices=["ci", "cpu", "real-cpu", "gpu"])
    parser.add_argument("--notebooks", default=PATTERN, help=f"glob, relative to the repository (default {PATTERN})")
    parser.add_argument("--out", default=None, help="JSON-lines rows (default runs/course-<profile>.jsonl); "
                                                    "the table goes beside it as .md")
    parser.add_argument("--resume", action="store_true", help="keep the notebooks already in --out, run the rest")
    parser.add_argument("--retry-failed", action="store_true",
                        help="with --resume: run again the notebooks whose last row failed or timed out")
    parser.add_argument("--timeout", type=float, default=None,
                        help=f"seconds per notebook (default {TIMEOUT_S:.0f}, on real-cpu and gpu {REAL_TIMEOUT_S:.0f})")
    args = parser.parse_args(argv)
    out = Path(args.out or ROOT / "runs" / f"course-{args.profile}.jsonl")
    section = run(pattern=args.notebooks, profile=args.profile, out=str(out), resume=args.resume,
                  timeout_s=args.timeout, retry_failed=args.retry_failed)
    out.with_suffix(".md").write_text(section + "\n")
    print(section)
    print(f"\nrows: {out}; table: {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
