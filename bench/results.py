"""What a benchmark entry is, whether it met its target, and where a run is archived.

Every entry a suite returns is a dict built by :func:`entry` (or :func:`skipped`)::

    {"name": "apply.changes", "suite": "apply",
     "value": 1.9, "unit": "s",                       # the candidate's figure
     "baseline": "CREATE OR REPLACE TABLE ... AS SELECT (Spark, Iceberg)",
     "baseline_value": 14.2,                          # the baseline's figure, same unit
     "ratio": 0.134,                                  # value / baseline_value
     "target": 0.2, "direction": "<=", "judged": "ratio",
     "met": true, "figures": {...}}

``ratio`` is always ``value / baseline_value`` in the same unit: for seconds lower is
better (``direction`` ``<=``), for a rate higher is better (``>=``). ``judged`` says
whether the target applies to the ratio or to the value itself (an absolute target such
as "p95 <= 50 ms"). An entry without a target is *reported* (``met`` is None) and is no
miss; an entry with a target that was not met, one whose baseline or peer could not be
measured (``skipped`` holds the reason) and a suite that failed are misses.

Everything here is pure (no Spark, no database): the unit tests run it directly.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

DIRECTIONS = ("<=", ">=")
JUDGED = ("ratio", "value")
RESULTS_DIR = Path(__file__).resolve().parent.parent / "docs" / "results"


def _round(x: float | None, digits: int = 3) -> float | None:
    """``x`` rounded to ``digits`` decimals (ratios).

    >>> _round(0.12345), _round(None)
    (0.123, None)
    """
    if x is None:
        return None
    return round(float(x), digits)


def _significant(x: float | None, digits: int = 5) -> float | None:
    """``x`` to ``digits`` significant digits (figures of any magnitude: a 0.1 ms poll
    keeps its digits as a 36 s rewrite does).

    >>> _significant(0.000123456), _significant(36.16581), _significant(None)
    (0.00012346, 36.166, None)
    """
    if x is None:
        return None
    return float(f"{float(x):.{digits}g}")


def compare(quantity: float | None, target: float, direction: str) -> bool:
    """Whether ``quantity`` meets ``target`` in ``direction`` (None never does).

    >>> compare(0.19, 0.2, "<="), compare(0.21, 0.2, "<="), compare(None, 0.2, "<=")
    (True, False, False)
    >>> compare(0.5, 0.5, ">=")
    True
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, not {direction!r}")
    if quantity is None:
        return False
    return quantity <= target if direction == "<=" else quantity >= target


def judge(e: dict[str, Any]) -> bool | None:
    """Whether an entry met its target: None when it has none (reported only).

    A skipped entry, or one whose judged quantity is missing, is a miss.
    """
    if e.get("skipped") or e.get("error"):
        return False
    if e.get("target") is None:
        return None
    quantity = e.get("ratio") if e.get("judged", "ratio") == "ratio" else e.get("value")
    return compare(quantity, float(e["target"]), str(e["direction"]))


def entry(name: str, *, value: float | None, unit: str, baseline: str,
          baseline_value: float | None = None, target: float | None = None,
          direction: str | None = None, judged: str = "ratio",
          figures: dict[str, Any] | None = None, headline: bool = False,
          note: str | None = None) -> dict[str, Any]:
    """One benchmark figure, judged against its target.

    Args:
        value: the candidate's figure, in ``unit``.
        baseline: what the baseline (or peer) is, in words.
        baseline_value: the baseline's figure in the same unit (None: an absolute
            target, no baseline figure).
        target: the number the judged quantity must meet (None: reported only).
        direction: ``<=`` or ``>=``; required with a target.
        judged: ``ratio`` (value / baseline_value) or ``value``.
        figures: everything else worth keeping (runs, cold figures, sizes).
        headline: shown in the README's table.

    Raises:
        ValueError: a target without a direction, or an unknown direction or judged.
    """
    if target is not None and direction not in DIRECTIONS:
        raise ValueError(f"{name}: a target needs a direction ({DIRECTIONS})")
    if judged not in JUDGED:
        raise ValueError(f"{name}: judged must be one of {JUDGED}")
    ratio = (value / baseline_value if value is not None and baseline_value
             else None)
    e: dict[str, Any] = {
        "name": name, "value": _significant(value), "unit": unit, "baseline": baseline,
        "baseline_value": _significant(baseline_value), "ratio": _round(ratio),
        "target": target, "direction": direction if target is not None else None,
        "judged": judged, "figures": figures or {}}
    if headline:
        e["headline"] = True
    if note:
        e["note"] = note
    e["met"] = judge(e)
    return e


def skipped(name: str, reason: str, *, unit: str, baseline: str, target: float | None,
            direction: str | None, judged: str = "ratio", value: float | None = None,
            figures: dict[str, Any] | None = None, headline: bool = False) -> dict[str, Any]:
    """An entry whose baseline or peer could not be measured: a miss, with the reason."""
    e = entry(name, value=value, unit=unit, baseline=baseline, target=target,
              direction=direction if target is not None else None, judged=judged,
              figures=figures, headline=headline)
    e["skipped"] = reason
    e["met"] = False
    return e


def failed_suite(suite: str, error: str) -> dict[str, Any]:
    """The entry of a suite that raised: a miss."""
    return {"name": f"{suite}.error", "suite": suite, "value": None, "unit": "",
            "baseline": "", "baseline_value": None, "ratio": None, "target": None,
            "direction": None, "judged": "ratio", "figures": {}, "error": error,
            "met": False}


def is_miss(e: dict[str, Any]) -> bool:
    """A target not met, a skipped baseline or peer, or a failed suite."""
    return e.get("met") is False


def misses(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The entries that count as misses."""
    return [e for e in entries if is_miss(e)]


def describe(e: dict[str, Any]) -> str:
    """One line: name, value, ratio, target and whether it was met.

    >>> describe(entry("x", value=2.0, unit="s", baseline="b", baseline_value=10.0,
    ...                target=0.2, direction="<="))
    'x: 2 s vs 10 s = 0.2 (target <= 0.2): met'
    """
    if e.get("error"):
        return f"{e['name']}: suite failed: {e['error']}"
    target = (f" (target {e['direction']} {e['target']:g}"
              f"{'' if e.get('judged', 'ratio') == 'ratio' else ' ' + e['unit']})"
              if e.get("target") is not None else " (reported)")
    if e.get("skipped"):
        return f"{e['name']}: skipped: {e['skipped']}{target}: missed"
    value = "-" if e.get("value") is None else f"{e['value']:g} {e['unit']}"
    base = "" if e.get("baseline_value") is None else \
        f" vs {e['baseline_value']:g} {e['unit']}"
    ratio = "" if e.get("ratio") is None else f" = {e['ratio']:g}"
    verdict = {True: "met", False: "missed", None: "reported"}[e.get("met")]
    return f"{e['name']}: {value}{base}{ratio}{target}: {verdict}"


# -- archiving -------------------------------------------------------------------------------
def machine() -> dict[str, Any]:
    """What the run ran on: cores, processor, memory, system, Python."""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem = next((int(x.split()[1]) * 1024 for x in
                    Path("/proc/meminfo").read_text().splitlines()
                    if x.startswith("MemTotal")), None)
    except OSError:
        mem = None
    return {"cores": os.cpu_count(), "cpu": cpu, "memory_bytes": mem,
            "system": platform.platform(), "python": platform.python_version(),
            "hostname": platform.node()}


def load_average() -> list[float] | None:
    """The 1-, 5- and 15-minute load averages (None where the system has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def commit(root: Path) -> tuple[str, bool]:
    """The work tree's HEAD (short) and whether its bench/ or include/ has local changes."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True,
                              text=True, check=False).stdout.strip()

    head = git("rev-parse", "--short=10", "HEAD") or "unknown"
    dirty = bool(git("status", "--porcelain", "--", "bench", "include"))
    return head, dirty


def archive_name(suite: str, when: dt.datetime, head: str) -> str:
    """``bench-<suite>-<date>-<commit>.json``.

    >>> archive_name("apply", dt.datetime(2026, 11, 28, 12, 0), "abc1234")
    'bench-apply-2026-11-28-abc1234.json'
    """
    return f"bench-{suite}-{when:%Y-%m-%d}-{head}.json"


def archive(suite: str, entries: list[dict[str, Any]], meta: dict[str, Any],
            directory: Path = RESULTS_DIR) -> Path:
    """Write one suite's run as ``docs/results/bench-<suite>-<date>-<commit>.json``
    (a second run of the same day and commit gets ``-2``, ``-3``...)."""
    when = dt.datetime.fromisoformat(meta["ended"])
    name = archive_name(suite, when, meta["commit"])
    path = directory / name
    n = 2
    while path.exists():
        path = directory / name.replace(".json", f"-{n}.json")
        n += 1
    directory.mkdir(parents=True, exist_ok=True)
    doc = {"suite": suite, **meta, "entries": entries,
           "misses": [e["name"] for e in misses(entries)]}
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    return path
