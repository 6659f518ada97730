"""glibc's allocator as it comes, or told to reuse freed memory, A/B (bench/NOTES.md, "The allocator").

On a CPU, glibc serves each block above 32 MB with a fresh ``mmap`` and unmaps it on free, so every large
tensor of a pass (the logits over the vocabulary, the activations autograd keeps) has its pages faulted in
and zeroed by the kernel again. `ReusedHeap` turns mmap off and never trims the heap, so a freed block's
pages go to the next tensor as they are; on leaving it restores the thresholds glibc settles on by itself
and hands the free pages back (``malloc_trim``). Two measurements, each A/B:

* ``minibatch`` (default): one epoch of GRPO's gradient passes (`bench.phases.score_and_backward`) on the
  ``real-cpu`` batch of SmolLM2-135M-Instruct, each minibatch of 32 episodes in one pass as `bench.phases`
  times it, the two arms interleaved in one process. Prints forward, backward, kernel and user CPU time,
  minor page faults and peak resident memory of each. About 5 minutes a pair; the one-pass minibatch
  peaks near 22 GB, so on a 24 GB machine a second pair can be killed for memory.
* ``recipe``: notebook 07b's SQL run (`agentlab.demo.demo_config`, 3 updates of 4 questions x 8) trained
  twice, each in a fresh process, ``grpo.update`` plain and then inside ``ReusedHeap``, micro-batches as
  the run's preflight plans them. Prints each update's seconds, the kernel's time, the peak resident
  memory, the losses and held-out success. About 6 minutes.

    OMP_NUM_THREADS=2 python -m bench.malloc_ab [--mode minibatch|recipe] [--repeats N]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import resource
import shutil
import subprocess
import sys
import time

from agentlab.memory import format_bytes, peak_rss

# glibc's mallopt parameters (malloc.h), and the values it settles on by itself once a large block was freed
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_MMAP_MAX = -1, -3, -4
SETTLED = ((M_MMAP_THRESHOLD, 32 * 2**20), (M_TRIM_THRESHOLD, 64 * 2**20), (M_MMAP_MAX, 65536))


class ReusedHeap(contextlib.ContextDecorator):
    """Within the block glibc's malloc keeps freed memory for the next allocation (a no-op off glibc)."""

    def __init__(self, enabled: bool = True):
        libc = ctypes.CDLL(None)
        self.libc = libc if enabled and hasattr(libc, "gnu_get_libc_version") else None

    def __enter__(self) -> "ReusedHeap":
        if self.libc is not None:
            self.libc.mallopt(M_MMAP_MAX, 0)
            self.libc.mallopt(M_TRIM_THRESHOLD, -1)  # never trim (mallopt(3)); a freed logits tensor tops any int
        return self

    def __exit__(self, *exc) -> None:
        if self.libc is not None:
            for param, value in SETTLED:
                self.libc.mallopt(param, value)
            self.libc.malloc_trim(0)


def minibatch(repeats: int) -> None:
    from bench.phases import gradient_ab

    gradient_ab({"glibc's defaults": lambda: ReusedHeap(False), "ReusedHeap": ReusedHeap}, repeats)


def recipe_arm(reuse: bool, out_dir: str = "runs/bench_malloc_ab") -> None:
    """One arm of ``recipe``: notebook 07b's SQL run, ``grpo.update`` inside ``ReusedHeap`` or not."""
    from agentlab import profile
    from agentlab.algos import grpo
    from agentlab.demo import demo_config
    from agentlab.train import load_training_policy, train

    if reuse:
        grpo.update = ReusedHeap()(grpo.update)  # train() calls grpo.update through the module
    prof = profile("real-cpu")
    cfg = demo_config(prof, out_dir=out_dir, env_id="agentlab/SQL-v0", updates=3, lr=prof.rl_lr, tasks_per_update=4)
    shutil.rmtree(cfg.out_dir, ignore_errors=True)
    r0, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    result = train(cfg, load_training_policy(cfg), progress=False)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    updates = ", ".join(f"{h['seconds_rollout']:.1f} + {h['seconds_update']:.1f}" for h in result.history)
    label = "ReusedHeap" if reuse else "glibc's defaults"
    print(f"{label:17s} {time.perf_counter() - start:5.0f} s; "
          f"rollout + update s: {updates}; sys {r1.ru_stime - r0.ru_stime:.1f} s; peak RSS {format_bytes(peak_rss())}; "
          f"losses {[round(h['loss'], 8) for h in result.history]}; "
          f"held-out success {result.evals[0]['success_rate']} -> {result.evals[-1]['success_rate']}", flush=True)


def recipe() -> None:
    """Each arm in a fresh process: a run plans its micro-batches from the free memory, which a previous run in
    the same process would have lowered."""
    for arm in ("plain", "reuse"):
        subprocess.run([sys.executable, "-m", "bench.malloc_ab", "--mode", f"recipe-{arm}"], check=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["minibatch", "recipe", "recipe-plain", "recipe-reuse"], default="minibatch")
    ap.add_argument("--repeats", type=int, default=1, help="minibatch mode: A/B pairs")
    args = ap.parse_args()
    if args.mode == "minibatch":
        minibatch(args.repeats)
    elif args.mode == "recipe":
        recipe()
    else:
        recipe_arm(reuse=args.mode == "recipe-reuse")
