"""The apply's target check (write-audit-publish): a staged write that disagrees with the
applied LCRs is caught before anything is published, and kept for the operator."""

from __future__ import annotations

from dataclasses import replace

import pytest

from changeflow.apply.engine import apply_once, targets_of
from changeflow.jvm import java_each
from changeflow.quality import QualityError, check_target
from changeflow.quality.target import TargetWrite
from changeflow.sites import consumer_name, queue_site
from changeflow.targets import commit as tcommit
from changeflow.targets.read import read_table

from .conftest import QUEUE, row, table_rows, taken, vals

pytestmark = pytest.mark.spark
APPLY = "applies: [{name: ap, queue: strmadmin.apply_q@site2, buckets: 2}]"


def test_a_write_that_disagrees_with_the_lcrs_is_never_published(
        spark, make_cfg, enqueue, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from changeflow.apply import tables

    cfg = make_cfg(APPLY)
    enqueue(cfg, [row("INSERT", new=vals(id=i, name=f"n{i}"), pos=i) for i in (1, 2)])
    apply_once(spark, cfg, "ap")
    before = table_rows(spark, cfg)
    enqueue(cfg, [row("INSERT", new=vals(id=3, name="c"), txn="t2", scn=20),
                  row("DELETE", old=vals(id=1), txn="t2", scn=20, pos=2)])
    real = tables.TablePlan.images

    def lossy(self, tag, failed):  # type: ignore[no-untyped-def]
        return real(self, tag, failed).where("_cf_op <> 'D'")  # a lost delete

    monkeypatch.setattr(tables.TablePlan, "images", lossy)
    with pytest.raises(QualityError, match="target_rows_as_applied") as info:
        apply_once(spark, cfg, "ap")
    counts = next(c for c in info.value.report.blocking_failures
                  if c.check == "target_rows_reconcile").samples[0]
    # Iceberg's own count after the staged write says 3; the LCRs say 2
    assert (counts["rows_before"], counts["rows_after"], counts["expected_after"]) == (2, 3, 2)
    monkeypatch.undo()
    assert table_rows(spark, cfg) == before  # nothing published
    rt, q = queue_site(cfg, QUEUE)
    assert len(rt.catalog.pending(q, consumer_name("apply", "ap"))) == 1
    # the staged write is kept as a branch an operator can read
    kept = info.value.report.quarantine_path or ""
    assert ".branch_quarantine_" in kept
    targets = targets_of(cfg, cfg.applies[0])
    branch = kept.rsplit(".branch_", 1)[1]
    quarantined = spark.table(targets.ident("hr.emp", branch=branch)).select("id", "name")
    assert sorted(tuple(r) for r in quarantined.collect()) == [(1, "n1"), (2, "n2"), (3, "c")]
    apply_once(spark, cfg, "ap")  # without the fault, the same batch applies
    assert table_rows(spark, cfg) == [(2, "n2"), (3, "c")]


def test_a_row_delta_is_checked_from_the_files_it_wrote(
        spark, make_cfg, enqueue, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Where the pass wrote a row delta, the check counts the changed keys' rows from the
    rows it looked up and the files the staged snapshot adds and removes, read back (no
    scan of the table): a row the write failed to delete is caught; where an earlier
    delete file's position was lost, the check reads the branch and catches it too."""
    from changeflow.targets import rowdelta

    # no maintenance: the delete files of one pass stay for the next to merge
    cfg = make_cfg("applies: [{name: ap, queue: strmadmin.apply_q@site2, buckets: 2, "
                   "iceberg: {maintenance: {enabled: false}}}]")
    enqueue(cfg, [row("INSERT", new=vals(id=i, name=f"n{i}"), pos=i) for i in range(1, 9)])
    apply_once(spark, cfg, "ap")
    counted = taken(monkeypatch, rowdelta, "key_counts")

    def no_scan(*a, **k):  # type: ignore[no-untyped-def]
        raise AssertionError("the branch was read")

    with monkeypatch.context() as m:
        m.setattr(tcommit, "read_branch", no_scan)
        enqueue(cfg, [row("UPDATE", old=vals(id=1, name="n1"), new=vals(id=1, name="u1"),
                          txn="t2", scn=20),
                      *[row("DELETE", old=vals(id=i, name=f"n{i}"), txn="t2", scn=20, pos=i)
                        for i in (2, 3, 4)],
                      row("INSERT", new=vals(id=9, name="n9"), txn="t2", scn=20, pos=9)])
        apply_once(spark, cfg, "ap")
    assert counted == [True]
    assert table_rows(spark, cfg, cols=["id", "name"]) == [
        (1, "u1"), (5, "n5"), (6, "n6"), (7, "n7"), (8, "n8"), (9, "n9")]
    before = table_rows(spark, cfg)

    # a write that leaves the old row of key 5 in place: two rows of it on the branch
    real_gone = rowdelta._gone

    def kept_one(located, ops, keys):  # type: ignore[no-untyped-def]
        gone = real_gone(located, ops, keys)
        five = {(f, p) for f, p, k in zip(located["_l_file"].to_pylist(),
                                          located["_l_pos"].to_pylist(),
                                          located["id"].to_pylist(), strict=True) if k == 5}
        return gone.filter(pa.array([(f, p) not in five for f, p in zip(
            gone["file_path"].to_pylist(), gone["pos"].to_pylist(), strict=True)]))

    import pyarrow as pa

    updates = [row("UPDATE", old=vals(id=i, name=f"n{i}"), new=vals(id=i, name=f"v{i}"),
                   txn="t3", scn=30, pos=i) for i in (5, 6, 7, 8)]
    enqueue(cfg, updates)
    with monkeypatch.context() as m:
        m.setattr(rowdelta, "_gone", kept_one)
        with pytest.raises(QualityError, match="target_key_unique"):
            apply_once(spark, cfg, "ap")
    assert counted[-1] is True and table_rows(spark, cfg) == before

    # a merge of delete files that loses the earlier ones' positions (keys 2-4 return):
    # not provable from the files, so the branch is read, and the counts disagree
    with monkeypatch.context() as m:
        m.setattr(rowdelta, "_positions", lambda fio, locs: pa.array([], pa.int64()))
        with pytest.raises(QualityError, match="target_rows_reconcile"):
            apply_once(spark, cfg, "ap")
    assert counted[-1] is False and table_rows(spark, cfg) == before
    apply_once(spark, cfg, "ap")  # without the faults, the same batch applies
    assert counted[-1] is True
    assert table_rows(spark, cfg, cols=["id", "name"]) == [
        (1, "u1"), (5, "v5"), (6, "v6"), (7, "v7"), (8, "v8"), (9, "n9")]


def test_column_types_must_be_the_declared_ones(spark, make_cfg, enqueue) -> None:  # type: ignore[no-untyped-def]
    cfg = make_cfg(APPLY)
    enqueue(cfg, [row("INSERT", new=vals(id=1, name="a"))])
    apply_once(spark, cfg, "ap")
    targets = targets_of(cfg, cfg.applies[0])
    table = targets.get(spark, "hr.emp")
    assert table is not None
    # LCRs that declare the name a number: the table holds it as a string
    declared = replace(table, columns=[("id", "INTEGER"), ("name", "INTEGER")])
    staged = tcommit.Staged(declared, "main", table.snapshot)
    with pytest.raises(QualityError, match="target_column_types") as info:
        check_target(spark, cfg, stage="apply:ap", targets=targets,
                     writes=[TargetWrite(declared, staged)])
    [fail] = [c for c in info.value.report.blocking_failures if c.check == "target_column_types"]
    assert fail.samples == [{"table_name": "hr.emp", "column": "name", "declared": "bigint",
                             "written": "string", "type_as_declared": False}]
    assert read_table(spark, targets, "hr.emp").count() == 1


def test_a_failed_delete_write_beside_the_append_publishes_nothing(
        spark, make_cfg, enqueue, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The row delta writes its delete files on the driver while Spark appends the
    images: when the delete files cannot be written, the append that succeeded beside it
    is never committed to ``main``, and the same batch applies once on the next run."""
    from changeflow.targets import rowdelta

    cfg = make_cfg(APPLY)
    enqueue(cfg, [row("INSERT", new=vals(id=i, name=f"n{i}"), pos=i) for i in range(1, 5)])
    apply_once(spark, cfg, "ap")
    targets = targets_of(cfg, cfg.applies[0])
    jt = targets.java_table(spark, "hr.emp")
    snapshot = jt.currentSnapshot().snapshotId()
    before = table_rows(spark, cfg)
    enqueue(cfg, [row("UPDATE", old=vals(id=1, name="n1"), new=vals(id=1, name="u1"),
                      txn="t2", scn=20),
                  row("DELETE", old=vals(id=3, name="n3"), txn="t2", scn=20, pos=2)])
    scratch: list[str] = []
    real_scratch = rowdelta.scratch_of

    def branch(staged: str) -> str:
        scratch.append(real_scratch(staged))
        return scratch[-1]

    monkeypatch.setattr(rowdelta, "scratch_of", branch)

    def refused(*a, **k):  # type: ignore[no-untyped-def]
        raise OSError("the store refused a delete file")

    with monkeypatch.context() as m:
        m.setattr(rowdelta, "_add_deletes", refused)
        with pytest.raises(OSError, match="refused a delete file"):
            apply_once(spark, cfg, "ap")
    assert len(scratch) == 1  # the row delta's path was taken
    jt.refresh()
    assert jt.currentSnapshot().snapshotId() == snapshot and table_rows(spark, cfg) == before
    rt, q = queue_site(cfg, QUEUE)
    assert len(rt.catalog.pending(q, consumer_name("apply", "ap"))) == 1
    apply_once(spark, cfg, "ap")  # without the fault, the same batch applies once
    assert table_rows(spark, cfg, cols=["id", "name"]) == [(1, "u1"), (2, "n2"), (4, "n4")]
    jt.refresh()
    assert [str(r) for r in java_each(jt.refs().keySet())] == ["main"]  # no branch left
    assert not rt.catalog.pending(q, consumer_name("apply", "ap"))
