"""changeflow benchmarks: ``make bench`` runs ``python -m bench`` (see ``docs/benchmarks.md``)."""
