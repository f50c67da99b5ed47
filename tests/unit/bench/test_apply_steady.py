"""The apply suite's warm figure: the median of the warm applies without maintenance."""

from bench.apply_bench import EARLY, LATE, maintenance_per_apply, steady


def _run(run: int, seconds: float, maintenance: float = 0.03, apply: str = "a") -> dict:
    return {"run": run, "apply": apply, "seconds": seconds,
            "steps": {"maintenance": maintenance}}


def test_steady_is_the_median_of_warm_applies_without_maintenance() -> None:
    profile = [_run(1, 12.8),  # cold: left out
               _run(2, 8.0), _run(3, 7.0), _run(4, 6.0),
               _run(5, 23.0, maintenance=16.5),  # paid the table's rewrite: left out
               _run(6, 5.0), _run(7, 5.5),
               _run(13, 1.0), _run(14, 1.0, apply="nodetect")]  # later suites: left out
    assert steady(profile, EARLY) == 6.0


def test_the_warm_figure_is_the_applies_beside_the_peer() -> None:
    profile = [_run(r, 9.0) for r in EARLY] + [
        _run(LATE[0], 5.0), _run(LATE[1], 4.0, apply="nodetect"),  # another apply: out
        _run(LATE[1], 6.0), _run(LATE[2], 30.0, maintenance=20.0), _run(LATE[3], 5.5),
        _run(LATE[-1] + 1, 1.0)]  # the one-shot runs after: left out
    assert steady(profile) == 5.5


def test_maintenance_per_apply_counts_every_apply_of_the_run() -> None:
    profile = [_run(r, 5.0, maintenance=0.0) for r in range(1, 9)]
    profile[3]["steps"]["maintenance"] = 12.0
    profile[6]["steps"] = {}  # an apply that did not maintain at all
    assert maintenance_per_apply(profile) == 1.5
