"""Real windows with real waits: latency inside a window, disable mid-window, backfill,
UNDELIVERABLE messages, bad source batches set aside."""

from __future__ import annotations

import datetime as dt
import functools
import threading
import time
from typing import Any

import pytest

from changeflow.config import PipelineConfig
from changeflow.propagation import propagate_once
from changeflow.queues.catalog import NewBatch
from changeflow.queues.quarantine import quarantined
from changeflow.schedules import probe
from changeflow.schedules.undeliverable import exception_queue
from changeflow.schedules.window import ensure_schedule, run_window
from changeflow.sites import open_pipeline, queue_site

from .conftest import DST, SRC

pytestmark = [pytest.mark.spark, pytest.mark.slow]
CONSUMER = "apply:ap"


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _enqueue_and_wait(cfg: PipelineConfig, msg_id: str, scn: int) -> float:
    probe.enqueue_probes(cfg, SRC, [msg_id], scn=scn)
    enqueued = time.monotonic()
    while msg_id not in probe.arrived(cfg, DST, CONSUMER) and time.monotonic() - enqueued < 40:
        time.sleep(0.05)
    return time.monotonic() - enqueued


def test_message_enqueued_mid_window_arrives_within_latency(spark: Any,
                                                            pipeline: PipelineConfig) -> None:
    start = _now()
    out: dict[str, Any] = {}
    t = threading.Thread(target=lambda: out.update(report=run_window(
        spark, pipeline, "p12", start=start, end=start + dt.timedelta(seconds=90))))
    t.start()
    # the first batch pays Spark's and the quality suites' warm-up: not what is measured
    _enqueue_and_wait(pipeline, "m0", 1)
    time.sleep(2.5)  # the window is open and its queue empty: it polls every second
    delay = _enqueue_and_wait(pipeline, "m1", 2)
    assert sorted(probe.arrived(pipeline, DST, CONSUMER)) == ["m0", "m1"]
    # disabling while the window runs stops it within a few seconds, long before its end
    store = ensure_schedule(pipeline, "p12", start)
    store.set_disabled("p12", True, "user")
    disabled = time.monotonic()
    t.join(timeout=15)
    assert not t.is_alive() and time.monotonic() - disabled < 5
    report = out["report"]
    assert report.stopped == "disabled" and report.messages == 2
    row = store.require("p12")
    assert (row.stats.total_number, row.stats.windows, row.state.failures) == (2, 1, 0)
    assert row.stats.max_number == 2
    # within latency plus one batch: a pass takes what its Spark jobs and quality checks take
    one_batch = row.stats.total_time / 2
    assert delay <= 1 + one_batch + 1.5, f"{delay:.1f} s, a batch takes {one_batch:.1f} s"
    assert row.stats.total_bytes > 0 and row.last_run is not None and row.process is None


def test_backfilled_windows_repropagate_without_duplicates(spark: Any,
                                                          pipeline: PipelineConfig) -> None:
    probe.enqueue_probes(pipeline, SRC, [f"b{i}" for i in range(5)], scn=10)
    past = _now() - dt.timedelta(days=1)
    crashing = functools.partial(propagate_once, crash_after_destination_commit=True)
    first = run_window(spark, pipeline, "p12", start=past, end=past + dt.timedelta(hours=1),
                       propagate=crashing)
    assert not first.ok  # committed at the destination, crashed before the source ack
    store = ensure_schedule(pipeline, "p12", past)
    with store.store.begin() as c:  # let the backfill retry now rather than after 30 s
        from changeflow.schedules.store import schedules

        c.execute(schedules.update().values(next_retry=None))
    for hour in range(3):  # backfill three windows of that day
        w_start = past + dt.timedelta(hours=hour)
        rep = run_window(spark, pipeline, "p12", start=w_start,
                         end=w_start + dt.timedelta(hours=1))
        assert rep.ok and rep.passes == 1
    assert sorted(probe.arrived(pipeline, DST, CONSUMER)) == [f"b{i}" for i in range(5)]
    assert store.require("p12").state.failures == 0


def test_bad_source_batch_is_set_aside_and_the_rest_flows(spark: Any,
                                                          pipeline: PipelineConfig) -> None:
    open_pipeline(pipeline)
    rt, q = queue_site(pipeline, SRC)
    batch_id, path = rt.catalog.new_batch_path(q)
    spark.createDataFrame([(1, "not an LCR")], "id int, payload string").write.parquet(path)
    bad = rt.catalog.commit_batch(q, NewBatch(batch_id=batch_id, path=path, n_messages=1,
                                              n_bytes=100, producer="bad-app"))
    past = _now() - dt.timedelta(hours=2)
    rep = run_window(spark, pipeline, "p12", start=past, end=past + dt.timedelta(hours=1))
    assert rep.ok and rep.undeliverable == 0
    assert "SchemaMismatchError" in rep.errors[0]
    [held] = quarantined(rt.catalog, q)
    assert held.seq == bad and held.origin == "propagation:p12"
    assert not rt.catalog.pending(q, "propagation:p12")  # out of the way: no retries burnt
    store = ensure_schedule(pipeline, "p12", past)
    assert store.require("p12").state.failures == 0


def test_dropped_destination_marks_messages_undeliverable(spark: Any,
                                                         pipeline: PipelineConfig) -> None:
    probe.enqueue_probes(pipeline, SRC, ["m1", "m2"], scn=1)
    rt, q = queue_site(pipeline, SRC)
    dst_rt, dst_q = queue_site(pipeline, DST)
    dst_rt.catalog.drop_queue(dst_q)
    past = _now() - dt.timedelta(hours=2)
    rep = run_window(spark, pipeline, "p12", start=past, end=past + dt.timedelta(hours=1))
    assert rep.undeliverable == 2 and rep.ok
    assert "QueueDroppedError" in rep.errors[0]
    assert not dst_rt.catalog.exists(dst_q)  # the pass did not re-create it
    store = ensure_schedule(pipeline, "p12", past)
    [rec] = store.undeliverable("p12")
    assert rec["state"] == "UNDELIVERABLE" and rec["n_messages"] == 2
    exq = exception_queue(q)
    assert rt.catalog.info(exq).batches == 1
    assert rt.catalog.properties(exq)["queue_type"] == "exception"
    assert not rt.catalog.pending(q, "propagation:p12")
    assert store.require("p12").state.failures == 0
    rt.catalog.add_consumer(exq, "reader")
    [copy] = rt.catalog.pending(exq, "reader")
    assert spark.read.parquet(copy.path).count() == 2
