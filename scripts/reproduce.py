"""One command from a declared grid to a report folder with paper-style tables and plots.

    python scripts/reproduce.py --grid cpu-small                  # run (or resume) every cell, then report
    python scripts/reproduce.py --grid cpu-small --dry-run        # list the cells and what is done; load nothing
    python scripts/reproduce.py --grid cpu-small --report-only    # rebuild the report from the runs on disk
    python scripts/reproduce.py --grid cpu-small --readme-snippet # also write <report>/README_snippet.md, and put
                                                                  # it in README.md between <!-- reproduce:<grid> -->
                                                                  # and <!-- /reproduce:<grid> --> where those are
    python scripts/reproduce.py --grid path/to/grid.yaml --out reports/mine
    python scripts/reproduce.py collect multirun/cd [more folders] [--out table.md]   # any runs' summaries
                                                                  # as one markdown table (cos/report/collect.py)

A grid is configs/reproduce/<name>.yaml or any YAML file (the layout is documented in cpu-small.yaml).
Each cell runs into <report>/runs/<cell>/ with compare_with=standard; a rerun skips finished cells
and resumes partial ones. Report folder: --out, default reports/<grid name>/.
Exit codes: 0 done, 1 some cells failed (the others are kept), 2 bad grid (one line), 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
if importlib.util.find_spec("cos") is None:  # a checkout without `pip install -e .`
    sys.path.insert(0, str(ROOT / "src"))

from cos.report import (cell_dir, cell_state, expand, load_grid, readme_markers,  # noqa: E402
                        readme_snippet, run_cells, update_readme, write_report)
from cos.report.collect import collect  # noqa: E402
from cos.report.runs import BUSY_RETRIES, fill_cell_gaps  # noqa: E402
from cos.runner.cli import USER_ERRORS, load_env  # noqa: E402
from cos.runner.resolve import resolve_model  # noqa: E402


def shown(path: Path) -> str:
    """A path as the report shows it: relative to the repository when inside it."""
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def dry_run(grid, cells, out: Path) -> None:
    """List every cell with what its folder holds, and where each model name resolves. Loads nothing."""
    states = [cell_state(cell_dir(out, c), c.config) for c in cells]
    for k, (cell, state) in enumerate(zip(cells, states), start=1):
        prompts = f", {state.prompts} prompts" if state.prompts else ""
        print(f"cell {k}/{len(cells)}: {cell.id} ({state.status}{prompts})")
    counts = Counter(s.status for s in states)
    print(f"{len(cells)} cells: {counts['done']} done, {counts['partial']} partial, {counts['todo']} to run, "
          f"{counts['stale']} stale; report folder {out}")
    for name in dict.fromkeys(m for pair in grid.pairs.values() for m in pair.members):
        try:
            found = resolve_model(name, "model")
            print(f"model {name}: " + ("a hub id (downloaded on first use)" if found == name else found))
        except USER_ERRORS as e:
            print(f"model {name}: not found ({' '.join(str(e).split())})")


def collect_main(argv: list[str]) -> int:
    """`collect FOLDER ... [--out FILE]`: every run's summary.json below the folders as one markdown table."""
    parser = argparse.ArgumentParser(prog="reproduce.py collect", description=collect.__doc__)
    parser.add_argument("folders", nargs="+", type=Path, help="sweep or run folders (searched recursively)")
    parser.add_argument("--out", type=Path, help="also write the table to this file")
    args = parser.parse_args(argv)
    try:
        table = collect(args.folders)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    sys.stdout.write(table)
    if args.out:
        args.out.write_text(table, encoding="utf-8")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["collect"]:
        return collect_main(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", required=True, help="a grid name (configs/reproduce/<name>.yaml) or a YAML file")
    parser.add_argument("--out", type=Path, help="the report folder (default: reports/<grid name>/)")
    parser.add_argument("--dry-run", action="store_true", help="list the cells and how many are done; run nothing")
    parser.add_argument("--report-only", action="store_true", help="rebuild the report from existing runs")
    parser.add_argument("--readme-snippet", action="store_true",
                        help="also write <report>/README_snippet.md, and into README.md between the grid's markers")
    parser.add_argument("--busy-retries", type=int, default=BUSY_RETRIES,
                        help=f"re-run a cell measured on a busy machine at most this many times "
                             f"(default {BUSY_RETRIES})")
    args = parser.parse_args(argv)
    # 1. the whole grid checked, every cell's configuration included, before anything runs
    try:
        grid = load_grid(args.grid, CONFIGS)
        cells = expand(grid, CONFIGS)
    except ValueError as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    out = args.out if args.out is not None else ROOT / "reports" / grid.name
    if args.dry_run:
        dry_run(grid, cells, out)
        return 0
    # 2. run what is not done (nothing already finished is loaded or rerun)
    failures = []
    if not args.report_only:
        try:
            failures = run_cells(cells, out, echo=lambda line: print(line, flush=True), busy_retries=args.busy_retries)
            fill_cell_gaps(cells, out, echo=lambda line: print(line, flush=True))
        except KeyboardInterrupt:
            print("interrupted: finished cells and prompts are kept; rerun the same command to resume", file=sys.stderr)
            return 130
    # 3. the report, from the files on disk
    command = f"python scripts/reproduce.py --grid {args.grid}" + (f" --out {args.out}" if args.out else "")
    data = write_report(grid, cells, out, command, shown(grid.path))
    done = sum(r["status"] == "done" for r in data["cells"])
    print(f"report: {out / 'report.md'} ({done}/{len(cells)} cells with results)")
    if args.readme_snippet:
        snippet = readme_snippet(data, grid, out, ROOT)
        (out / "README_snippet.md").write_text(snippet, encoding="utf-8")
        print(f"README snippet: {out / 'README_snippet.md'}")
        readme = ROOT / "README.md"
        if args.out is None and update_readme(readme, grid.name, snippet):  # the repository's own report only
            print(f"README.md: results section between {' and '.join(readme_markers(grid.name))} regenerated")
    for cell_id, message in failures:
        print(f"failed: {cell_id}: {message}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    load_env(ROOT)
    sys.exit(main())
