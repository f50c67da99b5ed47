"""Iceberg targets as others meet them: other writers, a busy catalog, a table dropped
behind the apply's back, time travel, the views, and the upgrade of old targets."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from changeflow.apply import errorq
from changeflow.apply.engine import apply_once, targets_of
from changeflow.apply.reexec import execute_errors
from changeflow.sites import queue_site
from changeflow.targets import commit as tcommit
from changeflow.targets.read import read_arrow, read_table
from changeflow.views.targets import snapshots, targets

from .conftest import QUEUE, row, table_rows, vals

pytestmark = pytest.mark.spark
APPLY = """
applies:
  - {name: ap, queue: strmadmin.apply_q@site2, buckets: 2}
"""


def _one_row_applied(spark, make_cfg, enqueue):  # type: ignore[no-untyped-def]
    """A pipeline whose apply has written one row of hr.emp, and its Iceberg targets."""
    cfg = make_cfg(APPLY)
    enqueue(cfg, [row("INSERT", new=vals(id=1, name="a"))])
    apply_once(spark, cfg, "ap")
    return cfg, targets_of(cfg, cfg.applies[0])


def test_another_writer_during_a_pass_is_never_lost(spark, make_cfg, enqueue,
                                                    monkeypatch) -> None:  # type: ignore[no-untyped-def]
    cfg, tgt = _one_row_applied(spark, make_cfg, enqueue)
    enqueue(cfg, [row("INSERT", new=vals(id=2, name="b"), txn="t2", scn=20)])
    real = tcommit.publish

    def other_writer_first(spark_, targets_, staged, **kw):  # type: ignore[no-untyped-def]
        # someone else commits to main between the pass's read and its publish
        spark_.sql(f"INSERT INTO {tgt.ident('hr.emp')} VALUES "
                   "(9, 'other', 'X', 1, 1, X'00')")
        return real(spark_, targets_, staged, **kw)

    monkeypatch.setattr(tcommit, "publish", other_writer_first)
    with pytest.raises(tcommit.TargetConflictError, match="another writer committed"):
        apply_once(spark, cfg, "ap")
    monkeypatch.undo()
    assert table_rows(spark, cfg) == [(1, "a"), (9, "other")]  # theirs kept, ours not yet
    assert apply_once(spark, cfg, "ap").transactions == 1  # the retry reads it again
    assert table_rows(spark, cfg) == [(1, "a"), (2, "b"), (9, "other")]


def test_a_busy_catalog_at_commit_is_waited_for(spark, make_cfg, enqueue,
                                                 monkeypatch) -> None:  # type: ignore[no-untyped-def]
    cfg = make_cfg(APPLY)
    rt, _ = queue_site(cfg, QUEUE)
    db = rt.store.url.split("///", 1)[1]
    enqueue(cfg, [row("INSERT", new=vals(id=1, name="a"))])
    released: list[float] = []

    def hold() -> None:
        conn = sqlite3.connect(db, timeout=30, isolation_level=None)
        conn.execute("BEGIN EXCLUSIVE")
        time.sleep(3)
        released.append(time.monotonic())
        conn.execute("COMMIT")
        conn.close()

    def lock_catalog(name: str) -> None:
        if name == "apply.before_commit":
            threading.Thread(target=hold).start()
            time.sleep(0.5)

    monkeypatch.setattr("changeflow.faults.point", lock_catalog)
    assert apply_once(spark, cfg, "ap").transactions == 1
    assert released and table_rows(spark, cfg) == [(1, "a")]


def test_a_table_dropped_outside_changeflow_fails_clearly_until_forgotten(
        spark, make_cfg, enqueue) -> None:  # type: ignore[no-untyped-def]
    cfg, tgt = _one_row_applied(spark, make_cfg, enqueue)
    spark.sql(f"DROP TABLE {tgt.ident('hr.emp')} PURGE")
    enqueue(cfg, [row("INSERT", new=vals(id=2, name="b"), txn="t2", scn=20)])
    res = apply_once(spark, cfg, "ap")
    assert (res.transactions, res.errors) == (0, 1)
    rt, _ = queue_site(cfg, QUEUE)
    [entry] = errorq.entries(rt.store, "ap")
    assert "dropped outside changeflow" in entry.error_message
    assert "changeflow targets forget hr.emp" in entry.error_message
    assert tgt.get(spark, "hr.emp") is None  # not silently re-created
    assert tgt.forget("hr.emp")
    assert execute_errors(cfg, "ap", [entry.id], spark=spark).applied == [entry.id]
    assert table_rows(spark, cfg) == [(2, "b")]


def test_a_table_asked_for_again_is_refreshed_and_follows_other_writers_and_drops(
        spark, make_cfg, enqueue) -> None:  # type: ignore[no-untyped-def]
    cfg, tgt = _one_row_applied(spark, make_cfg, enqueue)
    ident = tgt.ident("hr.emp")
    first = tgt.java_table(spark, "hr.emp")
    before = first.currentSnapshot().snapshotId()
    spark.sql(f"INSERT INTO {ident} VALUES (9, 'other', 'X', 1, 1, X'00')")  # another writer
    again = tgt.java_table(spark, "hr.emp")
    assert again is first  # refreshed, not loaded anew ...
    assert again.currentSnapshot().parentId() == before  # ... and it sees the commit
    spark.sql(f"DROP TABLE {ident} PURGE")
    assert tgt.java_table(spark, "hr.emp") is None
    spark.sql(f"CREATE TABLE {ident} (id bigint) USING iceberg")
    made = tgt.java_table(spark, "hr.emp")
    spark.sql(f"DROP TABLE {ident} PURGE")  # dropped and created again, unseen
    spark.sql(f"CREATE TABLE {ident} (k string) USING iceberg")
    now = tgt.java_table(spark, "hr.emp")
    assert [c.name() for c in now.schema().columns()] == ["k"]
    assert str(now.uuid()) != str(made.uuid())
    assert tgt.get(spark, "hr.emp").column_names == ["k"]


def test_time_travel_views_and_pyiceberg_read_what_the_applies_wrote(
        spark, make_cfg, enqueue) -> None:  # type: ignore[no-untyped-def]
    cfg = make_cfg(APPLY)
    # id 3 is inserted and deleted in the first pass: its image deletes, nothing to write
    enqueue(cfg, [row("INSERT", new=vals(id=i, name=f"n{i}"), pos=i) for i in (1, 2, 3)]
            + [row("DELETE", old=vals(id=3, name="n3"), pos=4)])
    apply_once(spark, cfg, "ap")
    enqueue(cfg, [row("UPDATE", new=vals(id=1, name="x"), old=vals(id=1), txn="t2", scn=20),
                  row("DELETE", old=vals(id=2), txn="t2", scn=20, pos=2)])
    apply_once(spark, cfg, "ap")
    snaps = [s for s in snapshots(cfg) if s["pass_id"]]
    assert [(s["positions"], s["batches"], s["rows"]) for s in snaps] == [
        ("DBS1.EXAMPLE.COM=10", "1-1", 2), ("DBS1.EXAMPLE.COM=20", "2-2", 1)]
    # a new table's first pass appends (incremental readers of the table can follow it)
    assert snaps[0]["operation"] == "append" and snaps[1]["operation"] != "append"
    tgt = targets_of(cfg, cfg.applies[0])
    first = int(snaps[0]["snapshot"])
    then = read_table(spark, tgt, "hr.emp", snapshot=first).collect()
    assert sorted((r.id, r.name) for r in then) == [(1, "n1"), (2, "n2")]
    now = read_arrow(tgt, "hr.emp").select(["id", "name"]).to_pylist()
    assert now == [{"id": 1, "name": "x"}]
    [view] = targets(cfg)
    assert (view["table"], view["rows"], view["last_positions"]) == (
        "hr.emp", 1, "DBS1.EXAMPLE.COM=20")
    assert view["snapshots"] >= 2 and view["data_files"] >= 1


def _legacy_table(spark, cfg, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A table of the old private format: a base file, and a delta with a tombstone and a
    partial image (an UPDATE without its unchanged column), listed in the old manifest."""
    import json

    from changeflow.state import schema

    rt, _ = queue_site(cfg, QUEUE)
    root = str(tmp_path / "old" / "hr.emp")
    cols = ("id bigint, name string, note string, _cf_seq bigint, _cf_scn bigint, "
            "_cf_pos bigint, _cf_deleted boolean, _cf_src string, _cf_tag binary, "
            "_cf_absent array<string>")
    base = [(1, "a", "n1", 1, 10, 1, False, "DBS1", b"\x00", None),
            (2, "b", "n2", 1, 10, 2, False, "DBS1", b"\x00", None),
            (3, "c", "n3", 1, 10, 3, False, "DBS1", b"\x00", None)]
    delta = [(2, None, None, 2, 20, 1, True, "DBS1", b"\x00", None),
             (3, "c2", None, 2, 20, 2, False, "DBS1", b"\x00", ["note"])]
    files = []
    for kind, rows, v in (("base", base, 1), ("pdelta", delta, 2)):
        path = f"{root}/{kind}-v{v}/_cf_bucket=0"
        spark.createDataFrame(rows, cols).coalesce(1).write.parquet(path)
        files += [(p, kind, v) for p in __import__("glob").glob(f"{path}/*.parquet")]
    with rt.store.begin() as conn:
        conn.execute(schema.target_tables.insert().values(
            name="hr.emp", root=root, key_columns=json.dumps(["id"]),
            columns_json=json.dumps([["id", "INTEGER"], ["name", "VARCHAR2"],
                                     ["note", "VARCHAR2"]]), buckets=2, version=2))
        for p, kind, v in files:
            conn.execute(schema.target_files.insert().values(
                table_name="hr.emp", path=p, bucket=0, version=v, kind=kind, n_bytes=1))


def test_upgrade_converts_an_old_target_and_the_apply_goes_on(
        spark, make_cfg, enqueue, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from changeflow.targets import legacy
    from changeflow.targets.upgrade import upgrade

    cfg = make_cfg(APPLY)
    _legacy_table(spark, cfg, tmp_path)
    tgt = targets_of(cfg, cfg.applies[0])
    [done] = upgrade(spark, tgt)
    assert (done.table, done.rows, done.already) == ("hr.emp", 2, False)
    rows = read_table(spark, tgt, "hr.emp", with_meta=True).collect()
    assert sorted((r.id, r.name, r.note, r._cf_scn) for r in rows) == [
        (1, "a", "n1", 10), (3, "c2", "n3", 20)]
    assert legacy.TargetCatalog(tgt.store, tgt.target_root).names() == []
    assert upgrade(spark, tgt) == []  # nothing left of the old format
    enqueue(cfg, [row("UPDATE", new=vals(id=3, name="c3"), old=vals(id=3, name="c2"),
                      txn="t3", scn=30)])
    assert apply_once(spark, cfg, "ap").transactions == 1
    assert table_rows(spark, cfg) == [(1, "a", "n1"), (3, "c3", "n3")]


def test_table_metadata_crosses_in_few_calls_equal_to_py4j(spark, make_cfg, enqueue
                                                   ) -> None:  # type: ignore[no-untyped-def]
    from changeflow.jvm import java_dict, java_each

    cfg = make_cfg(APPLY)
    enqueue(cfg, [row("INSERT", new=vals(id=i, name=f"n{i}"), pos=i) for i in (1, 2)])
    apply_once(spark, cfg, "ap")
    tgt = targets_of(cfg, cfg.applies[0])
    jt = tgt.java_table(spark, "hr.emp")
    # the header reads the bucket count from the spec's text (one call, not a walk)
    assert tgt.get(spark, "hr.emp").buckets == 2
    spark.sql(f"CREATE TABLE {tgt.ident('hr.plain')} (id bigint) USING iceberg")
    assert tgt.get(spark, "hr.plain").buckets == 1
    jt.updateProperties().set("cf.test", 'quo"te, {brace}=é\n').commit()
    jt.refresh()
    for jmap in (jt.currentSnapshot().summary(), jt.properties()):
        expected = dict(jmap)  # py4j, entry by entry
        assert java_dict(jmap) == expected and len(expected) > 3
    assert java_dict(jt.properties())["cf.test"] == 'quo"te, {brace}=é\n'
    jvm = spark.sparkContext._jvm
    for n in (0, 3):  # the same items as py4j's own iteration (which ends on an exception)
        jlist = jvm.java.util.ArrayList()
        for i in range(n):
            jlist.add(f"v{i}")
        assert list(java_each(jlist)) == list(jlist) == [f"v{i}" for i in range(n)]
    assert java_dict(jt.currentSnapshot().summary())["added-records"] == "2"
