"""``changeflow.spark.concurrently``: Spark jobs from driver threads, in order, errors after
every call has ended."""

from __future__ import annotations

import threading
import time

import pytest

from changeflow.spark import concurrently

pytestmark = pytest.mark.spark


def test_calls_run_in_threads_with_the_callers_properties_and_come_back_in_order(spark) -> None:  # type: ignore[no-untyped-def]
    sc = spark.sparkContext
    sc.setLocalProperty("changeflow.test", "from-the-caller")
    seen: list[tuple[str, str | None]] = []
    at_once = threading.Barrier(3, timeout=60)  # three calls wait for each other

    def job(n: int) -> int:
        at_once.wait()
        seen.append((threading.current_thread().name, sc.getLocalProperty("changeflow.test")))
        return spark.range(n).count()

    try:
        assert concurrently(spark, job, [3, 1, 2], workers=3) == [3, 1, 2]
    finally:
        sc.setLocalProperty("changeflow.test", None)
    assert len({name for name, _ in seen}) == 3
    assert {prop for _, prop in seen} == {"from-the-caller"}


def test_each_call_has_its_own_local_properties(spark) -> None:  # type: ignore[no-untyped-def]
    """A property one call sets (as a query sets its ``spark.sql.execution.id``) is not seen
    by the calls beside it."""
    sc = spark.sparkContext
    at_once = threading.Barrier(3, timeout=60)

    def job(n: int) -> tuple[str | None, str | None]:
        sc.setLocalProperty("changeflow.call", str(n))
        at_once.wait()  # every call has set its own
        mine = sc.getLocalProperty("changeflow.call")
        at_once.wait()  # every call has read
        sc.setLocalProperty("changeflow.call", None)  # as a query resets its execution id
        at_once.wait()
        return mine, sc.getLocalProperty("changeflow.test")

    sc.setLocalProperty("changeflow.test", "from-the-caller")
    try:
        seen = concurrently(spark, job, [0, 1, 2], workers=3)
    finally:
        sc.setLocalProperty("changeflow.test", None)
    assert seen == [("0", "from-the-caller"), ("1", "from-the-caller"),
                    ("2", "from-the-caller")]
    assert sc.getLocalProperty("changeflow.call") is None  # the caller's own are untouched


def test_one_worker_runs_in_the_callers_thread(spark) -> None:  # type: ignore[no-untyped-def]
    names = concurrently(spark, lambda _: threading.current_thread().name, [1, 2], workers=1)
    assert names == [threading.current_thread().name] * 2


def test_an_error_comes_after_every_call_has_ended(spark) -> None:  # type: ignore[no-untyped-def]
    ended: list[int] = []

    def job(n: int) -> int:
        if n == 1:
            raise ValueError("table 1 failed")
        time.sleep(0.5)
        ended.append(n)
        return n

    with pytest.raises(ValueError, match="table 1 failed"):
        concurrently(spark, job, [0, 1, 2, 3], workers=2)
    assert sorted(ended) == [0, 2, 3]
