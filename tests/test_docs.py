"""The documentation ships whole: relative links resolve inside the repository, the README stays short,
and nothing shipped points outside the repository (../shared exists on the project's machines only)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
SHIPPED = ["src", "configs", "scripts", "docs"]
OUTSIDE = "../" + "shared"  # split so this file does not match itself


def relative_links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)  # code blocks are not links
    return [t for t in LINK.findall(text) if not re.match(r"^[a-z][a-z0-9+.-]*:|^#", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve_inside_the_repository(page: Path) -> None:
    broken = []
    for target in relative_links(page):
        path = (page.parent / target.split("#", 1)[0]).resolve()
        if ROOT.resolve() not in (path, *path.parents) or not path.exists():
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: links that do not resolve inside the repository: {broken}"


def test_readme_is_at_most_300_lines() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= 300, f"README.md has {lines} lines; move detail to docs/"


def test_nothing_shipped_points_outside_the_repository() -> None:
    files = [ROOT / "README.md", *ROOT.glob("main_*.py")]
    for folder in SHIPPED:
        files += [p for p in (ROOT / folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    found = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary files (plots, compiled kernels)
        found += [f"{path.relative_to(ROOT)}:{n}" for n, line in enumerate(text.splitlines(), 1) if OUTSIDE in line]
    assert not found, f"{OUTSIDE} referenced in shipped files: {found}"
