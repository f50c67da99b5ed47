"""Shared fixtures: one SparkSession per test run, temporary staging roots."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# py4j logs "Closing down clientserver connection" at INFO from a destructor while the
# interpreter exits, after pytest closed the stream: a "Logging error" trace, no failure.
logging.getLogger("py4j").setLevel(logging.WARNING)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local SparkSession for the whole run (UTC, few shuffle partitions)."""
    os.environ.setdefault("CHANGEFLOW_DRIVER_MEMORY", "2g")
    from changeflow.spark import get_session

    session = get_session("changeflow-tests", master="local[2]")
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _close_idle_state_stores() -> Iterator[None]:
    """After each test, the state stores' idle connections are closed: a worker that
    runs hundreds of tests, each with its own stores, would otherwise hold three files
    of each SQLite store open, past select()'s limit of 1023 descriptors."""
    yield
    from changeflow.state import close_idle

    close_idle()


def _weight(item: pytest.Item) -> int:
    """0: runs Airflow (minutes), 1: slow, 2: the rest."""
    if item.get_closest_marker("airflow") is not None:
        return 0
    return 1 if item.get_closest_marker("slow") is not None else 2


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files with Airflow runs first, then slow ones, each file's tests kept together.

    ``make test`` hands whole files to two processes in this order
    (``--dist loadfile --no-loadscope-reorder``): the few minutes-long files start
    first instead of ending the run alone.
    """
    def file_of(item: pytest.Item) -> str:
        return item.nodeid.split("::")[0]

    weight: dict[str, int] = {}
    for item in items:
        weight[file_of(item)] = min(weight.get(file_of(item), 2), _weight(item))
    order = {f: i for i, f in enumerate(dict.fromkeys(file_of(i) for i in items))}
    items.sort(key=lambda i: (weight[file_of(i)], order[file_of(i)]))
