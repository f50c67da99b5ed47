"""The chaos suite's CI size: kill each stage, overlap runs, cut the destination off.

The long size (``make chaos``: 50+ kills, PostgreSQL state stores) writes its figures
to ``chaos-results.json``; see :mod:`changeflow.testing.chaos`.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from changeflow.testing.chaos import Figures, Rig, concurrency_trial, kill_trial, outage_trial

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def rig(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Rig:
    rig = Rig(Path(tmp_path_factory.mktemp("chaos")), spark, employees=80, changes=40)
    rig.run("capture")
    return rig


@pytest.mark.parametrize(("kind", "point"), [
    ("capture", "capture.after_commit"),
    ("propagation", "propagation.after_destination_commit"),
    ("apply", None),  # a real SIGKILL at a random moment of the apply's work
    # tables published, the apply's positions not committed: the retry recognises them
    ("apply", "apply.during_commit"),
])
def test_a_killed_stage_loses_and_duplicates_nothing(rig: Rig, kind: str,
                                                     point: str | None) -> None:
    figures = Figures()
    kill_trial(rig, figures, kind, point=point, rng=random.Random(7), targets=kind == "apply")
    assert figures.failures == [] and figures.ok
    assert figures.kills + figures.finished_before_kill == 1
    if point is not None:
        assert figures.kills == 1  # the crash point was reached: the process died there
    assert figures.messages > 0


def test_three_concurrent_propagations_duplicate_nothing(rig: Rig) -> None:
    figures = Figures()
    concurrency_trial(rig, figures, "propagation", runs=3, targets=False)
    assert figures.failures == [] and figures.ok


def test_an_unwritable_destination_builds_a_backlog_that_drains(rig: Rig) -> None:
    figures = Figures()
    out = outage_trial(rig, figures)
    assert figures.failures == [], out
    assert out["backlog"] > 0 and out["kept"] == out["backlog"]
    assert out["failures"] == 16 and out["disabled"] and out["reason"] == "failures"
    assert "schedule_disabled" in out["alerts"] or any("disabl" in a for a in out["alerts"])
    assert "cannot be written" in out["errors"][0]
    assert out["left_after_enable"] == 0
