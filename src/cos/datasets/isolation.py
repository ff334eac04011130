"""Which mechanism keeps sandboxed code away from the machine, and the command line that applies it.

Three levels, strongest first; the first one that works here is used (probed once per process):
- `bwrap` (bubblewrap, `apt-get install bubblewrap`): new pid, network, ipc, uts and cgroup namespaces
  (and a user namespace when not root); the program runs as uid/gid 65534 with no capabilities and
  no_new_privs (as root: a real uid 65534, via util-linux `setpriv`); a filesystem made of read-only
  /usr (+ /bin, /lib, ... links), the Python installation, a private /proc, /dev and /tmp, and the
  program's own work folder, the only writable place that outlives it. So the program cannot write
  or delete outside its folder, read the runner's files or environment, reach any network address
  (its loopback is its own, empty), see or signal processes outside its pid namespace, every
  process it started dies with it (the namespace's init exits when the program does), and its
  process limit (RLIMIT_NPROC) holds because its uid is not 0.
- `unshare` (util-linux `unshare(1)`): pid + network namespaces with a private /proc. The network,
  the runner's processes and environment are out of reach and no descendant outlives the program,
  but files are NOT isolated: the program can read and write whatever its user can.
- `none`: resource limits and a process-group kill only (see sandbox.py).
At these two levels a root runner's program runs as uid 65534 (setpriv) where that uid can run this
Python; then root's files and processes are out of its reach and its process limit holds. Where it
cannot (a Python under /root), the program runs as root: the warning says so.
Anything below `bwrap` is announced by a warning (once per process). `COS_SANDBOX=bwrap|unshare|none`
forces a level; a forced level that does not work here is an error, not a silent downgrade.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

LEVELS = ("bwrap", "unshare", "none")
SANDBOX_UID = 65534  # "nobody": the program's uid under bubblewrap (a real uid as root, mapped otherwise)

# util-linux setpriv: a root runner's program becomes uid/gid 65534, with no capabilities and no_new_privs
SETPRIV = ["setpriv", "--reuid", str(SANDBOX_UID), "--regid", str(SANDBOX_UID), "--clear-groups", "--inh-caps=-all",
           "--bounding-set=-all", "--no-new-privs", "--"]

log = logging.getLogger(__name__)


def _python_roots() -> list[Path]:
    """Folders the sandboxed interpreter needs read-only (its prefixes), outside /usr (bound whole)."""
    exe = Path(os.path.realpath(sys.executable))
    candidates = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, str(exe.parent.parent)}
    roots = sorted({Path(os.path.realpath(c)) for c in candidates})
    # /usr is bound whole; a root inside another root needs no bind of its own.
    return [r for r in roots if not _inside(r, Path("/usr")) and not any(o != r and _inside(r, o) for o in roots)]


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def bwrap_prefix(workdir: Path, readonly: list[Path]) -> list[str]:
    """bwrap's arguments up to the program: namespaces, uid nobody, and the few paths listed above.

    As root, bwrap runs in its privileged mode (no user namespace) and `setpriv` switches to uid/gid
    65534 with no capabilities and no_new_privs before the program starts: a real unprivileged uid,
    so RLIMIT_NPROC applies (the kernel exempts uid 0, also when mapped into a user namespace) and
    nothing outside can be signalled even by number. As another user, a user namespace maps 65534
    to that user."""
    root = os.geteuid() == 0
    args = ["bwrap"] + ([] if root else ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
                                         "--cap-drop", "ALL"])
    args += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
             "--die-with-parent", "--new-session", "--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):  # merged-/usr links, or real folders
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for path in ("/etc/ld.so.cache", "/etc/alternatives"):
        args += ["--ro-bind-try", path, path]
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]  # first: binds below may lie in /tmp
    for python_root in _python_roots():
        args += ["--ro-bind", str(python_root), str(python_root)]
    for path in readonly:
        args += ["--ro-bind", str(path), str(path)]
    args += ["--bind", str(workdir), str(workdir)]
    for parent in sorted({str(p.parent) for p in [*readonly, workdir]} - {"/", "/tmp"}):
        args += ["--chmod", "0755", parent]  # bwrap creates the folders on the way 0700, owned by root
    args += ["--chdir", str(workdir), "--"]
    return args + (SETPRIV if root else [])


def leaves_root(level: str) -> bool:
    """True when a root runner's program runs as uid 65534: always under bwrap; at the lower levels
    where that uid can run this Python (not, e.g., a Python under /root)."""
    if os.geteuid() != 0:
        return False
    return level == "bwrap" or _can_leave_root(level)


@functools.lru_cache(maxsize=None)
def _can_leave_root(level: str) -> bool:
    if shutil.which("setpriv") is None:
        return False
    try:
        with tempfile.TemporaryDirectory(prefix="cos-sandbox-probe-") as folder:
            os.chown(folder, SANDBOX_UID, SANDBOX_UID)
            argv = (unshare_prefix() if level == "unshare" else []) + SETPRIV + [sys.executable, "-I", "-c", "pass"]
            done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=30, cwd=folder)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def program_uid(level: str) -> int:
    """The real uid the program runs as (whose processes RLIMIT_NPROC counts)."""
    return SANDBOX_UID if leaves_root(level) else os.getuid()


def hand_over(level: str, workdir: Path) -> None:
    """Give the work folder and its files to the program's uid (uid 65534 when leaving root); below
    bwrap, which recreates the folders on the way, let it pass through the folder above (0711)."""
    uid = program_uid(level)
    if uid == os.getuid():
        return
    for path in [workdir, *workdir.rglob("*")]:
        os.chown(path, uid, uid)
    if level != "bwrap" and workdir.parent != Path(tempfile.gettempdir()):
        workdir.parent.chmod(0o711)  # the harness lies there; the folder's names stay unlistable


def unshare_prefix() -> list[str]:
    """unshare(1)'s arguments: pid + network namespaces; as a non-root user inside a user namespace."""
    args = ["unshare", "--net", "--pid", "--fork", "--kill-child", "--mount-proc"]
    if os.geteuid() != 0:
        args.insert(1, "--map-root-user")
    return args + ["--"]


def prefix(level: str, workdir: Path, readonly: list[Path]) -> list[str]:
    """The command-line prefix that runs a program under `level`."""
    if level == "bwrap":
        return bwrap_prefix(workdir, readonly)
    drop = SETPRIV if leaves_root(level) else []
    return (unshare_prefix() + drop) if level == "unshare" else drop


def _works(level: str) -> str | None:
    """None if `level` runs a trivial program here, else why not (one line)."""
    tool = shutil.which(level)
    if tool is None:
        return f"`{level}` is not installed"
    if level == "bwrap" and os.geteuid() == 0 and shutil.which("setpriv") is None:
        return "`setpriv` (util-linux), which bubblewrap needs here to leave root, is not installed"
    try:
        with tempfile.TemporaryDirectory(prefix="cos-sandbox-probe-") as folder:
            hand_over(level, Path(folder))
            argv = prefix(level, Path(folder), []) + [sys.executable, "-I", "-c", "pass"]
            done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=30, cwd=folder)
    except (OSError, subprocess.SubprocessError) as e:
        return f"`{level}` could not run: {e}"
    if done.returncode != 0:
        return f"`{level}` failed here: {done.stderr.decode(errors='replace').strip()[-300:]}"
    return None


@functools.lru_cache(maxsize=1)
def level() -> str:
    """The isolation level this process uses (see the module docstring); warns once if below bwrap."""
    forced = os.environ.get("COS_SANDBOX", "").strip()
    if forced:
        if forced not in LEVELS:
            raise ValueError(f"COS_SANDBOX={forced!r}: use one of {', '.join(LEVELS)}")
        why = None if forced == "none" else _works(forced)
        if why:
            raise RuntimeError(f"COS_SANDBOX={forced} but {why}")
        return forced
    reasons = []
    if sys.platform.startswith("linux"):
        for candidate in ("bwrap", "unshare"):
            why = _works(candidate)
            if why is None:
                break
            reasons.append(why)
        else:
            candidate = "none"
    else:
        candidate = "none"
        reasons.append(f"namespaces need Linux (this is {sys.platform})")
    if candidate != "bwrap":
        who = ("uid 65534" if leaves_root(candidate) else "root (this Python is out of reach of uid 65534)"
               if os.geteuid() == 0 else "this user")
        message = (
            f"SANDBOX IS WEAKER THAN IT SHOULD BE: {'; '.join(reasons)}. Generated code runs as {who} with "
            + ("pid and network isolation only" if candidate == "unshare" else "resource limits only")
            + f": it can read and write any file {who} can"
            + ("." if candidate == "unshare" else f", reach the network and signal processes of {who}.")
            + " Install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) for full isolation."
        )
        warnings.warn(message, RuntimeWarning, stacklevel=2)
        log.warning(message)
    return candidate
