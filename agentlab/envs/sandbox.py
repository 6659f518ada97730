"""The sandbox: `run_python` runs untrusted Python source in a contained process, and says how.

This is the one way the kit runs untrusted code (the Code env's drafts and submissions,
the notebooks' hostile examples). ``agentlab.envs.code`` re-exports `run_python` for the
envs that documented it there.

Isolation ("namespace" mode, the default where util-linux ``unshare`` works):
    The program runs in new mount, network, pid, IPC and UTS namespaces (plus a user
    namespace when the caller is not root). A small launcher, the namespace's first process,
    builds a root file system on a size-limited tmpfs: read-only binds of the system
    libraries and the interpreter's own prefix, ``/dev/null``, ``/dev/zero`` and
    ``/dev/urandom``, an empty working folder ``/work`` holding only the files passed in, and
    a private ``/tmp``. It chroots there, then runs the program as an unprivileged uid of its
    own (as root) or as namespace root with every capability dropped and the root
    securebits locked (in a user namespace), with ``no_new_privs`` set either way. So the
    program sees no network, none of the caller's files and no process outside its own, and
    when the launcher exits every process inside dies with the pid namespace.

Limits (both modes):
    wall-clock time ``timeout_s`` (then the whole process group is killed) and as much CPU
    time, rounded up; address space ``memory_mb``; ``max_procs`` processes (counted per uid,
    hence a fresh uid per run); 64 open files; files of at most ``max_file_mb`` (stdout and
    stderr are files too); no core dumps; in namespace mode, a root tmpfs of ``disk_mb``.
    Only ``max_output_bytes`` of each output stream are read back, and only `CLEAN_ENV`
    reaches the program: none of the caller's environment variables (tokens, test-set
    paths, ...).

Fallback ("rlimits" mode):
    Where namespaces are unavailable (no ``unshare``, as on macOS, or a container that forbids
    them), `sandbox_mode` finds out once and warns, and `run_python` raises
    `SandboxUnavailable`, saying which probe failed, unless the caller opts in with
    ``allow_unsandboxed=True`` (an argument of the Code and HumanEval envs too) or
    ``AGENTLAB_ALLOW_UNSANDBOXED=1``: code a policy writes should not reach the machine
    unasked. Opted in, programs run with the same rlimits and, as root, a spare unprivileged
    uid, in a throwaway folder; the file system, the network and the caller's processes stay
    visible. If that spare uid may not execute the interpreter (e.g. it lives under /root), it
    runs as the caller with rlimits only, with a second warning. Each `RunResult` records which
    isolation it got in ``isolation``.
"""

from __future__ import annotations

import math
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from itertools import count

UNSHARE = shutil.which("unshare") or "/usr/bin/unshare"
SANDBOX_UID_BASE = 200_000  # each run gets its own unprivileged uid: RLIMIT_NPROC counts per uid
# An opt-in read where the code would run, like HF_ALLOW_CODE_EVAL: a notebook or test run sets it
# once for the process rather than threading a flag through every env it builds.
ALLOW_UNSANDBOXED = "AGENTLAB_ALLOW_UNSANDBOXED"
_uid_counter = count()
_mode_lock = threading.Lock()
_mode: str | None = None  # "namespace" or "rlimits", probed once
_mode_reason = ""  # why the probe chose "rlimits"
_fallback_drop_uid = True  # rlimits mode as root: run as a spare uid (if it may exec the interpreter)


class SandboxUnavailable(RuntimeError):
    """Untrusted code was to run where the sandbox cannot isolate it, and nobody opted in."""


@dataclass
class RunResult:
    """What a sandboxed program did. ``isolation`` says how strongly it was contained."""

    stdout: str
    stderr: str
    returncode: int | None
    timed_out: bool
    seconds: float = 0.0
    output_truncated: bool = False
    isolation: str = "namespace"
    limit: str | None = None  # which limit stopped it: "time", "output", "memory", ...

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


# The launcher runs inside the new namespaces as (namespace) root: it builds a tiny root file
# system on a size-limited tmpfs (read-only binds of /usr and the interpreter, /dev/null, an
# empty /work and /tmp), chroots into it, drops to an unprivileged uid (or, inside a user
# namespace, drops every capability), sets the rlimits and execs the interpreter.
_LAUNCHER = r"""
import ctypes, os, resource, sys
cfg = eval(sys.argv[1], {"__builtins__": {}})  # a literal written by run_python (eval needs no import; json would add one per run)
libc = ctypes.CDLL(None, use_errno=True)
RDONLY, NOSUID, NODEV, REMOUNT, BIND, REC, PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
def mount(src, dst, fstype, flags, data=None):
    enc = lambda s: s.encode() if s else None
    if libc.mount(enc(src), enc(dst), enc(fstype), flags, enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "mount %s: %s" % (dst, os.strerror(err)))
root, uid = cfg["root"], cfg["uid"]
mount(None, "/", None, REC | PRIVATE)
mount("tmpfs", root, "tmpfs", NOSUID | NODEV, "size=%dm,nr_inodes=4096,mode=755" % cfg["disk_mb"])
for path in cfg["ro"]:
    inside = root + path
    if os.path.islink(path):
        os.makedirs(os.path.dirname(inside), exist_ok=True)
        os.symlink(os.readlink(path), inside)
    elif os.path.isdir(path):
        os.makedirs(inside, exist_ok=True)
        mount(path, inside, None, BIND | REC)
        mount(None, inside, None, BIND | REMOUNT | RDONLY | NOSUID | NODEV)
os.makedirs(root + "/dev")
for name in ("null", "zero", "urandom"):
    open(root + "/dev/" + name, "w").close()
    mount("/dev/" + name, root + "/dev/" + name, None, BIND)
for name in ("work", "tmp"):
    os.mkdir(root + "/" + name)
    os.chmod(root + "/" + name, 0o1777 if name == "tmp" else 0o755)
for name in os.listdir(cfg["inbox"]):
    with open(os.path.join(cfg["inbox"], name), "rb") as src, open(root + "/work/" + name, "wb") as dst:
        dst.write(src.read())
    if cfg["drop_uid"]:
        os.chown(root + "/work/" + name, uid, uid)
with open(cfg["program"], "rb") as src, open(root + "/main.py", "wb") as dst:
    dst.write(src.read())
if cfg["drop_uid"]:
    os.chown(root + "/work", uid, uid)
status = os.open(cfg["status"], os.O_WRONLY)  # kept open (not inherited) across the chroot
os.chroot(root)
os.chdir("/work")
child = os.fork()
if child == 0:
    for name, value in cfg["limits"].items():
        resource.setrlimit(getattr(resource, name), (value, value))
    if cfg["drop_uid"]:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    else:  # user namespace: stay uid 0 inside but keep no capability across exec
        for cap in range(64):
            libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP
        if libc.prctl(28, 0x2F, 0, 0, 0) != 0:  # PR_SET_SECUREBITS: NOROOT, NO_SETUID_FIXUP, locked
            os._exit(126)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS: setuid binaries gain nothing
        os._exit(126)
    os.execve(cfg["python"], [cfg["python"], "-s", "-S", "-B", "/main.py"], cfg["env"])
# This launcher stays as the namespace's first process (pid 1 ignores signals it has no
# handler for, so the program must not be pid 1); when it exits every process inside dies.
_, wstatus = os.waitpid(child, 0)
sig = os.WTERMSIG(wstatus) if os.WIFSIGNALED(wstatus) else 0
os.write(status, (b"signal %d" % sig) if sig else (b"exit %d" % os.WEXITSTATUS(wstatus)))
os._exit(0)
"""

# Only these variables reach the program: none of the caller's (tokens, test-set paths...).
CLEAN_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/work", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0",
             "PYTHONIOENCODING": "utf-8", "PYTHONDONTWRITEBYTECODE": "1"}


def _readonly_paths() -> list[str]:
    """What the program may see: system libraries and the interpreter's own prefix."""
    paths = []
    for p in ["/usr", "/bin", "/lib", "/lib64", "/lib32", sys.base_prefix, sys.base_exec_prefix]:
        p = os.path.abspath(p)
        if os.path.lexists(p) and not any(p == q or p.startswith(q.rstrip("/") + "/") for q in paths):
            paths.append(p)
    return paths


def _limits(timeout_s: float, memory_mb: int, max_procs: int, max_file_mb: int) -> dict[str, int]:
    return {
        "RLIMIT_CPU": int(math.ceil(timeout_s)) + 1,
        "RLIMIT_AS": memory_mb * 2**20,
        "RLIMIT_FSIZE": max_file_mb * 2**20,  # also caps stdout/stderr, which go to files
        "RLIMIT_NOFILE": 64,
        "RLIMIT_NPROC": max_procs,
        "RLIMIT_CORE": 0,
    }


def _command(mode: str, work: str, limits: dict, disk_mb: int) -> tuple[list[str], object]:
    python = os.path.realpath(sys.executable)
    if mode == "rlimits":
        def preexec():  # fallback: limits and a dropped uid, but the file system is visible
            for name, value in limits.items():
                resource.setrlimit(getattr(resource, name), (value, value))
            if os.geteuid() == 0 and _fallback_drop_uid:
                uid = SANDBOX_UID_BASE + next(_uid_counter) % 50_000
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
        return [python, "-s", "-S", "-B", os.path.join(work, "main.py")], preexec
    as_root = os.geteuid() == 0
    cfg = {
        "root": os.path.join(work, "root"), "inbox": os.path.join(work, "inbox"),
        "program": os.path.join(work, "main.py"), "status": os.path.join(work, "status"), "python": python, "ro": _readonly_paths(),
        "uid": SANDBOX_UID_BASE + (os.getpid() * 97 + next(_uid_counter)) % 50_000,
        "drop_uid": as_root, "limits": limits, "disk_mb": disk_mb, "env": CLEAN_ENV,
    }
    ns = ["--mount", "--net", "--pid", "--ipc", "--uts", "--fork", "--kill-child"]
    if not as_root:
        ns = ["--user", "--map-root-user"] + ns
    return [UNSHARE, *ns, python, "-I", "-S", "-c", _LAUNCHER, repr(cfg)], None


def sandbox_mode() -> str:
    """ "namespace" when unshare works here, else "rlimits" (weaker; a warning says so)."""
    global _mode, _mode_reason
    with _mode_lock:
        if _mode is None:
            _mode, _mode_reason = "namespace", _probe_namespaces()
            if _mode_reason:
                _mode = "rlimits"
                warnings.warn(f"agentlab sandbox: unshare namespaces are unavailable ({_mode_reason}); untrusted "
                              "code would run with rlimits and a dropped uid only, so it runs only with "
                              f"{ALLOW_UNSANDBOXED}=1", stacklevel=2)
        return _mode


def _probe_namespaces() -> str:
    """Run a one-line program in the namespaces: "" when it works, else what went wrong."""
    if not os.path.exists(UNSHARE):
        return f"no unshare program at {UNSHARE} (util-linux; Linux only)"
    try:
        res = _run("print(6*7)", 5.0, 256, 16, 4, 65536, None, 32)
    except OSError as err:
        return f"starting {UNSHARE} failed: {err}"
    if res.stdout.strip() == "42":
        return ""
    said = res.stderr.strip().splitlines()[-1:] or ["no error message"]
    return f"a test program under {UNSHARE} exited with status {res.returncode}: {said[0][:200]}"


def _refusal() -> str:
    """Why `run_python` refuses in rlimits mode: the failed probe, what the fallback exposes, how to opt in."""
    as_whom = ("a spare unprivileged uid (as root, where that uid cannot run the interpreter)"
               if os.geteuid() == 0 else "your own user")
    return (f"agentlab will not run untrusted code here: the sandbox cannot isolate it ({_mode_reason}). "
            f"Its fallback limits time, memory, processes and file sizes, but the program would run as {as_whom}, "
            "see the file system (every file that user may read, write where it may write), reach the network, and "
            "see the processes of this machine (and signal those of its own user). To run it anyway, on a machine "
            "whose files and network you do not mind exposing to code a model writes, set "
            f"{ALLOW_UNSANDBOXED}=1 or pass allow_unsandboxed=True (e.g. "
            "agentlab.make('agentlab/Code-v0', allow_unsandboxed=True)). On Linux, isolation needs util-linux "
            "unshare and, when not root, unprivileged user namespaces (a container may have to allow them).")


def run_python(code: str, timeout_s: float = 2.0, memory_mb: int = 256, max_output_bytes: int = 64_000,
               max_procs: int = 16, max_file_mb: int = 4, files: dict[str, str | bytes] | None = None,
               disk_mb: int = 32, allow_unsandboxed: bool = False) -> RunResult:
    """Run untrusted Python source in the sandbox and return what it printed.

    ``files`` (name -> content) are put in the program's otherwise empty working folder. The
    program gets ``timeout_s`` of wall-clock time (and as much CPU time, rounded up), an
    address space of ``memory_mb``, ``max_procs`` processes, 64 open files, files (stdout and
    stderr included) of at most ``max_file_mb``, no network, and no environment variables of
    the caller. Only the first ``max_output_bytes`` of each output stream are read. Where the
    namespaces are unavailable it raises `SandboxUnavailable` unless ``allow_unsandboxed`` or
    ``AGENTLAB_ALLOW_UNSANDBOXED=1`` accepts the weaker "rlimits" mode.
    """
    mode = sandbox_mode()
    if mode == "rlimits" and not (allow_unsandboxed or os.environ.get(ALLOW_UNSANDBOXED) == "1"):
        raise SandboxUnavailable(_refusal())
    return _run(code, timeout_s, memory_mb, max_procs, max_file_mb, max_output_bytes, files, disk_mb, mode=mode)


def _run(code, timeout_s, memory_mb, max_procs, max_file_mb, max_output_bytes, files, disk_mb,
         mode="namespace") -> RunResult:
    start = time.perf_counter()
    work = tempfile.mkdtemp(prefix="agentlab-sbx-")
    try:
        os.mkdir(os.path.join(work, "root"))
        os.mkdir(os.path.join(work, "inbox"))
        for name, content in (files or {}).items():
            if os.path.basename(name) != name or name in ("", ".", ".."):
                raise ValueError(f"file names must be plain names, got {name!r}")
            data = content.encode() if isinstance(content, str) else bytes(content)
            with open(os.path.join(work, "inbox", name), "wb") as f:
                f.write(data)
        with open(os.path.join(work, "main.py"), "w", encoding="utf-8", errors="replace") as f:
            f.write(code)
        open(os.path.join(work, "status"), "wb").close()
        if mode == "rlimits":  # the program runs in the inbox folder itself
            os.chmod(work, 0o755)
            os.chmod(os.path.join(work, "main.py"), 0o644)
            os.chmod(os.path.join(work, "inbox"), 0o777)
        limits = _limits(timeout_s, memory_mb, max_procs, max_file_mb)
        argv, preexec = _command(mode, work, limits, disk_mb)
        with open(os.path.join(work, "stdout"), "w+b") as out, open(os.path.join(work, "stderr"), "w+b") as err:
            popen = dict(stdin=subprocess.DEVNULL, stdout=out, stderr=err, close_fds=True, start_new_session=True,
                         env=dict(CLEAN_ENV), preexec_fn=preexec, cwd=os.path.join(work, "inbox") if mode == "rlimits" else work)
            try:
                proc = subprocess.Popen(argv, **popen)
            except PermissionError:
                if mode != "rlimits" or not _fallback_drop_uid:
                    raise
                _no_uid_drop()  # the spare uid may not execute the interpreter (e.g. it lives in /root)
                proc = subprocess.Popen(argv, **popen)
            timed_out = False
            try:
                returncode = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            # Kill the whole process group either way; in namespace mode the death of the
            # namespace's first process also kills everything inside it.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            returncode = proc.wait()
            if mode == "namespace":
                returncode = _launcher_status(os.path.join(work, "status"), returncode)
            stdout, cut_out = _read_capped(out, max_output_bytes)
            stderr, cut_err = _read_capped(err, max_output_bytes)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    limit = None
    if timed_out or returncode == -signal.SIGXCPU:
        limit, timed_out = "time", True
    elif cut_out or cut_err:
        limit = "output"
    elif "[Errno 27] File too large" in stderr[-2000:]:
        limit = "file_size"
    elif "MemoryError" in stderr[-2000:]:
        limit = "memory"
    return RunResult(stdout, stderr, None if timed_out else returncode, timed_out, time.perf_counter() - start,
                     cut_out or cut_err or limit == "output", mode, limit)


def _no_uid_drop() -> None:
    global _fallback_drop_uid
    _fallback_drop_uid = False
    warnings.warn("agentlab sandbox (rlimits fallback): the interpreter is not executable by a spare uid, so "
                  "untrusted code runs as root with rlimits only: do not run hostile code this way", stacklevel=3)


def _launcher_status(path: str, fallback: int) -> int:
    """The program's exit status as the launcher saw it: N for exit(N), -N for signal N."""
    with open(path, "rb") as f:
        words = f.read().split()
    if len(words) != 2 or not words[1].isdigit():  # the launcher itself failed (or was killed)
        return fallback if fallback != 0 else 125
    return int(words[1]) if words[0] == b"exit" else -int(words[1])


def _read_capped(f, limit: int) -> tuple[str, bool]:
    f.seek(0, os.SEEK_END)
    size = f.tell()
    f.seek(0)
    return f.read(limit).decode("utf-8", errors="replace"), size > limit
