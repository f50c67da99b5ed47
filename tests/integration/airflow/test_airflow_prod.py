"""Airflow as deployed: the LocalExecutor on a PostgreSQL metadata database, three
propagations with overlapping windows and an apply at once, one destination unavailable
for one window (:mod:`changeflow.testing.airflow_prod`, also ``make airflow-prod``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from changeflow.testing import airflow_prod

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.long, pytest.mark.postgres]


def test_overlapping_windows_and_an_apply_under_the_local_executor(tmp_path: Path) -> None:
    result = airflow_prod.run(tmp_path / "prod", windows=3)
    logs = result.pop("logs")
    assert airflow_prod.check(result) == [], (result, logs)
    # at least three windows of each propagation ran, and the outage's window was red
    for p in airflow_prod.PROPAGATIONS:
        assert len([r for r in result["runs"][p] if r[0] == "scheduled"]) >= 3
        assert len(result["sent"][p]) > 0
    assert result["outage_runs"]
    assert result["stats"]["pc"]["windows"] >= 3
