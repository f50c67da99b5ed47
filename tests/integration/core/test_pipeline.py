"""Capture -> propagate -> apply across two sites, with real Spark and Parquet."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import pytest

from changeflow.apply.engine import apply_once, targets_of
from changeflow.capture.snapshot import run_capture
from changeflow.propagation import propagate_once
from changeflow.sites import queue_site
from changeflow.targets.read import read_table

pytestmark = pytest.mark.spark

T0 = dt.datetime(2024, 5, 1, 8, 30, tzinfo=dt.UTC)
STAFF_DDL = (
    "staff_id int, name string, salary decimal(8,2), hired date, active boolean, "
    "updated timestamp, score double"
)


def staff(i: int, name: str, salary: str, active: bool = True) -> tuple:
    return (i, name, Decimal(salary), dt.date(2020, 1, i), active, T0, 1.5 * i)


def run_all(spark, cfg) -> None:  # type: ignore[no-untyped-def]
    run_capture(spark, cfg, "cap")
    propagate_once(spark, cfg, "p12")
    apply_once(spark, cfg, "ap")


def target(spark, cfg, table: str) -> list[tuple]:  # type: ignore[no-untyped-def]
    df = read_table(spark, targets_of(cfg, cfg.applies[0]), table)
    return sorted(tuple(r) for r in df.collect())


def test_changes_flow_end_to_end_with_types(spark, pipeline, snapshot) -> None:  # type: ignore[no-untyped-def]
    snapshot("hr.regions", 1, [(1, "Europe"), (2, "Americas"), (3, "Asia")], "region_id int, region_name string")
    snapshot("hr.staff", 1, [staff(1, "King", "24000.00"), staff(2, "Kochhar", "17000.00")], STAFF_DDL)
    run_all(spark, pipeline)
    snapshot("hr.regions", 2, [(1, "Europa"), (3, "Asia"), (4, "MEA")], "region_id int, region_name string")
    snapshot("hr.staff", 2, [staff(1, "King", "25000.00", False), (3, None, None, None, None, None, None)], STAFF_DDL)
    run_all(spark, pipeline)

    assert target(spark, pipeline, "hr.regions") == [(1, "Europa"), (3, "Asia"), (4, "MEA")]
    rows = read_table(spark, targets_of(pipeline, pipeline.applies[0]), "hr.staff")
    types = {f.name: f.dataType.simpleString() for f in rows.schema.fields}
    assert types == {"staff_id": "bigint", "name": "string", "salary": "decimal(38,10)",
                     "hired": "date", "active": "boolean", "updated": "timestamp",
                     "score": "double"}
    got = sorted((tuple(r) for r in rows.collect()), key=lambda r: r[0])
    assert got == [
        (1, "King", Decimal("25000.00"), dt.date(2020, 1, 1), False, T0.replace(tzinfo=None), 1.5),
        (3, None, None, None, None, None, None),
    ]


def test_capture_rerun_and_reapply_do_no_harm(spark, pipeline, snapshot) -> None:  # type: ignore[no-untyped-def]
    from changeflow.queues import io as qio
    from changeflow.state import schema_apply

    snapshot("hr.regions", 1, [(1, "Europe"), (2, "Americas")], "region_id int, region_name string")
    first = run_capture(spark, pipeline, "cap")
    again = run_capture(spark, pipeline, "cap")
    assert first.messages == 2 and again.messages == 0
    rt, q = queue_site(pipeline, "strmadmin.streams_queue@site1")
    assert rt.catalog.info(q).depth == 2
    propagate_once(spark, pipeline, "p12")
    rt2, q2 = queue_site(pipeline, "strmadmin.streams_queue@site2")
    delivered = qio.read_batches(spark, rt2.catalog.pending(q2, "apply:ap"))
    replay = spark.createDataFrame(delivered.collect(), delivered.schema)
    apply_once(spark, pipeline, "ap")
    # The same LCRs delivered again: the high-water mark skips them ...
    qio.enqueue(spark, rt2.catalog, q2, replay, producer="replay")
    assert apply_once(spark, pipeline, "ap").tables == {}
    # ... and even without it, the target rows' commit positions show a replay.
    with rt2.store.begin() as conn:
        conn.execute(schema_apply.applied_txns.delete())
        conn.execute(schema_apply.watermarks.delete())
    qio.enqueue(spark, rt2.catalog, q2, replay, producer="replay")
    assert apply_once(spark, pipeline, "ap").superseded == 2
    assert target(spark, pipeline, "hr.regions") == [(1, "Europe"), (2, "Americas")]


def test_primary_key_update_moves_the_row(spark, pipeline, snapshot) -> None:  # type: ignore[no-untyped-def]

    from changeflow import lcr
    from changeflow.queues import io as qio

    snapshot("hr.regions", 1, [(1, "Europe")], "region_id int, region_name string")
    run_all(spark, pipeline)
    # An UPDATE that changes the key (as a log-based capture reports it).
    rt, q = queue_site(pipeline, "strmadmin.streams_queue@site2")
    row = {f: None for f in lcr.FIELD_NAMES}
    row.update(schema_version=1, msg_id="m-key-move", kind="ROW", origin="CAPTURED",
               source_database_name="DBS1.EXAMPLE.COM", command_type="UPDATE",
               object_owner="HR", object_name="REGIONS", transaction_id="t9",
               commit_scn=1000, commit_time=T0, position=0, key_columns=["REGION_ID"],
               old_values={"REGION_ID": lcr.encode_value(1), "REGION_NAME": lcr.encode_value("Europe")},
               new_values={"REGION_ID": lcr.encode_value(10), "REGION_NAME": lcr.encode_value("Europe")})
    df = spark.createDataFrame([row], lcr.spark_schema())
    assert qio.enqueue(spark, rt.catalog, q, df, producer="test") is not None
    apply_once(spark, pipeline, "ap")
    assert target(spark, pipeline, "hr.regions") == [(10, "Europe")]
    # Replaying the same LCR (a second producer delivering it again) changes nothing.
    assert qio.enqueue(spark, rt.catalog, q, df, producer="replay") is not None
    apply_once(spark, pipeline, "ap")
    assert target(spark, pipeline, "hr.regions") == [(10, "Europe")]


def test_propagation_crash_between_commits_recovers_exactly_once(spark, pipeline, snapshot) -> None:  # type: ignore[no-untyped-def]
    snapshot("hr.regions", 1, [(1, "Europe"), (2, "Americas")], "region_id int, region_name string")
    run_capture(spark, pipeline, "cap")
    with pytest.raises(RuntimeError, match="simulated crash"):
        propagate_once(spark, pipeline, "p12", crash_after_destination_commit=True)
    src, sq = queue_site(pipeline, "strmadmin.streams_queue@site1")
    dst, dq = queue_site(pipeline, "strmadmin.streams_queue@site2")
    assert src.catalog.position(sq, "propagation:p12") == 0  # the source was never acknowledged
    again = propagate_once(spark, pipeline, "p12")
    assert again.recovered and again.messages_read == 0
    assert dst.catalog.info(dq).depth == 2  # nothing duplicated, nothing lost
    snapshot("hr.regions", 2, [(1, "Europe"), (2, "Americas"), (3, "Asia")], "region_id int, region_name string")
    run_capture(spark, pipeline, "cap")
    assert propagate_once(spark, pipeline, "p12").messages_propagated == 1
    apply_once(spark, pipeline, "ap")
    assert target(spark, pipeline, "hr.regions") == [(1, "Europe"), (2, "Americas"), (3, "Asia")]


def test_uncommitted_batch_is_invisible(spark, pipeline, snapshot) -> None:  # type: ignore[no-untyped-def]
    from changeflow.queues import io as qio

    snapshot("hr.regions", 1, [(1, "Europe")], "region_id int, region_name string")
    run_capture(spark, pipeline, "cap")
    rt, q = queue_site(pipeline, "strmadmin.streams_queue@site1")
    batch = rt.catalog.pending(q, "propagation:p12")[0]
    df = qio.read_batches(spark, [batch])
    # A writer that died before its commit: files on disk, no catalog row.
    orphan = qio.write_batch(spark, rt.catalog, q, df, producer="killed-writer")
    assert orphan is not None
    with open(f"{orphan.path}/part-partial.parquet", "wb") as fh:
        fh.write(b"PAR1 truncated")
    assert [b.seq for b in rt.catalog.pending(q, "propagation:p12")] == [batch.seq]
    assert propagate_once(spark, pipeline, "p12").messages_propagated == 1
    # The orphaned directory is found (once old enough) and removed; nothing else is.
    from changeflow.queues import orphans

    assert orphans.find(rt.catalog, q) == []  # younger than the safe age: left alone
    [found] = orphans.find(rt.catalog, q, min_age=0)
    assert found.path.rstrip("/").endswith(orphan.path.rstrip("/").rsplit("/", 1)[-1])
    assert orphans.remove([found]) == 1
    assert not Path(orphan.path).exists()
    assert orphans.find(rt.catalog, q, min_age=0) == []


def test_a_backlog_drains_in_bounded_passes(spark, pipeline, snapshot) -> None:  # type: ignore[no-untyped-def]
    from changeflow.config import load_config

    source = Path(pipeline.source_path)
    source.write_text(source.read_text().replace(
        "destination_queue: strmadmin.streams_queue@site2}",
        "destination_queue: strmadmin.streams_queue@site2, limits: {max_messages: 8}}"))
    cfg = load_config(source)
    for n in (1, 2, 3):
        rows = [(i, f"r{i}") for i in range(1, 4 * n + 1)]
        snapshot("hr.regions", n, rows, "region_id int, region_name string")
    run_capture(spark, cfg, "cap")  # three batches: 4, 4 and 4 messages
    first = propagate_once(spark, cfg, "p12")
    assert (first.batches_read, first.messages_propagated, first.more_pending) == (2, 8, True)
    second = propagate_once(spark, cfg, "p12")
    assert (second.batches_read, second.more_pending) == (1, False)
    apply_once(spark, cfg, "ap")
    assert len(target(spark, cfg, "hr.regions")) == 12


def test_apply_rewrites_no_unchanged_row(spark, pipeline, snapshot) -> None:  # type: ignore[no-untyped-def]
    rows = [(i, f"r{i}") for i in range(1, 201)]
    snapshot("hr.regions", 1, rows, "region_id int, region_name string")
    run_all(spark, pipeline)
    targets = targets_of(pipeline, pipeline.applies[0])
    before = {str(f.location()) for f in targets.java_table(spark, "hr.regions")
              .currentSnapshot().addedDataFiles(
                  targets.java_table(spark, "hr.regions").io())}
    snapshot("hr.regions", 2, [(1, "changed"), *rows[1:]], "region_id int, region_name string")
    run_all(spark, pipeline)
    summary = dict(targets.java_table(spark, "hr.regions").currentSnapshot().summary())
    # one change: one small data file and one position delete, merge-on-read
    assert (summary["added-data-files"], summary["added-records"],
            summary["added-position-deletes"]) == ("1", "1", "1")
    assert "removed-data-files" not in summary  # no existing file was rewritten
    assert len(before) >= 1
    assert target(spark, pipeline, "hr.regions")[0] == (1, "changed")


def test_composite_key_of_mixed_types(spark, pipeline, snapshot, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A (number, date) key like hr.job_history's, through capture, checks and apply."""
    source = Path(pipeline.source_path)
    source.write_text(source.read_text().replace(
        "{name: hr.staff, key: [staff_id]}", "{name: hr.job_history, key: [employee_id, start_date]}"))
    from changeflow.config import load_config

    cfg = load_config(pipeline.source_path)
    ddl = "employee_id int, start_date date, job_id string"
    d1, d2 = dt.date(2020, 1, 1), dt.date(2021, 6, 1)
    snapshot("hr.job_history", 1, [(101, d1, "IT_PROG"), (101, d2, "SA_REP"), (102, d1, "AD_VP")], ddl)
    run_all(spark, cfg)
    snapshot("hr.job_history", 2, [(101, d1, "IT_PROG"), (101, d2, "SA_MAN")], ddl)
    run_all(spark, cfg)
    assert target(spark, cfg, "hr.job_history") == [(101, d1, "IT_PROG"), (101, d2, "SA_MAN")]
