"""Parquet apply: per-transaction positions, complete row images, command types, tags."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from changeflow.apply import errorq
from changeflow.apply.engine import apply_once, target_catalog
from changeflow.apply.target import read_table
from changeflow.queues.retention import purge
from changeflow.sites import queue_site

from .conftest import QUEUE, row, table_rows, vals

pytestmark = pytest.mark.spark

APPLY = """
applies:
  - {name: ap, queue: strmadmin.apply_q@site2, buckets: 2, apply_tag: "0a"}
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


def test_update_without_unchanged_columns_keeps_them(spark, make_cfg, enqueue) -> None:  # type: ignore[no-untyped-def]
    cfg = make_cfg(APPLY)
    enqueue(cfg, [row("INSERT", new=vals(id=1, small=1, big="x" * 1000))])
    apply_once(spark, cfg, "ap")
    # As PostgreSQL sends an UPDATE whose unchanged TOASTed column is not in new values.
    enqueue(cfg, [row("UPDATE", new=vals(id=1, small=2), old=vals(id=1), txn="t2", scn=20)])
    apply_once(spark, cfg, "ap")
    assert table_rows(spark, cfg) == [(1, 2, "x" * 1000)]
    cat = target_catalog(cfg, cfg.applies[0])
    assert any(f.kind == "pdelta" for f in cat.files("hr.emp"))
    from changeflow.apply.compaction import compact

    compact(spark, cat, "hr.emp", ratio=0.0, max_deltas=0)  # every bucket: the partial
    # image is resolved into the base
    assert {f.kind for f in cat.files("hr.emp")} == {"base"}
    assert table_rows(spark, cfg) == [(1, 2, "x" * 1000)]


def test_compaction_over_a_base_resolves_only_changed_keys_and_keeps_the_rest(
        spark, make_cfg, enqueue) -> None:  # type: ignore[no-untyped-def]
    from changeflow.apply.compaction import compact

    cfg = make_cfg(APPLY)
    cat = target_catalog(cfg, cfg.applies[0])
    enqueue(cfg, [row("INSERT", new=vals(id=i, small=i, big=f"b{i}"), pos=i) for i in range(1, 7)])
    apply_once(spark, cfg, "ap")
    compact(spark, cat, "hr.emp", ratio=0.0, max_deltas=0)  # the first base: deltas only
    assert {f.kind for f in cat.files("hr.emp")} == {"base"}
    # Over the base: an update, a partial update (big left out), a delete, a re-insert of
    # a deleted key, a new key, and a key updated twice across two applies.
    enqueue(cfg, [row("UPDATE", new=vals(id=1, small=10, big="n1"), old=vals(id=1), txn="u",
                      scn=20, pos=1),
                  row("UPDATE", new=vals(id=2, small=20), old=vals(id=2), txn="u", scn=20, pos=2),
                  row("DELETE", old=vals(id=3), txn="u", scn=20, pos=3),
                  row("DELETE", old=vals(id=4), txn="u", scn=20, pos=4),
                  row("INSERT", new=vals(id=7, small=7, big="b7"), txn="u", scn=20, pos=5)])
    apply_once(spark, cfg, "ap")
    enqueue(cfg, [row("INSERT", new=vals(id=4, small=40, big="again"), txn="v", scn=30, pos=1),
                  row("UPDATE", new=vals(id=1, small=11, big="n1b"), old=vals(id=1), txn="v",
                      scn=30, pos=2)])
    apply_once(spark, cfg, "ap")
    expected = [(1, 11, "n1b"), (2, 20, "b2"), (4, 40, "again"), (5, 5, "b5"), (6, 6, "b6"),
                (7, 7, "b7")]
    assert table_rows(spark, cfg) == expected
    # (the applies compact grown buckets themselves: deltas this small outgrow the base)
    compact(spark, cat, "hr.emp", ratio=0.0, max_deltas=0)
    assert {f.kind for f in cat.files("hr.emp")} == {"base"}
    assert table_rows(spark, cfg) == expected
    # the new base holds exactly one image per key, no tombstone
    from changeflow.apply.target import read_files

    table = cat.get("hr.emp")
    assert table is not None
    raw = read_files(spark, table, cat.files("hr.emp")).collect()
    assert sorted(r.id for r in raw) == [1, 2, 4, 5, 6, 7]
    assert not any(r._cf_deleted for r in raw)


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
    meta = read_table(spark, target_catalog(cfg, cfg.applies[0]), "hr.emp",
                      with_meta=True).collect()
    assert [(r["_cf_tag"], r["_cf_src"]) for r in meta] == [(b"\x0a", "DBS9.EXAMPLE.COM")]


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


def test_a_crash_at_either_side_of_the_commit_applies_exactly_once(
        spark, make_cfg, enqueue, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The crash points ``apply.before_commit`` / ``apply.after_commit`` (the chaos suite
    arms them with CHANGEFLOW_CRASH_AT); here the run dies there in-process."""
    cfg = make_cfg(APPLY)
    rt, q = queue_site(cfg, QUEUE)

    def dies_at(point: str):  # type: ignore[no-untyped-def]
        def die(name: str) -> None:
            if name == point:
                raise SystemExit(f"killed at {name}")
        monkeypatch.setattr("changeflow.faults.point", die)

    enqueue(cfg, [row("INSERT", new=vals(id=1, name="a"), txn="t1", scn=10)])
    dies_at("apply.before_commit")
    with pytest.raises(SystemExit):
        apply_once(spark, cfg, "ap")
    monkeypatch.undo()
    assert target_catalog(cfg, cfg.applies[0]).get("hr.emp") is None  # nothing committed
    assert rt.catalog.position(q, "apply:ap") == 0
    assert apply_once(spark, cfg, "ap").transactions == 1  # the re-run applies it
    enqueue(cfg, [row("UPDATE", new=vals(id=1, name="b"), old=vals(id=1, name="a"), txn="t2",
                      scn=20)])
    dies_at("apply.after_commit")
    with pytest.raises(SystemExit):
        apply_once(spark, cfg, "ap")
    monkeypatch.undo()
    res = apply_once(spark, cfg, "ap")  # committed with the queue position: nothing again
    assert (res.transactions, res.errors, res.superseded) == (0, 0, 0)
    assert table_rows(spark, cfg) == [(1, "b")]
