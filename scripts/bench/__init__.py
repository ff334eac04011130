"""The benchmark harness: `python -m scripts.bench --help` (__main__.py)."""
