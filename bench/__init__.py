"""changeflow benchmarks: `make bench` runs `python -m bench` (results in bench-results.json)."""
