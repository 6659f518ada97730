"""Running a notebook again in the same kernel gives the same results as running it once.

Learners re-run cells: the training cell after a look at its plots, or the whole notebook after
an edit. Each case below executes a notebook's cells in one kernel (as JupyterLab does), then again, and
compares what the runs computed (their metrics, not their printed text, which holds times and
ports) and what the kernel holds afterwards: Python threads, registered envs and open sockets, so
that nothing (a server, a dashboard's timer, an env registered twice) piles up with every run.

Two notebooks: 06, whose training cell draws a live widget dashboard, and 13, which starts an
OpenEnv server in a thread and trains TRL against it.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"

# What the kernel holds: thread names without their counters, gymnasium's env ids, and the
# process's socket descriptors (the kernel's own ZeroMQ ones are a constant share of them).
PROBE = """
import json as _json, os as _os, re as _re, threading as _threading
import gymnasium as _gym
print(_json.dumps({
    "threads": sorted(_re.sub(r"\\d+", "N", t.name) for t in _threading.enumerate()),
    "agentlab_envs": sorted(k for k in _gym.registry if k.startswith("agentlab/")),
    "remote_envs": sorted(k for k in _gym.registry if k.startswith("openenv/")),
    "sockets": sum(_os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
                   for fd in _os.listdir("/proc/self/fd") if _os.path.exists(f"/proc/self/fd/{fd}")),
}))
"""

# The numbers a run computed, minus its clock: every metric of every update and evaluation.
RESULTS = {
    "06_grpo": "result.history, result.evals",
    "13_beyond_one_gpu_with_trl": "ours.history, ours.evals, trl_log, trl_eval, remote_log",
}
TRAINING_CELLS = {"06_grpo": ["result = train("],
                  "13_beyond_one_gpu_with_trl": ["ours = train(", "trainer, episodes = build_trainer(run)"]}


def _clockless(value):
    if isinstance(value, dict):
        return {k: _clockless(v) for k, v in value.items()
                if not any(word in k for word in ("seconds", "tokens_per_s", "time", "runtime", "per_second"))}
    if isinstance(value, (list, tuple)):
        return [_clockless(v) for v in value]
    return value


class Kernel:
    """One kernel running a notebook's cells, as JupyterLab's "Run" does, in ``cwd``."""

    def __init__(self, client, nb):
        self.client, self.nb = client, nb

    def run_all(self) -> None:
        for index in range(len(self.nb.cells)):
            self.run_cell(index)

    def run_cell(self, index: int) -> None:
        self.client.execute_cell(self.nb.cells[index], index)  # raises CellExecutionError on an error

    def printed(self, source: str) -> str:
        cell = nbformat.v4.new_code_cell(source)
        self.nb.cells.append(cell)  # nbclient writes a cell's outputs back into the notebook at its index
        try:
            self.client.execute_cell(cell, len(self.nb.cells) - 1)
        finally:
            self.nb.cells.pop()
        return "".join(out.get("text", "") for out in cell.outputs if out.get("name") == "stdout")

    def probe(self) -> dict:
        return json.loads(self.printed(PROBE))

    def results(self, name: str) -> list:
        text = self.printed(f"import json as _json\nprint(_json.dumps([{RESULTS[name]}], default=str))")
        return _clockless(json.loads(text))


@pytest.fixture
def kernel(tmp_path):
    """A factory: ``with kernel("06_grpo") as k`` starts a kernel on that notebook, in a scratch folder."""
    import contextlib

    from nbclient import NotebookClient

    @contextlib.contextmanager
    def start(name: str):
        nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
        client = NotebookClient(nb, timeout=900, kernel_name="python3",
                                resources={"metadata": {"path": str(tmp_path)}})
        with client.setup_kernel():
            yield Kernel(client, nb)

    return start


def training_cells(nb, name: str) -> list[int]:
    """The cells that train, one for each of ``TRAINING_CELLS[name]``, in order."""
    cells = [[i for i, c in enumerate(nb.cells) if c.cell_type == "code" and code in c.source]
             for code in TRAINING_CELLS[name]]
    assert all(len(found) == 1 for found in cells), f"{name}: each of {TRAINING_CELLS[name]} should be in one cell"
    return [found[0] for found in cells]


def test_notebook_06_training_cell_run_twice_repeats_its_run(kernel):
    """06's dashboard cell run a second time trains the same run again and leaves nothing behind.

    The cells before it run as they are; the run is cut to 3 updates first (its `cfg`, in the
    kernel), which keeps the cell's code and halves the test: a state that leaks from one run of
    the cell into the next shows from the first update on. The whole notebook twice is 13's test."""
    with kernel("06_grpo") as k:
        (train_cell,) = training_cells(k.nb, "06_grpo")
        for index in range(train_cell):
            k.run_cell(index)
        k.printed("import dataclasses as _dc\ncfg = _dc.replace(cfg, updates=3)")
        k.run_cell(train_cell)
        first, held = k.results("06_grpo"), k.probe()
        k.run_cell(train_cell)
        again = k.results("06_grpo")
        assert len(first[0]) == 3 and first[1][-1]["success_rate"] is not None  # a real run was compared
        assert again == first, "06's training cell gave another run the second time: see the first update that differs"
        assert k.probe() == held  # no thread, env or socket left over by the second run


def test_notebook_13_run_twice_in_one_kernel_repeats_its_runs_and_stops_its_server(kernel):
    """13 run twice top to bottom: the same agentlab, TRL and OpenEnv runs, and no server left behind."""
    with kernel("13_beyond_one_gpu_with_trl") as k:
        k.run_all()
        first, held = k.results("13_beyond_one_gpu_with_trl"), k.probe()
        url = k.printed("print(server.url)").strip()
        k.run_all()
        second = k.results("13_beyond_one_gpu_with_trl")
        after = k.probe()
        # TRL's cell first, then agentlab's: neither follows the cell it follows in the notebook, so
        # neither may rely on the random state that cell leaves behind
        for cell in reversed(training_cells(k.nb, "13_beyond_one_gpu_with_trl")):
            k.run_cell(cell)
        third = k.results("13_beyond_one_gpu_with_trl")
        reachable = k.printed(f"import socket\nfrom urllib.parse import urlparse\nu = urlparse({url!r})\n"
                              "s = socket.socket(); s.settimeout(2)\nprint(s.connect_ex((u.hostname, u.port)) == 0)\n"
                              "s.close()").strip()
    assert first[2] and first[4], "13 logged no TRL steps to compare"
    assert second == first, "13 run a second time in the same kernel trained differently"
    assert third == first, "13's training cells run again gave another agentlab or TRL run"
    assert after["threads"] == held["threads"] and not any(t.startswith("uvicorn") for t in after["threads"])
    assert after["agentlab_envs"] == held["agentlab_envs"]  # none registered twice
    assert len(after["remote_envs"]) <= len(held["remote_envs"]) + 1  # the second server's own id at most
    assert after["sockets"] == held["sockets"]
    assert reachable == "False", f"the first run's server at {url} still accepts connections"
