"""run_python: hostile programs are stopped within their limits and leave no trace."""

import ast
import os
import time

import pytest

from agentlab.envs.sandbox import run_python, sandbox_mode

strong = pytest.mark.skipif(sandbox_mode() != "namespace", reason="needs unshare namespaces (fallback is rlimits only)")


def test_code_env_reexports_run_python():
    # the documented contract: `agentlab.envs.code.run_python` is the sandbox's own function
    from agentlab.envs import code

    assert code.run_python is run_python


def run(code, **kw):
    kw.setdefault("timeout_s", 2.0)
    start = time.perf_counter()
    res = run_python(code, **kw)
    return res, time.perf_counter() - start


def test_ordinary_program():
    res, _ = run("print(sum(range(10)))")
    assert res.ok and res.stdout == "45\n" and res.stderr == "" and res.returncode == 0


def test_exit_codes_and_syntax_errors():
    assert run("import sys; sys.exit(3)")[0].returncode == 3
    assert run("raise SystemExit('bye')")[0].returncode == 1
    res, _ = run("def f(:")
    assert res.returncode == 1 and "SyntaxError" in res.stderr


@pytest.mark.parametrize("code", ["while True: pass", "import time; time.sleep(60)",
                                  "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True: pass"])
def test_infinite_loops_time_out(code):
    res, seconds = run(code, timeout_s=1.0)
    assert res.timed_out and res.limit == "time" and res.returncode is None
    assert seconds < 3.0


def test_memory_bomb():
    res, seconds = run("x = bytearray(4 * 2**30)\nprint('allocated')", memory_mb=256)
    assert "allocated" not in res.stdout and "MemoryError" in res.stderr and res.limit == "memory"
    res, seconds = run("a = []\nwhile True: a.append(' ' * 2**20)", memory_mb=256)
    assert res.returncode != 0 and seconds < 3.0


@strong
def test_fork_bomb_is_capped_and_reaped():
    code = ("import os, time\nn = 0\nwhile n < 10000:\n    try:\n        if os.fork() == 0:\n            time.sleep(30)\n"
            "            os._exit(0)\n        n += 1\n    except OSError:\n        break\nprint(n)")
    res, seconds = run(code, max_procs=8)
    assert res.ok and int(res.stdout) < 8 and seconds < 3.0
    # the sleepers died with the pid namespace: no process of the sandbox is left
    time.sleep(0.2)
    leftover = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline(p).endswith("/main.py")]
    assert not leftover


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


@strong
def test_files_outside_the_folder_are_out_of_reach(tmp_path):
    marker = "/tmp/agentlab-sandbox-marker"
    if os.path.exists(marker):
        os.remove(marker)
    repo_file = os.path.abspath(__file__)
    code = f"""
import os
results = []
for action in [lambda: open('/etc/passwd', 'a').write('x'), lambda: open({repo_file!r}).read(),
               lambda: open({marker!r}, 'w').write('x'), lambda: open('/usr/bin/evil', 'w'),
               lambda: os.listdir({os.path.dirname(repo_file)!r}), lambda: open('/root/.bashrc').read()]:
    try:
        action()
        results.append('ok')
    except OSError as e:
        results.append(type(e).__name__)
print(results)
open('scratch.txt', 'w').write('fine')  # the working folder is writable
print(os.listdir('.'))
"""
    res, _ = run(code)
    assert res.ok, res.stderr
    first, second = res.stdout.splitlines()
    results = ast.literal_eval(first)
    # only the write to /tmp succeeds, and it lands in the sandbox's own private /tmp
    assert results[2] == "ok" and results.count("ok") == 1, results
    assert not os.path.exists(marker), "a write to /tmp escaped the sandbox"
    assert second == "['scratch.txt']"
    with open("/etc/passwd") as f:
        assert not f.read().endswith("x")


@strong
def test_working_folder_starts_empty_and_is_deleted(monkeypatch):
    import agentlab.envs.sandbox as sandbox

    made = []
    real = sandbox.tempfile.mkdtemp
    monkeypatch.setattr(sandbox.tempfile, "mkdtemp", lambda **kw: made.append(real(**kw)) or made[-1])
    res, _ = run("import os; print(os.listdir('.')); open('f', 'w').write('x')", files={"data.csv": "a,b\n1,2\n"})
    assert res.stdout.strip() == "['data.csv']"
    assert made and not any(os.path.exists(p) for p in made)


@strong
def test_no_network():
    code = ("import socket\nfor host, port in [('127.0.0.1', 22), ('1.1.1.1', 53), ('::1', 22)]:\n"
            "    try:\n        socket.create_connection((host, port), timeout=1)\n        print('connected', host)\n"
            "    except OSError as e:\n        print('refused', host)")
    res, seconds = run(code)
    assert "connected" not in res.stdout and res.stdout.count("refused") == 3
    assert seconds < 3.0


def test_callers_environment_is_invisible(monkeypatch):
    monkeypatch.setenv("AGENTLAB_TEST_SET_SECRET", "hidden-answers")
    res, _ = run("import os; print(sorted(os.environ)); print(os.environ.get('AGENTLAB_TEST_SET_SECRET'))")
    assert "hidden-answers" not in res.stdout and "AGENTLAB_TEST_SET_SECRET" not in res.stdout


@strong
@pytest.mark.parametrize("code", ["import os, signal; os.kill(os.getppid() or 1, signal.SIGKILL)",
                                  f"import os, signal; os.kill({os.getpid()}, signal.SIGKILL)",
                                  "import os, signal; os.killpg(0, signal.SIGKILL)",
                                  "import os, signal; os.kill(-1, signal.SIGKILL)",
                                  f"import os, signal; os.killpg({os.getpgid(0)}, signal.SIGKILL)"],
                         # ids without the pids, so every pytest-xdist worker collects the same tests
                         ids=["parent", "caller-pid", "own-group", "everyone", "caller-group"])
def test_cannot_signal_the_caller(code):
    res, _ = run(code)
    assert os.getpid() > 0  # we are still here
    assert not res.timed_out


def test_huge_output_is_capped():
    res, seconds = run("import sys\nwhile True: sys.stdout.write('x' * 65536)", max_output_bytes=10_000, max_file_mb=1)
    assert len(res.stdout) == 10_000 and res.output_truncated and res.limit == "output"
    assert seconds < 3.0


def test_big_files_are_refused():
    res, _ = run("open('big', 'wb').write(b'x' * (20 * 2**20))", max_file_mb=1)
    assert res.returncode != 0 and "File too large" in res.stderr


@strong
def test_setuid_and_mount_tricks_fail():
    code = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "print(libc.mount(None, b'/usr', None, 32 | 4096, None), os.getuid() != 0)\n"
            "try:\n    os.setuid(0)\n    print('root')\nexcept OSError:\n    print('no')")
    res, _ = run(code)
    assert res.stdout.split() == ["-1", "True", "no"], res.stdout + res.stderr


def test_overhead_is_small():
    times = sorted(run("print(1)")[1] for _ in range(9))
    assert times[4] < 1.0  # generous: the real figure (about 0.05-0.15 s) lives in bench/


# -- where namespaces are missing (macOS, a locked-down container): refuse unless opted in -------------------

@pytest.fixture
def fallback(monkeypatch):
    """The probe's verdict on a machine without namespaces, whatever this machine has."""
    from agentlab.envs import sandbox

    monkeypatch.setattr(sandbox, "_mode", "rlimits")
    monkeypatch.setattr(sandbox, "_mode_reason", "no unshare program at /usr/bin/unshare (util-linux; Linux only)")
    monkeypatch.setattr(sandbox, "_fallback_drop_uid", sandbox._fallback_drop_uid)  # restored if a run clears it
    monkeypatch.delenv(sandbox.ALLOW_UNSANDBOXED, raising=False)
    return sandbox


def code_and_humaneval_tasks():
    import numpy as np

    from agentlab.envs.code import CodeEnv
    from agentlab.envs.humaneval import HumanEvalEnv
    from agentlab.tasks import load_tasks

    code = CodeEnv().generate_task(np.random.default_rng(0), 0)  # a function task: analysis ones are level 3
    return [(CodeEnv, code), (HumanEvalEnv, load_tasks(HumanEvalEnv.task_file(), "eval")[0])]


def test_the_probe_says_why_namespaces_are_unavailable(monkeypatch):
    from agentlab.envs import sandbox

    monkeypatch.setattr(sandbox, "_mode", None)  # probe again, and put back this machine's verdict afterwards
    monkeypatch.setattr(sandbox, "_mode_reason", "")
    monkeypatch.setattr(sandbox, "UNSHARE", "/nonexistent/unshare")
    with pytest.warns(UserWarning, match="AGENTLAB_ALLOW_UNSANDBOXED=1"):
        assert sandbox.sandbox_mode() == "rlimits"
    assert sandbox._mode_reason == "no unshare program at /nonexistent/unshare (util-linux; Linux only)"


def test_the_fallback_refuses_untrusted_code_without_opt_in(fallback):
    with pytest.raises(fallback.SandboxUnavailable) as refused:
        run_python("print(1)")
    why = str(refused.value)
    assert "no unshare program at /usr/bin/unshare" in why  # which probe failed
    assert all(word in why for word in ("file system", "network", "processes"))  # what the fallback exposes
    assert "AGENTLAB_ALLOW_UNSANDBOXED=1" in why and "allow_unsandboxed=True" in why  # how to opt in
    for make, task in code_and_humaneval_tasks():
        env = make()
        env.reset(seed=0, options={"task": task})
        with pytest.raises(fallback.SandboxUnavailable):
            env.step(env.expert_action())


@pytest.mark.filterwarnings("ignore:agentlab sandbox")  # as root here, the spare uid may not run the interpreter
def test_the_fallback_runs_when_opted_in_and_says_so(fallback, monkeypatch):
    res = run_python("print(6*7)", allow_unsandboxed=True)
    assert res.ok and res.stdout == "42\n" and res.isolation == "rlimits"
    for make, task in code_and_humaneval_tasks():  # the env argument
        env = make(allow_unsandboxed=True)
        env.reset(seed=0, options={"task": task})
        while not (out := env.step(env.expert_action()))[2]:
            pass
        assert out[4]["success"], make.name
    monkeypatch.setenv(fallback.ALLOW_UNSANDBOXED, "1")  # the variable, for code run outside an env
    assert run_python("print(6*7)").isolation == "rlimits"
