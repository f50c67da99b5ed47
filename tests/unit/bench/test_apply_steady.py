"""The apply suite's figures: the warm apply (the median of the warm applies without
maintenance) and the mean apply over a maintenance cycle."""

import pytest
from bench.apply_bench import EARLY, cycle_figures, maintenance_cycle, maintenance_per_apply, steady

LATE = range(19, 23)


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
    assert steady(profile, LATE) == 5.5


def test_maintenance_per_apply_counts_every_apply_of_the_run() -> None:
    profile = [_run(r, 5.0, maintenance=0.0) for r in range(1, 9)]
    profile[3]["steps"]["maintenance"] = 12.0
    profile[6]["steps"] = {}  # an apply that did not maintain at all
    assert maintenance_per_apply(profile) == 1.5


def test_the_cycle_ends_with_the_apply_whose_maintenance_rewrote_the_last_data_file() -> None:
    applied: list[int] = []
    left = iter([16, 16, 12, 12, 12, 12, 12, 8, 8, 8, 8, 8, 4, 0, 0])  # none at apply 16

    assert maintenance_cycle(applied.append, lambda: next(left)) == (16, 16, True)
    assert applied == list(range(3, 17))
    # a rewrite before apply 12 ends the cycle; applies 3-12 all run all the same
    early = iter([12, 8, 4, 0, 0, 0, 0, 0, 0, 0, 0])  # the table's rewrite at apply 6
    assert maintenance_cycle(lambda r: None, lambda: next(early)) == (12, 6, True)
    flat = iter([16] * 30)
    assert maintenance_cycle(lambda r: None, lambda: next(flat), cap=20) == (20, 20, False)


def test_the_cycle_mean_counts_its_maintenance_and_reports_the_windows() -> None:
    profile = [_run(1, 15.0), _run(2, 7.0)] + [_run(r, 5.0) for r in range(3, 15)] + [
        _run(15, 25.0, maintenance=20.0), _run(16, 9.0, apply="nodetect"), _run(17, 1.0)]
    mean, figures = cycle_figures(profile, {"end": 15, "rewritten": True,
                                            "maintained_after": 30.0}, base=50.0)
    assert mean == pytest.approx((12 * 5.0 + 25.0) / 13)  # applies 3-15, the rewrite in
    assert figures["cycle_applies"] == 13 and figures["maintenance_after_seconds"] is None
    assert figures["first_ten_seconds"] == 5.0 and figures["first_ten_ratio"] == 0.1
    assert figures["worst_ten_seconds"] == 7.0 and figures["worst_ten"] == "applies 6-15"
    # no apply rewrote the deleted rows: the full maintenance that followed counts
    mean, figures = cycle_figures(profile, {"end": 14, "rewritten": False,
                                            "maintained_after": 30.0}, base=50.0)
    assert mean == pytest.approx((12 * 5.0 + 30.0) / 12)
    assert figures["maintenance_after_seconds"] == 30.0
    # a cycle that ends before apply 12: the first ten are still applies 3-12
    early = [_run(1, 15.0), _run(2, 7.0)] + [_run(r, 5.0) for r in range(3, 8)] + [
        _run(8, 25.0, maintenance=20.0)] + [_run(r, 3.0) for r in range(9, 13)]
    mean, figures = cycle_figures(early, {"end": 8, "rewritten": True,
                                          "maintained_after": 30.0}, base=50.0)
    assert mean == pytest.approx((5 * 5.0 + 25.0) / 6) and figures["cycle_applies"] == 6
    assert figures["first_ten_seconds"] == pytest.approx((5 * 5.0 + 25.0 + 4 * 3.0) / 10)


def test_the_repeated_figure_is_judged_on_the_cycle_mean() -> None:
    from bench.apply_bench import results

    profile = ([_run(1, 15.0), _run(2, 7.0)] + [_run(r, 5.0) for r in range(3, 30)]
               + [_run(30, 25.0, maintenance=20.0)]
               + [_run(r, 4.0) for r in range(37, 41)])
    merge = {"seconds": 5.0}
    reads = {"spark_seconds": 2.0}
    out = {e["name"]: e for e in results(
        {}, [30.0, 28.0, 27.0], 15.0, 7.0, {"end": 30, "rewritten": True,
                                            "maintained_after": 30.0}, range(37, 41),
        [5.0], [4.5], merge, {"skipped": "no"}, reads, reads, profile)}
    repeated = out["apply.repeated"]
    assert repeated["value"] == pytest.approx((27 * 5.0 + 25.0) / 28, abs=1e-4)
    assert repeated["ratio"] == pytest.approx(repeated["value"] / 27.0, abs=1e-3)
    assert repeated["met"] is True and out["apply.changes"]["value"] == 4.0
