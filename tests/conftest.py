"""Shared fixtures: one SparkSession per test run, temporary staging roots."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local SparkSession for the whole run (UTC, few shuffle partitions)."""
    os.environ.setdefault("CHANGEFLOW_DRIVER_MEMORY", "2g")
    from changeflow.spark import get_session

    session = get_session("changeflow-tests", master="local[2]")
    yield session
    session.stop()
