"""The benchmark framework's pure parts: targets, misses, archives, the exit code."""

from __future__ import annotations

import datetime as dt
import doctest
import json
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:  # bench/ is a top-level directory, not an installed package
    sys.path.insert(0, str(ROOT))

from bench import __main__ as bench_main  # noqa: E402
from bench import results  # noqa: E402
from bench.results import entry, judge, skipped  # noqa: E402


def test_doctests() -> None:
    assert doctest.testmod(results).failed == 0


@pytest.mark.parametrize(("value", "base", "target", "direction", "met"), [
    (1.0, 10.0, 0.2, "<=", True),    # time ratio 0.1
    (3.0, 10.0, 0.2, "<=", False),   # time ratio 0.3
    (2.0, 10.0, 0.2, "<=", True),    # exactly on the target
    (60.0, 100.0, 0.5, ">=", True),  # throughput ratio 0.6
    (40.0, 100.0, 0.5, ">=", False),
])
def test_ratio_is_value_over_baseline_and_judged_in_its_direction(
        value: float, base: float, target: float, direction: str, met: bool) -> None:
    e = entry("x", value=value, unit="s", baseline="b", baseline_value=base, target=target,
              direction=direction)
    assert e["ratio"] == round(value / base, 3)
    assert e["met"] is met and e["direction"] == direction and e["target"] == target


def test_value_targets_ignore_the_ratio() -> None:
    e = entry("p95", value=60.0, unit="ms", baseline="b", baseline_value=10.0, target=50,
              direction="<=", judged="value")
    assert e["ratio"] == 6.0 and e["met"] is False
    assert entry("p95", value=40.0, unit="ms", baseline="b", target=50, direction="<=",
                 judged="value")["met"] is True


def test_reported_entries_are_no_miss_and_missing_figures_are() -> None:
    reported = entry("r", value=1.0, unit="s", baseline="b", baseline_value=2.0)
    assert reported["met"] is None and reported["direction"] is None
    no_baseline = entry("x", value=1.0, unit="s", baseline="b", baseline_value=None,
                        target=0.2, direction="<=")
    assert no_baseline["ratio"] is None and no_baseline["met"] is False
    assert results.misses([reported, no_baseline]) == [no_baseline]


def test_a_skipped_baseline_or_peer_is_a_miss_even_without_a_target() -> None:
    e = skipped("peer", "PGMQ is not installed", unit="msg/s", baseline="PGMQ", target=None,
                direction=None, value=100.0)
    assert e["met"] is False and e["skipped"] == "PGMQ is not installed"
    assert judge(e) is False
    assert "skipped: PGMQ is not installed" in results.describe(e)
    failed = results.failed_suite("apply", "RuntimeError: boom")
    assert results.is_miss(failed) and "suite failed" in results.describe(failed)


def test_a_target_needs_a_known_direction() -> None:
    with pytest.raises(ValueError, match="direction"):
        entry("x", value=1.0, unit="s", baseline="b", baseline_value=1.0, target=1.0)
    with pytest.raises(ValueError, match="direction"):
        results.compare(1.0, 1.0, "<")
    with pytest.raises(ValueError, match="judged"):
        entry("x", value=1.0, unit="s", baseline="b", judged="both")


def test_every_judged_entry_has_the_fields_the_results_promise() -> None:
    e = entry("x", value=1.0, unit="s", baseline="b", baseline_value=5.0, target=0.2,
              direction="<=", figures={"runs": [1.0]}, headline=True)
    for key in ("name", "value", "unit", "baseline", "baseline_value", "ratio", "target",
                "direction", "met", "figures"):
        assert key in e
    assert isinstance(e["target"], float | int) and e["headline"] is True


def test_archive_is_named_by_suite_date_and_commit_and_never_overwrites(
        tmp_path: Path) -> None:
    meta = {"size": "full", "started": "2026-11-28T11:00:00+00:00",
            "ended": "2026-11-28T11:30:00+00:00", "commit": "abc1234def", "dirty": False,
            "load_average": {"start": [1.0, 1.0, 1.0], "end": [2.0, 2.0, 2.0]},
            "machine": {"cores": 2}}
    miss = entry("a.x", value=3.0, unit="s", baseline="b", baseline_value=10.0, target=0.2,
                 direction="<=")
    first = results.archive("apply", [miss], meta, tmp_path)
    second = results.archive("apply", [miss], meta, tmp_path)
    assert first.name == "bench-apply-2026-11-28-abc1234def.json"
    assert second.name == "bench-apply-2026-11-28-abc1234def-2.json"
    doc = json.loads(first.read_text())
    assert doc["suite"] == "apply" and doc["size"] == "full" and doc["misses"] == ["a.x"]
    assert doc["load_average"]["start"] == [1.0, 1.0, 1.0] and doc["machine"]["cores"] == 2
    assert results.archive_name("x", dt.datetime(2026, 1, 2), "c") == "bench-x-2026-01-02-c.json"


def _fake_suite(monkeypatch: pytest.MonkeyPatch, entries: list[dict]) -> None:
    mod = types.ModuleType("fake_bench_suite")
    mod.run = lambda spark, size: [dict(e) for e in entries]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_bench_suite", mod)
    monkeypatch.setattr(bench_main, "SUITES", [("fake", "fake_bench_suite", "pg", False)])


def test_the_run_prints_misses_last_and_exits_non_zero_unless_no_fail(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
        ) -> None:
    ok = entry("fake.ok", value=1.0, unit="s", baseline="b", baseline_value=10.0, target=0.2,
               direction="<=")
    bad = entry("fake.bad", value=9.0, unit="s", baseline="b", baseline_value=10.0,
                target=0.2, direction="<=")
    _fake_suite(monkeypatch, [bad, ok])
    argv = ["--size", "small", "--no-archive", "--out", str(tmp_path / "r.json"),
            "--events", "off"]
    assert bench_main.main(argv) == 1
    out = capsys.readouterr().out
    assert out.rstrip().splitlines()[-1].strip().startswith("fake.bad:")
    assert "MISSED (1 of 2)" in out
    assert bench_main.main([*argv, "--no-fail"]) == 0
    written = json.loads((tmp_path / "r.json").read_text())
    assert {e["suite"] for e in written} == {"fake"}
    _fake_suite(monkeypatch, [ok])
    assert bench_main.main(argv) == 0


def test_a_suite_that_raises_is_a_miss(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    mod = types.ModuleType("fake_bench_suite")

    def boom(spark: object, size: object) -> list[dict]:
        raise RuntimeError("the baseline failed")

    mod.run = boom  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_bench_suite", mod)
    monkeypatch.setattr(bench_main, "SUITES", [("fake", "fake_bench_suite", "pg", False)])
    argv = ["--size", "small", "--no-archive", "--out", str(tmp_path / "r.json"),
            "--events", "off"]
    assert bench_main.main(argv) == 1
    [e] = json.loads((tmp_path / "r.json").read_text())
    assert e["met"] is False and "the baseline failed" in e["error"]
