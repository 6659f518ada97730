"""Build the rendered course: ``python docs/book/build.py [--profile ci] [--out build/book]`` (``make book``).

1. Every notebook in notebooks/ must have an executed copy in build/executed/ (notebooks/conftest.py writes
   one for each notebook that nbval runs in full). A copy that is missing, older than its notebook or from
   another profile is made here by the same nbval pass `make test-notebooks` runs, on those notebooks only.
   Under `make test` they are all fresh, so nothing is executed twice.
2. The site's sources are laid out in <out>/src as they sit in the repository (so relative links keep
   working): README.md as the home page, with the table of contents appended, notebooks/README.md,
   the executed notebooks, docs/ and bench/'s two Markdown files with their images.
3. Sphinx with myst-nb renders <out>/src into <out>/html with docs/book/conf.py, execution off.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
EXECUTED = ROOT / "build" / "executed"
CHAPTERS = sorted(p for p in (ROOT / "notebooks").glob("[0-9]*.ipynb"))
# the teaching docs first, then every other page of docs/, then the benchmarks
FIRST = ["docs/syllabus.md", "docs/reading.md", "docs/capstone.md", "docs/guide.md", "docs/design.md"]
DOCS = [*FIRST, *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")
                        if str(p.relative_to(ROOT)) not in FIRST), "bench/README.md", "bench/RESULTS.md",
        "bench/NOTES.md"]
IMAGES = ["docs/images/*.png", "bench/*.png"]


def executed_profile(path: Path) -> str | None:
    return nbformat.read(path, as_version=4).metadata.get("agentlab", {}).get("profile")


def stale(notebook: Path, profile: str) -> bool:
    copy = EXECUTED / notebook.name
    return (not copy.exists() or copy.stat().st_mtime < notebook.stat().st_mtime
            or executed_profile(copy) != profile)


def execute(notebooks: list[Path], profile: str) -> None:
    """The nbval pass of `make test-notebooks` on these notebooks; its conftest writes their copies."""
    print(f"book: executing {len(notebooks)} notebook(s) on the {profile} profile: "
          + " ".join(p.stem for p in notebooks), flush=True)
    env = {**os.environ, "AGENTLAB_PROFILE": profile, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax",
           *(["-n", "2", "--dist", "loadscope", "--no-loadscope-reorder"] if len(notebooks) > 1 else []),
           *[str(p.relative_to(ROOT)) for p in notebooks]]
    if subprocess.run(cmd, cwd=ROOT, env=env).returncode:
        sys.exit("book: a notebook failed under nbval (above); the book is not built from a failed run")


def toctree(caption: str, entries: list[str]) -> str:
    return "\n```{toctree}\n:hidden:\n:caption: " + caption + "\n\n" + "\n".join(entries) + "\n```\n"


def lay_out(src: Path, chapters: list[Path]) -> None:
    """Copy the site's sources into ``src``, afresh."""
    def put(rel: str, origin: Path) -> None:
        target = src / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(origin, target)

    shutil.rmtree(src, ignore_errors=True)  # a page left from an earlier build would be an orphan

    for rel in ["notebooks/README.md", *DOCS]:
        put(rel, ROOT / rel)
    for pattern in IMAGES:
        for image in ROOT.glob(pattern):
            put(str(image.relative_to(ROOT)), image)
    for notebook in chapters:
        put(f"notebooks/{notebook.name}", EXECUTED / notebook.name)
    home = (ROOT / "README.md").read_text()
    home += toctree("The course", ["notebooks/README", *[f"notebooks/{p.stem}" for p in chapters]])
    home += toctree("Teaching and reference", [d.removesuffix(".md") for d in DOCS])
    (src / "README.md").write_text(home)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default=os.environ.get("AGENTLAB_PROFILE") or "ci",
                    help="the profile the notebooks' outputs come from (default: AGENTLAB_PROFILE, else ci)")
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "book")
    ap.add_argument("--executed-only", action="store_true",
                    help="execute nothing: build from the copies in build/executed as they are, leaving out the "
                         "notebooks that have none (a quick look at a few chapters)")
    args = ap.parse_args(argv)

    start = time.perf_counter()
    if args.executed_only:
        chapters, todo = [p for p in CHAPTERS if (EXECUTED / p.name).exists()], []
    else:
        chapters, todo = CHAPTERS, [p for p in CHAPTERS if stale(p, args.profile)]
    if todo:
        execute(todo, args.profile)
    lay_out(args.out / "src", chapters)
    # -E: read every page each time, so that a warning which failed the last build cannot pass unseen now
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-E", "-W", "--keep-going", "-j", "1",
           "-c", str(Path(__file__).parent), "-d", str(args.out / "doctrees"), str(args.out / "src"),
           str(args.out / "html")]
    if args.executed_only:  # links to the chapters left out are expected to be missing
        cmd += ["-D", "suppress_warnings=misc.highlighting_failure,myst.xref_missing"]
    if subprocess.run(cmd, cwd=ROOT).returncode:
        print("book: Sphinx reported the errors above", file=sys.stderr)
        return 1
    # the home page is README.html (links to ../README.md keep working); index.html leads there
    (args.out / "html" / "index.html").write_text(
        '<!DOCTYPE html><meta charset="utf-8"><meta http-equiv="refresh" content="0; url=README.html">'
        '<a href="README.html">agentlab</a>\n')
    print(f"book: {args.out / 'html' / 'index.html'} in {time.perf_counter() - start:.0f} s "
          f"({len(chapters) - len(todo)} notebook(s) from build/executed, {len(todo)} executed now)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
