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
import resource

import agentlab.policy as P
from bench.phases import batch_shape, load, sample, score_and_backward, update_batch


def main(repeats: int = 2) -> None:
    shape = batch_shape("smollm2", False)
    policy = load("smollm2", shape)
    trajs = sample(policy, shape)["trajs"]
    batch = update_batch(policy, trajs, shape["group"])
    logged = P.Policy.score

    def in_graph(self, *args, entropy=False, **kwargs):  # every entropy the update asks for, in the graph
        return logged(self, *args, entropy=bool(entropy), **kwargs)

    for rep in range(repeats):
        for name, score in (("before: entropy in the graph", in_graph), ("after: entropy logged", logged)):
            P.Policy.score = score
            r0 = resource.getrusage(resource.RUSAGE_SELF)
            out = score_and_backward(policy, batch, trajs[0].temperature)
            r1 = resource.getrusage(resource.RUSAGE_SELF)
            print(f"{rep} {name:30s} forward {out['forward_s']:6.1f} s  backward {out['backward_s']:6.1f} s  "
                  f"sys {r1.ru_stime - r0.ru_stime:6.1f} s  user {r1.ru_utime - r0.ru_utime:6.1f} s", flush=True)
    P.Policy.score = logged


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    main(ap.parse_args().repeats)
