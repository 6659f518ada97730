"""The logged entropy in or out of the autograd graph, A/B in one process (bench/RESULTS.md, "Each phase of
an update against the machine's limits").

One epoch of GRPO's gradient passes (`bench.phases.score_and_backward`) on the ``real-cpu`` batch of
SmolLM2-135M-Instruct, with the entropy kept in the graph as the update did before
(``Policy.score(entropy=True)``) and computed outside it as it does now without an entropy bonus
(``entropy="logged"``), the two interleaved so that a change in the machine's state falls on both.
Prints forward, backward, and the process's kernel and user CPU time for each. About 10 minutes.

    OMP_NUM_THREADS=2 python -m bench.entropy_ab [--repeats N]
"""

from __future__ import annotations

import argparse
import contextlib

import agentlab.policy as P
from bench.phases import gradient_ab


@contextlib.contextmanager
def entropy_in_graph():
    """Every entropy the update asks for computed in the autograd graph, as `Policy.score` did before."""
    logged = P.Policy.score

    def in_graph(self, *args, entropy=False, **kwargs):
        return logged(self, *args, entropy=bool(entropy), **kwargs)

    P.Policy.score = in_graph
    try:
        yield
    finally:
        P.Policy.score = logged


def main(repeats: int = 2) -> None:
    gradient_ab({"before: entropy in the graph": entropy_in_graph, "after: entropy logged": contextlib.nullcontext},
                repeats)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    main(ap.parse_args().repeats)
