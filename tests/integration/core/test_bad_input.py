"""Bad input: each case gets an error naming the file or key, and changes nothing."""

from __future__ import annotations

import os

import pytest

from changeflow import lcr
from changeflow.apply import errorq
from changeflow.apply.engine import apply_once, targets_of
from changeflow.capture.snapshot import run_capture
from changeflow.errors import QueueDataError, QueueNotFoundError, SchemaMismatchError
from changeflow.propagation import propagate_once
from changeflow.queues import io as qio
from changeflow.sites import queue_site

pytestmark = pytest.mark.spark
REGIONS = "region_id int, region_name string"


def captured(spark, pipeline, snapshot):  # type: ignore[no-untyped-def]
    snapshot("hr.regions", 1, [(1, "Europe"), (2, "Americas")], REGIONS)
    run_capture(spark, pipeline, "cap")
    rt, q = queue_site(pipeline, "strmadmin.streams_queue@site1")
    return rt, q


def state(pipeline):  # type: ignore[no-untyped-def]
    """What must not change: positions and depths of both queues."""
    out = []
    for ref in ("strmadmin.streams_queue@site1", "strmadmin.streams_queue@site2"):
        rt, q = queue_site(pipeline, ref)
        info = rt.catalog.info(q)
        out.append((info.depth, [(c.consumer, c.position) for c in info.consumers]))
    return out


def test_missing_batch_files(spark, pipeline, snapshot) -> None:  # type: ignore[no-untyped-def]
    rt, q = captured(spark, pipeline, snapshot)
    batch = rt.catalog.pending(q, "propagation:p12")[0]
    for f in os.listdir(batch.path):
        os.remove(os.path.join(batch.path, f))
    before = state(pipeline)
    with pytest.raises(QueueDataError, match=rf"batch {batch.seq} of queue {q}.*missing"):
        propagate_once(spark, pipeline, "p12")
    assert state(pipeline) == before


def test_corrupt_batch_file(spark, pipeline, snapshot) -> None:  # type: ignore[no-untyped-def]
    rt, q = captured(spark, pipeline, snapshot)
    batch = rt.catalog.pending(q, "propagation:p12")[0]
    part = next(f for f in os.listdir(batch.path) if f.endswith(".parquet"))
    with open(os.path.join(batch.path, part), "wb") as fh:
        fh.write(b"this is not parquet at all" * 10)
    before = state(pipeline)
    with pytest.raises(QueueDataError, match=rf"batch {batch.seq} of queue {q}"):
        propagate_once(spark, pipeline, "p12")
    assert state(pipeline) == before


def test_schema_mismatch_names_file_and_field(spark, pipeline, snapshot) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    rt, q = captured(spark, pipeline, snapshot)
    batch = rt.catalog.pending(q, "propagation:p12")[0]
    good = spark.read.parquet(batch.path)
    bad_path = batch.path + "-bad"
    good.withColumn("commit_scn", F.col("commit_scn").cast("string")).write.parquet(bad_path)
    with rt.store.begin() as conn:
        from changeflow.state import schema

        conn.execute(schema.queue_batches.update()
                     .where(schema.queue_batches.c.seq == batch.seq).values(path=bad_path))
    before = state(pipeline)
    with pytest.raises(SchemaMismatchError, match=r"-bad.*'commit_scn'.*string.*bigint"):
        propagate_once(spark, pipeline, "p12")
    assert state(pipeline) == before


def test_enqueue_refuses_a_dataframe_off_contract(spark, pipeline, snapshot) -> None:  # type: ignore[no-untyped-def]
    rt, q = captured(spark, pipeline, snapshot)
    df = spark.createDataFrame([(1,)], "msg_id int")
    with pytest.raises(SchemaMismatchError, match="'schema_version'.*missing"):
        qio.enqueue(spark, rt.catalog, q, df, producer="test")


def test_unknown_queue(spark, pipeline) -> None:  # type: ignore[no-untyped-def]
    rt, _ = queue_site(pipeline, "strmadmin.streams_queue@site1")
    rt.catalog.create_queue("strmadmin.streams_queue")
    with pytest.raises(QueueNotFoundError, match="strmadmin.missing_q"):
        rt.catalog.pending("strmadmin.missing_q", "x")


def test_snapshot_without_its_key_column(spark, pipeline, snapshot) -> None:  # type: ignore[no-untyped-def]
    snapshot("hr.regions", 1, [("Europe",)], "region_name string")
    with pytest.raises(SchemaMismatchError, match=r"snap=1.*'region_id'"):
        run_capture(spark, pipeline, "cap")
    rt, q = queue_site(pipeline, "strmadmin.streams_queue@site1")
    assert rt.catalog.info(q).depth == 0


def test_target_key_column_missing(spark, pipeline) -> None:  # type: ignore[no-untyped-def]
    """LCRs whose key column is not among the row's values: the transaction goes to the
    apply's error queue whole, with the reason; the target is untouched."""
    import datetime as dt

    rt, q = queue_site(pipeline, "strmadmin.streams_queue@site2")
    rt.catalog.create_queue(q)
    row = {f: None for f in lcr.FIELD_NAMES}
    row.update(schema_version=1, msg_id="m1", kind="ROW", origin="CAPTURED",
               source_database_name="DBS1.EXAMPLE.COM", command_type="INSERT",
               object_owner="HR", object_name="REGIONS", transaction_id="t1", commit_scn=5,
               commit_time=dt.datetime(2024, 1, 1, tzinfo=dt.UTC), position=0,
               key_columns=["REGION_ID"], new_values={"REGION_NAME": lcr.encode_value("Europe")})
    qio.enqueue(spark, rt.catalog, q, spark.createDataFrame([row], lcr.spark_schema()),
                producer="test")
    res = apply_once(spark, pipeline, "ap")
    assert (res.transactions, res.errors) == (0, 1)
    assert targets_of(pipeline, pipeline.applies[0]).names(spark) == []
    [entry] = errorq.entries(rt.store, "ap")
    assert entry.error_kind == "table" and entry.transaction_id == "t1"
    assert "hr.regions: key column 'region_id' is missing" in entry.error_message
    assert [m["msg_id"] for m in errorq.read_lcrs(entry).to_pylist()] == ["m1"]
