"""Reproduction reports (scripts/reproduce.py): a declared grid -> runs -> paper-style tables and plots.

grid.py      load and check a grid YAML (configs/reproduce/)
cells.py     expand a grid into cells, each with its checked run configuration
runs.py      run the cells (skip finished, resume partial, re-run busy ones, one failure never stops the rest);
             read results
intervals.py 95% intervals from per-prompt records: paired bootstrap speedup, Wilson / bootstrap quality
paper.py     the published numbers of the CoS paper (Fu et al., ICML 2025, arXiv 2502.01662, Tables 2-8) as data
tables.py    results -> the paper's tables: their data (report.json) and markdown (report.md)
plots.py     the tables' data -> matplotlib PNGs (Agg canvas)
document.py  report.md, report.json, the plots, README_snippet.md
"""

from .document import readme_markers, readme_snippet, update_readme, write_report
from .cells import Cell, expand
from .grid import Grid, load_grid
from .runs import cell_dir, cell_state, run_cells

__all__ = ["Cell", "Grid", "cell_dir", "cell_state", "expand", "load_grid", "readme_snippet", "readme_markers",
           "run_cells", "update_readme", "write_report"]
