"""Run untrusted generated code (HumanEval completions) in a limited, killable child process.

What is enforced, and what is not (Linux):
- A separate `python -I` process (isolated mode: no user site-packages, no PYTHON* variables, script
  folder not on sys.path) in a fresh temporary folder that is deleted afterwards; nothing is ever
  exec'd in the caller's process.
- Memory: RLIMIT_AS (address space), so big allocations raise MemoryError inside the child.
- CPU: RLIMIT_CPU slightly above the wall-clock limit (a busy loop gets SIGXCPU); plus a wall-clock
  timeout after which the whole process group is SIGKILLed (covers sleeping or blocked programs).
- Processes: the child gets its own session/process group (`start_new_session`); after it ends, the
  group is SIGKILLed so children it left behind die too. RLIMIT_NPROC caps processes *of the user*
  at (the user's current count + `max_processes`), but the kernel does not apply it to root
  (CAP_SYS_ADMIN / CAP_SYS_RESOURCE), so as root a fork bomb is bounded only by the timeout and the
  group kill, and a descendant that calls setsid() itself escapes the group kill.
- Files: RLIMIT_FSIZE caps each written file (and the captured output); no core dumps.
- NOT enforced: no network isolation, no filesystem isolation (the child runs as the caller's user
  and can read/write whatever that user can), no syscall filtering. Use a container for hostile code.
`preexec_fn` runs between fork and exec; it only calls setrlimit, but it is documented as unsafe
when the caller has threads, so call this from the main thread of the runner.
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
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal

Status = Literal["passed", "failed", "timeout", "error", "memory"]

MAX_OUTPUT_CHARS = 4000  # detail keeps the end of stderr (where the traceback's verdict is)
MAX_FILE_BYTES = 16 * 1024 * 1024
_MEMORY_SIGNS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory")


@dataclass
class SandboxResult:
    """`passed` = exited 0 in time; `status` says why not; `detail` = stdout if passed, else the reason
    and the end of stderr (both cut to MAX_OUTPUT_CHARS), for logs."""

    passed: bool
    status: Status
    detail: str


def _user_process_count() -> int:
    """Processes of this user now (RLIMIT_NPROC counts them all, not just our children)."""
    uid = os.getuid()
    count = 0
    if not Path("/proc").is_dir():  # not Linux: the limit is then max_processes in all
        return 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                count += entry.stat().st_uid == uid
            except OSError:  # exited meanwhile
                pass
    return count


def _limiter(timeout_s: float, memory_mb: int, max_processes: int) -> Callable[[], None]:
    """The preexec_fn: set limits in the child, after fork and before exec (the parent keeps its own)."""
    cpu = math.ceil(timeout_s) + 1  # the wall clock normally fires first; this catches busy loops
    # Computed in the parent: between fork and exec the child should do as little as possible.
    limits = [
        (resource.RLIMIT_AS, memory_mb * 1024 * 1024),
        (resource.RLIMIT_CPU, cpu),
        (resource.RLIMIT_NPROC, _user_process_count() + max_processes),
        (resource.RLIMIT_FSIZE, MAX_FILE_BYTES),
        (resource.RLIMIT_CORE, 0),
    ]
    limits = [(kind, _below_hard(kind, value)) for kind, value in limits]

    def apply() -> None:
        for kind, value in limits:
            resource.setrlimit(kind, value)

    return apply


def _below_hard(kind: int, value: int) -> tuple[int, int]:
    """(soft, hard) no higher than the current hard limit, which an unprivileged user can't raise."""
    hard = resource.getrlimit(kind)[1]
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    return value, value


def _wait_unreaped(pid: int, deadline: float) -> bool:
    """Wait for `pid` to exit WITHOUT reaping it, so its pid (= the group id) can't be reused before
    the group kill. True if it exited before the deadline."""
    pause = 0.001
    while True:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        if info is not None:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.02)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _read(path: Path, tail: bool) -> str:
    """At most MAX_OUTPUT_CHARS of a captured stream (its end for stderr, its start for stdout)."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            if tail and size > MAX_OUTPUT_CHARS:
                f.seek(size - MAX_OUTPUT_CHARS)
            text = f.read(MAX_OUTPUT_CHARS).decode("utf-8", errors="replace")
    except OSError:
        return ""
    return text


def _classify(returncode: int, timed_out: bool, stdout: str, stderr: str) -> tuple[Status, str]:
    if timed_out:
        return "timeout", "wall-clock timeout"
    if returncode == -signal.SIGXCPU:
        return "timeout", "CPU time limit"
    if returncode == 0:  # even if it caught a MemoryError on the way
        return "passed", stdout
    if any(sign in stderr for sign in _MEMORY_SIGNS):
        return "memory", f"memory limit (exit code {returncode}): {stderr.strip()}"
    if returncode > 0:  # an uncaught exception (AssertionError from a test, SyntaxError, ...) or exit(n)
        return "failed", f"exit code {returncode}: {stderr.strip()}"
    if returncode == -signal.SIGKILL:  # not ours (we only kill after it exited): the kernel's OOM killer
        return "memory", f"killed by SIGKILL, most likely out of memory: {stderr.strip()}"
    if returncode == -signal.SIGXFSZ:
        return "error", "file size limit exceeded"
    return "error", f"killed by signal {-returncode}: {stderr.strip()}"


def run_program(
    code: str, timeout_s: float = 10, memory_mb: int = 1024, max_processes: int = 32
) -> SandboxResult:
    """Run `code` as a script in a limited child process; `passed` means it exited 0 in time."""
    root = Path(tempfile.mkdtemp(prefix="cos-sandbox-"))
    try:
        workdir = root / "work"
        workdir.mkdir()
        script = workdir / "program.py"
        script.write_text(code, encoding="utf-8")
        out_path, err_path = root / "stdout.txt", root / "stderr.txt"
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(workdir), "TMPDIR": str(workdir),
               "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1"}
        with out_path.open("wb") as out, err_path.open("wb") as err:
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-I", str(script)],
                    cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                    start_new_session=True, preexec_fn=_limiter(timeout_s, memory_mb, max_processes),
                )
            except (OSError, subprocess.SubprocessError) as e:  # e.g. a limit the system refuses
                return SandboxResult(False, "error", f"could not start the sandbox: {e}")
            try:
                exited = _wait_unreaped(proc.pid, time.monotonic() + timeout_s)
            finally:
                _kill_group(proc.pid)  # the program's leftovers, or the program itself on timeout
                proc.wait()
        stdout, stderr = _read(out_path, tail=False), _read(err_path, tail=True)
        status, detail = _classify(proc.returncode, not exited, stdout, stderr)
        return SandboxResult(status == "passed", status, detail[-MAX_OUTPUT_CHARS:])
    finally:
        shutil.rmtree(root, ignore_errors=True)
