"""Apply into Iceberg tables: positions, complete row images, command types, tags,
exactly once across a crash anywhere around the commit, maintenance."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from changeflow.apply import errorq
from changeflow.apply.engine import apply_once, targets_of
from changeflow.errors import TargetError
from changeflow.jvm import java_each
from changeflow.queues.retention import purge
from changeflow.sites import queue_site
from changeflow.targets.maintenance import maintain
from changeflow.targets.policy import MaintenancePolicy
from changeflow.targets.read import read_table, snapshots
from changeflow.targets.rowdelta import SCRATCH

from .conftest import QUEUE, row, table_rows, vals

pytestmark = pytest.mark.spark

APPLY = """
applies:
  - {name: ap, queue: strmadmin.apply_q@site2, buckets: 2, apply_tag: "0a",
     iceberg: {maintenance: {enabled: false}}}
"""


def test_lower_positions_from_another_path_apply_and_exact_replays_skip(
        spark, make_cfg, enqueue) -> None:  # type: ignore[no-untyped-def]
    cfg = make_cfg(APPLY)
    enqueue(cfg, [row("INSERT", new=vals(id=1, name="a"), txn="t30", scn=30),
                  row("INSERT", new=vals(id=2, name="b"), txn="t40", scn=40)])
    assert apply_once(spark, cfg, "ap").transactions == 2
    # A later batch with a *lower* commit position from the same source (a second path,
    # a backfill): a new transaction, so it is applied ...
    enqueue(cfg, [row("INSERT", new=vals(id=3, name="c"), txn="t20", scn=20),
                  # ... and a replay of t30 is skipped exactly.
                  row("INSERT", new=vals(id=1, name="a"), txn="t30", scn=30)])
    res = apply_once(spark, cfg, "ap")
    assert (res.transactions, res.skipped, res.errors) == (1, 1, 0)
    assert table_rows(spark, cfg) == [(1, "a"), (2, "b"), (3, "c")]
    # An older commit of the same source never overrides a newer image of the row.
    enqueue(cfg, [row("UPDATE", new=vals(id=2, name="b-late"), old=vals(id=2), txn="t35",
                      scn=35)])
    assert apply_once(spark, cfg, "ap").superseded == 1
    assert table_rows(spark, cfg) == [(1, "a"), (2, "b"), (3, "c")]


def test_update_without_unchanged_columns_keeps_them_through_maintenance(
        spark, make_cfg, enqueue) -> None:  # type: ignore[no-untyped-def]
    cfg = make_cfg(APPLY)
    enqueue(cfg, [row("INSERT", new=vals(id=i, small=i, big=f"{i}" * 1000), pos=i)
                  for i in (1, 2, 3)])
    apply_once(spark, cfg, "ap")
    # As PostgreSQL sends an UPDATE whose unchanged TOASTed column is not in new values;
    # and two partial updates of one key in one pass, each carrying another column.
    enqueue(cfg, [row("UPDATE", new=vals(id=1, small=10), old=vals(id=1), txn="t2", scn=20),
                  row("UPDATE", new=vals(id=2, big="new"), old=vals(id=2), txn="t3", scn=30),
                  row("UPDATE", new=vals(id=2, small=20), old=vals(id=2), txn="t4", scn=40),
                  row("DELETE", old=vals(id=3), txn="t5", scn=50)])
    apply_once(spark, cfg, "ap")
    expected = [(1, 10, "1" * 1000), (2, 20, "new")]
    assert table_rows(spark, cfg) == expected
    targets = targets_of(cfg, cfg.applies[0])
    jt = targets.java_table(spark, "hr.emp")
    summary = dict(jt.currentSnapshot().summary())
    # merge-on-read: the replaced rows are named by delete files, not rewritten
    assert int(summary["total-position-deletes"]) == 3
    done = maintain(spark, targets, "hr.emp", MaintenancePolicy(delete_ratio=0.01))
    assert "rewrite_data_files" in done
    after = dict(targets.java_table(spark, "hr.emp").currentSnapshot().summary())
    assert int(after["total-position-deletes"]) == 0 and int(after["total-records"]) == 2
    assert table_rows(spark, cfg) == expected


def test_unknown_command_type_fails_its_transaction_whole(spark, make_cfg, enqueue) -> None:  # type: ignore[no-untyped-def]
    cfg = make_cfg(APPLY)
    enqueue(cfg, [row("INSERT", new=vals(id=1, name="a"), txn="good", scn=10),
                  row("INSERT", new=vals(id=2, name="b"), txn="bad", scn=20, pos=1),
                  row("UPSERT", new=vals(id=3, name="c"), txn="bad", scn=20, pos=2)])
    res = apply_once(spark, cfg, "ap")
    assert (res.transactions, res.errors) == (1, 1)
    assert table_rows(spark, cfg) == [(1, "a")]  # nothing of "bad" is applied
    rt, q = queue_site(cfg, QUEUE)
    [entry] = errorq.entries(rt.store, "ap")
    assert entry.error_kind == "command_type" and "'UPSERT'" in entry.error_message
    assert (entry.transaction_id, entry.commit_scn, entry.failing_position) == ("bad", 20, 2)
    purge(spark, rt.catalog, q)  # the batch is gone; the transaction is not
    assert rt.catalog.info(q).depth == 0
    lcrs = errorq.read_lcrs(entry).to_pylist()
    assert [(m["position"], m["command_type"]) for m in lcrs] == [(1, "INSERT"), (2, "UPSERT")]


def test_rows_carry_the_apply_tag_and_source(spark, make_cfg, enqueue) -> None:  # type: ignore[no-untyped-def]
    cfg = make_cfg(APPLY)
    enqueue(cfg, [row("INSERT", new=vals(id=1, name="a"), source="DBS9.EXAMPLE.COM")])
    apply_once(spark, cfg, "ap")
    meta = read_table(spark, targets_of(cfg, cfg.applies[0]), "hr.emp",
                      with_meta=True).collect()
    assert [(r["_cf_tag"], r["_cf_src"], r["_cf_scn"]) for r in meta] == [
        (b"\x0a", "DBS9.EXAMPLE.COM", 10)]


def test_a_null_key_fails_its_transaction(spark, make_cfg, enqueue) -> None:  # type: ignore[no-untyped-def]
    cfg = make_cfg(APPLY)
    enqueue(cfg, [row("INSERT", new=vals(id=1, name="a"), txn="good", scn=10),
                  row("INSERT", new=vals(id=(None, "INTEGER"), name="b"), txn="bad", scn=20)])
    res = apply_once(spark, cfg, "ap")
    assert (res.transactions, res.errors) == (1, 1)
    rt, _ = queue_site(cfg, QUEUE)
    [entry] = errorq.entries(rt.store, "ap")
    assert "key column 'id' is NULL" in entry.error_message
    assert table_rows(spark, cfg) == [(1, "a")]


def test_old_positions_migrate_into_watermarks(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A store written before the apply domain: its marks become watermarks."""
    from changeflow.state import StateStore, schema
    from changeflow.state.schema_apply import watermarks

    url = f"sqlite:///{tmp_path}/old.db"
    store = StateStore(url)
    with store.begin() as conn:  # simulate: rows in the old table, apply domain not yet run
        conn.execute(schema.apply_progress.insert().values(
            apply="ap", source_database="DBS1", commit_scn=77, updated_at=schema.utcnow()))
        conn.execute(watermarks.delete())
    from changeflow.state.schema_apply import _v1

    with store.begin() as conn:
        _v1(conn)
    with store.read() as conn:
        assert conn.execute(select(watermarks.c.commit_scn)).scalar() == 77


def _dies_at(monkeypatch, point: str) -> None:  # type: ignore[no-untyped-def]
    def die(name: str) -> None:
        if name == point:
            raise SystemExit(f"killed at {name}")
    monkeypatch.setattr("changeflow.faults.point", die)


def test_a_crash_anywhere_around_the_commit_applies_exactly_once(
        spark, make_cfg, enqueue, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The crash points ``apply.before_commit`` (staged, nothing published),
    ``apply.during_commit`` (tables published, positions not committed) and
    ``apply.after_commit``; the chaos suite arms them with CHANGEFLOW_CRASH_AT."""
    cfg = make_cfg(APPLY)
    rt, q = queue_site(cfg, QUEUE)
    targets = targets_of(cfg, cfg.applies[0])
    enqueue(cfg, [row("INSERT", new=vals(id=1, name="a"), txn="t1", scn=10)])
    _dies_at(monkeypatch, "apply.before_commit")
    with pytest.raises(SystemExit):
        apply_once(spark, cfg, "ap")
    monkeypatch.undo()
    table = targets.get(spark, "hr.emp")
    assert table is not None and table.snapshot is None  # created, nothing published
    assert rt.catalog.position(q, "apply:ap") == 0
    assert apply_once(spark, cfg, "ap").transactions == 1  # the re-run applies it
    # Published, but the positions not committed: the retry must read the table as it
    # was before (else its UPDATE, old name 'a', would meet 'b' and conflict) and must
    # not write it again.
    enqueue(cfg, [row("UPDATE", new=vals(id=1, name="b"), old=vals(id=1, name="a"), txn="t2",
                      scn=20)])
    _dies_at(monkeypatch, "apply.during_commit")
    with pytest.raises(SystemExit):
        apply_once(spark, cfg, "ap")
    monkeypatch.undo()
    assert table_rows(spark, cfg) == [(1, "b")]
    assert rt.catalog.position(q, "apply:ap") == 1
    res = apply_once(spark, cfg, "ap")
    assert (res.transactions, res.errors, res.changes) == (1, 0, 0)
    assert rt.catalog.position(q, "apply:ap") == 2
    passes = [s["pass_id"] for s in snapshots(spark, targets, "hr.emp")
              if s["on_main"] and s["pass_id"]]
    assert len(passes) == len(set(passes)) == 2  # each pass wrote one snapshot, once
    enqueue(cfg, [row("UPDATE", new=vals(id=1, name="c"), old=vals(id=1, name="b"), txn="t3",
                      scn=30)])
    _dies_at(monkeypatch, "apply.after_commit")
    with pytest.raises(SystemExit):
        apply_once(spark, cfg, "ap")
    monkeypatch.undo()
    res = apply_once(spark, cfg, "ap")  # committed with the queue position: nothing again
    assert (res.transactions, res.errors, res.superseded) == (0, 0, 0)
    assert table_rows(spark, cfg) == [(1, "c")]


def test_a_pass_deletes_the_rows_it_located_by_position_in_one_snapshot(
        spark, make_cfg, enqueue) -> None:  # type: ignore[no-untyped-def]
    """Whole images of a format-version 2 table: the rows the lookup located are deleted
    by position, the new images added, in one RowDelta (no MERGE scan); every reader
    sees the same rows (Spark, PyIceberg, DuckDB's Iceberg reader), and no state with a
    key twice or missing is in the history."""
    from changeflow.targets.read import duckdb_connection, duckdb_scan, read_arrow

    cfg = make_cfg(APPLY)
    enqueue(cfg, [row("INSERT", new=vals(id=i, name=f"n{i}"), pos=i) for i in range(1, 7)])
    apply_once(spark, cfg, "ap")
    targets = targets_of(cfg, cfg.applies[0])
    metadata = targets.java_table(spark, "hr.emp").operations().current()
    before, versions = metadata.currentSnapshot().snapshotId(), metadata.previousFiles().size()
    enqueue(cfg, [row("UPDATE", new=vals(id=1, name="u1"), old=vals(id=1), txn="t2", scn=20),
                  row("UPDATE", new=vals(id=4, name="u4"), old=vals(id=4), txn="t2", scn=20,
                      pos=2),
                  row("DELETE", old=vals(id=5), txn="t3", scn=30),
                  row("INSERT", new=vals(id=9, name="n9"), txn="t3", scn=30, pos=2)])
    res = apply_once(spark, cfg, "ap")
    assert (res.transactions, res.errors, res.rows_changed) == (2, 0, 4)
    expected = [(1, "u1"), (2, "n2"), (3, "n3"), (4, "u4"), (6, "n6"), (9, "n9")]
    assert table_rows(spark, cfg) == expected
    arrow = read_arrow(targets, "hr.emp")  # PyIceberg applies the same delete files
    assert sorted(zip(arrow.column("id").to_pylist(), arrow.column("name").to_pylist(),
                      strict=True)) == expected
    con = duckdb_connection()  # and so does DuckDB's own reader, from the metadata file
    assert con.execute(f"SELECT id, name FROM {duckdb_scan(targets, 'hr.emp')} "
                       "ORDER BY id").fetchall() == expected
    assert con.execute(f"SELECT id, name FROM {duckdb_scan(targets, 'hr.emp', snapshot=before)}"
                       " ORDER BY id").fetchall() == [(i, f"n{i}") for i in range(1, 7)]
    with pytest.raises(TargetError, match="'hr.nope' does not exist in catalog"):
        duckdb_scan(targets, "hr.nope")
    jt = targets.java_table(spark, "hr.emp")
    snap = jt.currentSnapshot()
    assert snap.parentId() == before  # one snapshot for the pass
    summary = dict(snap.summary())
    assert str(snap.operation()) == "overwrite" and "spark.merge-into.num-target-rows-updated" \
        not in summary  # a RowDelta, not a MERGE
    assert int(summary["added-position-deletes"]) == 3  # ids 1, 4 and 5, by position
    assert int(summary["added-records"]) == 3  # ids 1, 4 and 9
    it = snap.addedDeleteFiles(jt.io()).iterator()
    scoped = []
    while it.hasNext():
        f = it.next()
        scoped.append(f.referencedDataFile() is not None)
    assert scoped and all(scoped)
    assert [str(b) for b in jt.refs().keySet()] == ["main"]  # no staging or scratch branch
    # four catalog commits (each writes the table's metadata anew): both branches, the
    # images' append, the row delta, and the publish that drops both branches
    assert jt.operations().current().previousFiles().size() - versions == 4
    # the scratch append's snapshot went with its branch in the row delta's commit: the
    # table keeps one snapshot per pass, and no metadata file only that snapshot named
    kept = list(java_each(jt.snapshots()))
    lineage, parent = [], snap.snapshotId()
    while parent is not None:
        lineage.append(parent)
        parent = jt.snapshot(parent).parentId()
    assert sorted(s.snapshotId() for s in kept) == sorted(lineage)  # every one on main
    assert lineage[:2] == [snap.snapshotId(), before]
    assert not any(dict(s.summary()).get(SCRATCH) for s in kept)
    folder = Path(jt.location().removeprefix("file:")) / "metadata"
    lists = {p.name for p in folder.glob("snap-*.avro")}
    assert lists == {Path(s.manifestListLocation()).name for s in kept}
    named = {Path(m.path()).name for s in kept for m in java_each(s.allManifests(jt.io()))}
    assert {p.name for p in folder.glob("*.avro")} - lists == named
    # the history lists the pass once: the scratch append (off main) is left out
    listed = [s for s in snapshots(spark, targets, "hr.emp") if s["pass_id"] == summary[
        "changeflow.pass-id"]]
    assert [s["snapshot"] for s in listed] == [snap.snapshotId()] and listed[0]["on_main"]


def test_the_lookup_reads_provenance_only_where_a_change_may_be_a_replay(
        spark, make_cfg, enqueue, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The data files' bounds of ``_cf_scn`` tell whether every change of a pass is newer
    than every row: then the lookup reads no row's provenance. A change at a position a
    row already has is still found a replay."""
    from changeflow.apply import tables as plan_tables
    from changeflow.targets.plans import older_than

    asked: list[bool] = []
    lookup = plan_tables.lookup_current

    def spy(*args, provenance=True, **kwargs):  # type: ignore[no-untyped-def]
        asked.append(provenance)
        return lookup(*args, provenance=provenance, **kwargs)

    monkeypatch.setattr(plan_tables, "lookup_current", spy)
    cfg = make_cfg(APPLY)
    targets = targets_of(cfg, cfg.applies[0])
    enqueue(cfg, [row("INSERT", new=vals(id=i, name=f"n{i}"), pos=i) for i in range(1, 5)])
    apply_once(spark, cfg, "ap")
    enqueue(cfg, [row("UPDATE", new=vals(id=1, name="u1"), old=vals(id=1, name="n1"),
                      txn="t2", scn=20)])
    assert apply_once(spark, cfg, "ap").transactions == 1
    jt = targets.java_table(spark, "hr.emp")
    snap = jt.currentSnapshot().snapshotId()
    assert [older_than(spark, jt, snap, s) for s in (21, 20, 11, 10)] == [
        True, False, False, False]
    assert asked == [False]  # scn 20 over rows of scn 10
    # the same change again under another transaction name (no position record knows it)
    enqueue(cfg, [row("UPDATE", new=vals(id=1, name="u1"), old=vals(id=1, name="n1"),
                      txn="t2-again", scn=20)])
    res = apply_once(spark, cfg, "ap")
    assert (res.superseded, res.errors) == (1, 0) and asked == [False, True]
    assert table_rows(spark, cfg) == [(1, "u1"), (2, "n2"), (3, "n3"), (4, "n4")]
    # a data file that records no bound of the column: only a scan knows
    spark.sql(f"ALTER TABLE {targets.ident('hr.emp')} SET TBLPROPERTIES "
              "('write.metadata.metrics.column._cf_scn' = 'counts')")
    enqueue(cfg, [row("UPDATE", new=vals(id=2, name="u2"), old=vals(id=2, name="n2"),
                      txn="t3", scn=30)])
    apply_once(spark, cfg, "ap")
    jt.refresh()
    assert not older_than(spark, jt, jt.currentSnapshot().snapshotId(), 10**9)


def test_the_first_pass_into_a_new_table_appends_its_rows(
        spark, make_cfg, enqueue) -> None:  # type: ignore[no-untyped-def]
    """A table with no snapshot yet has no row to match: the pass appends its written
    images (no MERGE INTO), counting the rows as MERGE INTO would."""
    cfg = make_cfg(APPLY)
    enqueue(cfg, [row("INSERT", new=vals(id=1, name="a")),
                  row("INSERT", new=vals(id=2, name="b"), pos=2),
                  row("DELETE", old=vals(id=2, name="b"), pos=3),  # gone within the pass
                  row("INSERT", new=vals(id=3), pos=4)])
    res = apply_once(spark, cfg, "ap")
    assert (res.transactions, res.errors, res.rows_changed) == (1, 0, 2)
    assert table_rows(spark, cfg) == [(1, "a"), (3, None)]
    jt = targets_of(cfg, cfg.applies[0]).java_table(spark, "hr.emp")
    snap = jt.currentSnapshot()
    summary = dict(snap.summary())
    assert str(snap.operation()) == "append" and summary["added-records"] == "2"
    assert not any(k.startswith("spark.merge-into.") for k in summary)  # not a MERGE
    assert summary["changeflow.pass-id"] and [str(b) for b in jt.refs().keySet()] == ["main"]
