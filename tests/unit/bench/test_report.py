"""The README's benchmark table, generated from archived results."""

from __future__ import annotations

import doctest
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:  # bench/ is a top-level directory, not an installed package
    sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402
from bench.results import entry, skipped  # noqa: E402


def _run(directory: Path, suite: str, ended: str, size: str, entries: list[dict],
         name: str | None = None) -> None:
    doc = {"suite": suite, "size": size, "ended": ended, "commit": "abc1234", "dirty": False,
           "entries": entries}
    (directory / (name or f"bench-{suite}-{ended[:10]}-{size}.json")).write_text(json.dumps(doc))


def test_doctests() -> None:
    assert doctest.testmod(report).failed == 0


def test_newest_prefers_full_size_then_the_latest_and_ignores_other_files(
        tmp_path: Path) -> None:
    e = entry("apply.changes", value=1.0, unit="s", baseline="b", baseline_value=10.0,
              target=0.2, direction="<=", headline=True)
    _run(tmp_path, "apply", "2026-11-27T10:00:00+00:00", "full", [e])
    _run(tmp_path, "apply", "2026-11-28T10:00:00+00:00", "small", [e])
    _run(tmp_path, "apply", "2026-11-28T09:00:00+00:00", "full", [e], "bench-apply-x.json")
    (tmp_path / "bench-apply-legacy.json").write_text(json.dumps([{"name": "old"}]))
    (tmp_path / "bench-broken.json").write_text("{")
    latest = report.newest(report.load_archives(tmp_path))
    assert latest["apply"]["file"] == "bench-apply-x.json"
    _run(tmp_path, "aq", "2026-11-28T10:00:00+00:00", "small", [e])
    assert report.newest(report.load_archives(tmp_path))["aq"]["size"] == "small"


def test_the_table_shows_headlines_misses_and_skipped_peers(tmp_path: Path) -> None:
    met = entry("apply.changes", value=1.0, unit="s", baseline="a rewrite",
                baseline_value=10.0, target=0.2, direction="<=", headline=True)
    missed = entry("apply.vs_merge_into", value=5.0, unit="s", baseline="MERGE INTO",
                   baseline_value=2.0, target=1.0, direction="<=", headline=True)
    peer = skipped("pg.vs_pgmq", "PGMQ is not installed", unit="msg/s", baseline="PGMQ",
                   target=0.5, direction=">=", headline=True)
    hidden = entry("apply.other", value=3.0, unit="s", baseline="b", baseline_value=1.0,
                   target=1.0, direction="<=")
    _run(tmp_path, "apply", "2026-11-28T10:00:00+00:00", "full", [met, missed, peer, hidden])
    latest = report.newest(report.load_archives(tmp_path))
    text = report.generated(latest, headline_only=True)
    lines = [x for x in text.splitlines() if x.startswith("| apply") or x.startswith("| pg")]
    assert len(lines) == 3
    assert "| met |" in lines[0] and "<= 0.2" in lines[0] and "2026-11-28 full @abc1234" in lines[0]
    assert "**missed**" in lines[1] and "2.5" in lines[1]
    assert "skipped: PGMQ is not installed" in lines[2] and "**missed**" in lines[2]
    assert "apply: 1 more entries, 1 missed" in text
    assert "1 of 4 judged entries met" in text and "apply.other" in text
    full = report.generated(latest, headline_only=False)
    assert "| apply.other |" in full


def test_value_targets_show_their_unit() -> None:
    e = entry("p95", value=40.0, unit="ms", baseline="b", target=50, direction="<=",
              judged="value")
    assert report.target_text(e) == "<= 50.0 ms"
    assert report.target_text(entry("r", value=1.0, unit="s", baseline="b")) == "-"


def test_replace_between_keeps_the_rest_and_needs_the_markers() -> None:
    text = f"intro\n{report.START}\nold table\n{report.END}\nafter\n"
    out = report.replace_between(text, "new table")
    assert out == f"intro\n{report.START}\nnew table\n{report.END}\nafter\n"
    assert report.replace_between(out, "new table") == out
    with pytest.raises(ValueError, match="markers"):
        report.replace_between("no markers", "x")


def test_the_readme_has_the_markers() -> None:
    text = (ROOT / "README.md").read_text()
    assert report.START in text and report.END in text


def test_a_suite_without_an_archive_is_shown_as_missing(tmp_path: Path) -> None:
    e = entry("apply.changes", value=1.0, unit="s", baseline="b", baseline_value=10.0,
              target=0.2, direction="<=", headline=True)
    _run(tmp_path, "apply", "2026-11-28T10:00:00+00:00", "full", [e])
    latest = report.newest(report.load_archives(tmp_path))
    text = report.generated(latest, headline_only=True, expected=["apply", "mcq"])
    assert "| mcq | no archived run |" in text
    assert "Suites without an archived run: mcq." in text
