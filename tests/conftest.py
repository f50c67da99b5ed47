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
