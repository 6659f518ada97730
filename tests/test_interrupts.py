"""Ctrl-C in the middle of `train` (SIGINT, which Jupyter's "interrupt kernel" sends): a real SIGINT in
the rollout, in the gradient steps and while a checkpoint is written, each in a short run of its own
process. The run must stop with KeyboardInterrupt at a consistent point, keep a whole checkpoint, print
how to resume, and, resumed, end exactly as the same run never stopped."""

import json
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_train import fit, small, trainable_state

from agentlab import cli
from agentlab.train import latest_checkpoint, load_checkpoint, load_training_policy, sigint_deferred, stop_interrupted

# A run that interrupts itself when a phase starts in update `at`: deterministic, where a timer is not.
INTERRUPTED_RUN = """
import json, signal, sys, threading
from pathlib import Path
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook
import agentlab.train as T

# A process started in the background by a shell (make, CI) inherits SIGINT ignored, and Python then
# leaves it so; Jupyter's kernel and a terminal have Python's handler, which raises KeyboardInterrupt.
signal.signal(signal.SIGINT, signal.default_int_handler)
cfg = T.TrainConfig(**json.loads(sys.argv[1]))
phase, at = sys.argv[2], int(sys.argv[3])
now = {"update": None}

def ctrl_c():  # a real SIGINT, sent to the main thread so that it lands before the next line runs
    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

def collect(policy, cfg, update, *args):
    now["update"] = update
    if phase == "rollout" and update == at:
        ctrl_c()
    return real_collect(policy, cfg, update, *args)

def after_step(optimizer, args, kwargs):  # the first gradient step of update `at` is taken, the others not
    if phase == "update" and now["update"] == at:
        now["update"] = None
        ctrl_c()

def save(obj, path, *args, **kwargs):  # the first file of checkpoint `at`, inside its temporary folder
    if phase == "checkpoint" and Path(path).parent.name.startswith(f".update-{at:05d}-"):
        ctrl_c()
    return real_save(obj, path, *args, **kwargs)

def update(*args, **kwargs):  # an update whose groups all scored alike takes no step: stop at its end then
    stats = real_update(*args, **kwargs)
    if phase == "update" and now["update"] == at:
        now["update"] = None
        ctrl_c()
    return stats

real_collect, T.collect = T.collect, collect
real_update, T.grpo.update = T.grpo.update, update
real_save, torch.save = torch.save, save
register_optimizer_step_post_hook(after_step)
T.train(cfg, T.load_training_policy(cfg), progress=False)
"""


def interrupt(cfg, phase: str, at: int) -> str:
    """Run ``cfg`` in a child process, Ctrl-C it as ``phase`` starts in update ``at``; return its stdout."""
    fields = {k: v for k, v in cfg.__dict__.items() if k not in ("grpo", "ppo", "shaping")}  # their defaults
    child = subprocess.run([sys.executable, "-c", INTERRUPTED_RUN, json.dumps(fields), phase, str(at)],
                           check=False, capture_output=True, text=True, timeout=300)
    print(child.stdout)  # pytest shows it where a test fails
    # An uncaught KeyboardInterrupt: Python ends the process with SIGINT where it can, with 130 where the
    # signal does not end it, and with 1 on some hosts' `python -c`; the traceback's last line is what says why.
    assert child.returncode != 0, child.stderr[-3000:]
    assert child.stderr.rstrip().endswith("KeyboardInterrupt"), child.stderr[-3000:]
    return child.stdout


@pytest.fixture(scope="module")
def full(tmp_path_factory, warm_path):
    """The run the interrupted ones are compared with: four updates, never stopped."""
    return fit(small(tmp_path_factory.mktemp("full"), "full", policy=str(warm_path), eval_every=2), progress=False)


def resumes_as_if_never_stopped(cfg, full, capsys, from_update: int) -> None:
    """The checkpoint left loads, and the run resumed from it ends as ``full`` did, its files unrepeated."""
    ckpt = latest_checkpoint(Path(cfg.out_dir))
    assert ckpt.name == f"update-{from_update:05d}"
    assert not list(ckpt.parent.glob(".update-*")), "no half-written checkpoint is left behind"
    capsys.readouterr()
    resumed = fit(cfg, resume=True, progress=False)
    assert f"from update {from_update} ({ckpt.name})" in capsys.readouterr().out
    volatile = ("tokens_per_s", "seconds_rollout", "seconds_update")
    strip = lambda h: [{k: v for k, v in r.items() if k not in volatile} for r in h]
    assert strip(resumed.history) == strip(full.history)
    assert resumed.evals == full.evals
    logged = [json.loads(ln)["update"] for ln in (resumed.out_dir / "metrics.jsonl").read_text().splitlines()]
    assert logged == [0, 1, 2, 3], "each update's metrics once, in order"
    a, b = trainable_state(full.policy), trainable_state(resumed.policy)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_ctrl_c_in_the_rollout_checkpoints_the_last_whole_update(tmp_path, warm_path, full, capsys):
    """Stopped as update 3 samples: updates 0-2 are whole and logged, but checkpoint_every=2 wrote only
    update-00002; the interrupt writes update-00003, so no finished update is lost."""
    cfg = small(tmp_path, "rollout", policy=str(warm_path), eval_every=2)
    out = interrupt(cfg, "rollout", 3)
    assert "Training interrupted after 3 whole updates" in out, out
    assert "update-00003 holds 3 whole updates, as does the policy in memory" in out
    assert "    train(cfg, policy, resume=True)\n" in out
    command = next(ln.strip() for ln in out.splitlines() if ln.strip().startswith("agentlab train"))
    args = cli.build_parser("train").parse_args(shlex.split(command)[1:])  # the printed command is a real one
    assert args.resume and cli.train_config(args).out_dir == cfg.out_dir
    resumes_as_if_never_stopped(cfg, full, capsys, from_update=3)


def test_ctrl_c_in_the_gradient_steps_resumes_from_the_checkpoint(tmp_path, warm_path, full, capsys):
    """Stopped after the first gradient step of update 3: the policy in memory is partly updated, so
    nothing is written, the message says so, and resuming loads update-00002 over it. (An update whose
    groups all scored alike takes no step; the child then stops at the end of its gradient phase.)"""
    cfg = small(tmp_path, "update", policy=str(warm_path), eval_every=2)
    out = interrupt(cfg, "update", 3)
    assert "Training interrupted in the gradient steps of update 3: the policy in memory is partly updated" in out
    assert "update-00002 holds 2 whole updates; the policy in memory differs from it" in out
    resumes_as_if_never_stopped(cfg, full, capsys, from_update=2)


def test_ctrl_c_while_a_checkpoint_is_written_waits_for_it(tmp_path, warm_path, full, capsys):
    """Stopped as update-00002's first file is written: the checkpoint is finished first, then the run stops."""
    cfg = small(tmp_path, "checkpoint", policy=str(warm_path), eval_every=2)
    out = interrupt(cfg, "checkpoint", 2)
    assert "Training interrupted after 2 whole updates" in out, out
    ckpt = latest_checkpoint(tmp_path / "checkpoint")
    assert {"optimizer.pt", "state.json", "trainable.pt"} <= {f.name for f in ckpt.iterdir()}
    policy = load_training_policy(cfg)  # a fresh one: the checkpoint loads whole into it
    assert load_checkpoint(ckpt, policy, torch.optim.AdamW(policy.trainable_parameters()), None) == 2
    resumes_as_if_never_stopped(cfg, full, capsys, from_update=2)


def test_ctrl_c_before_any_checkpoint_asks_for_a_fresh_policy(tmp_path):
    """Stopped in the gradient steps of update 0: no checkpoint can undo them, so resuming must reload."""
    cfg = small(tmp_path, "early")
    out = stop_interrupted(tmp_path / "early", None, None, None, cfg, in_memory=None, logged=0, logged_rng=None)
    assert "There is no checkpoint yet" in out and "train(cfg, load_training_policy(cfg), resume=True)" in out
    out = stop_interrupted(tmp_path / "early", None, None, None, cfg, in_memory=0, logged=0, logged_rng=None)
    assert "train(cfg, policy, resume=True)" in out  # stopped in the first rollout: the policy is as it started


def test_sigint_waits_for_the_deferred_block():
    # Python's own handler, as in a kernel or a terminal (a test run started in the background ignores SIGINT)
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        finished = []
        with pytest.raises(KeyboardInterrupt), sigint_deferred():
            signal.raise_signal(signal.SIGINT)
            finished.append(True)
        assert finished and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, outer)
