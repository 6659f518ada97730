"""The model cache under processes started together (accelerate launch, two notebooks at once)."""

import os
import subprocess
import sys

BUILD = "from agentlab.profiles import profile; from agentlab.tiny import build_tiny; print(build_tiny(profile('ci')))"


def test_processes_started_together_build_the_tiny_policy_once(tmp_path):
    env = {**os.environ, "AGENTLAB_CACHE": str(tmp_path), "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", BUILD], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    printed = "".join(out for out, _ in outs)
    assert printed.count("building the tiny policy") == 1  # the second process waited, then found it built
    paths = {out.strip().splitlines()[-1] for out, _ in outs}
    assert len(paths) == 1 and os.path.exists(os.path.join(paths.pop(), "config.json"))
