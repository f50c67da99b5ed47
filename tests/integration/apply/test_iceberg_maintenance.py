"""Maintenance of Iceberg targets follows the changes: only the files that need it are
rewritten (small files, files with many of their rows deleted), and many delete files of
a data file are merged, with Iceberg's own procedures on real tables."""

from __future__ import annotations

from typing import Any

import pytest

from changeflow.apply.engine import apply_once, targets_of
from changeflow.jvm import java_each
from changeflow.targets import rowdelta, tables
from changeflow.targets.catalog import TargetTable
from changeflow.targets.maintenance import maintain
from changeflow.targets.policy import MaintenancePolicy
from changeflow.views import targets as views

from .conftest import row, table_rows, vals

pytestmark = pytest.mark.spark

APPLY = """
applies:
  - {name: ap, queue: strmadmin.apply_q@site2, buckets: 4,
     iceberg: {maintenance: {enabled: false}}}
"""
COLUMNS = [("id", "INTEGER"), ("payload", "VARCHAR2")]
NAME, EMP = "hr.big", "hr.emp"


def _rows(spark: Any, lo: int, hi: int, tag: str) -> Any:
    """Rows ``lo <= id < hi`` in the table's layout, with an incompressible payload (the
    files' sizes follow their row counts)."""
    from pyspark.sql import functions as F

    ids = spark.range(lo, hi, 1, 1).select(F.col("id").cast("int").alias("id"))
    payload = F.concat(*[F.sha2(F.concat(F.lit(f"{tag}{i}"), F.col("id").cast("string")), 256)
                         for i in range(4)])
    return ids.select("id", payload.alias("payload"), F.lit("S").alias("_cf_src"),
                      F.lit(1).cast("bigint").alias("_cf_scn"),
                      F.col("id").cast("bigint").alias("_cf_pos"),
                      F.lit(None).cast("binary").alias("_cf_tag"))


def _table(spark: Any, make_cfg: Any) -> Any:
    cfg = make_cfg(APPLY)
    targets = targets_of(cfg, cfg.applies[0])
    targets.register(spark)
    tables.create(spark, targets, TargetTable(NAME, ["id"], COLUMNS, 4))
    _rows(spark, 0, 4000, "base").writeTo(targets.ident(NAME)).append()
    return targets


def _files(spark: Any, targets: Any) -> dict[str, int]:
    """The table's data files and their live rows."""
    rows = spark.sql(f"SELECT _file, count(*) FROM {targets.ident(NAME)} GROUP BY _file")
    return {r[0]: int(r[1]) for r in rows.collect()}


def _summary(spark: Any, targets: Any) -> dict[str, str]:
    return dict(targets.java_table(spark, NAME).currentSnapshot().summary())


def _content(spark: Any, targets: Any) -> list[tuple]:
    return sorted(tuple(r) for r in spark.sql(
        f"SELECT id, payload FROM {targets.ident(NAME)}").collect())


def test_only_the_small_files_are_merged(spark, make_cfg) -> None:  # type: ignore[no-untyped-def]
    targets = _table(spark, make_cfg)
    base = set(_files(spark, targets))
    for i in range(6):  # six applies of a few new rows: small files in every bucket
        _rows(spark, 4000 + 8 * i, 4008 + 8 * i, "new").writeTo(targets.ident(NAME)).append()
    before = _files(spark, targets)
    small = set(before) - base
    content = _content(spark, targets)
    assert len(small) > 4 * 2  # more than two files per bucket: due
    done = maintain(spark, targets, NAME, MaintenancePolicy(files_per_bucket=2))
    rewrite = done["rewrite_data_files"]
    assert "data files" in rewrite["why"]
    assert rewrite["rewritten_data_files_count"] == len(small)
    after = _files(spark, targets)
    assert base <= set(after)  # the large files are left as they were
    assert len(set(after) - base) <= 4  # the small ones: one per bucket at most
    assert _content(spark, targets) == content
    # nothing due any more
    assert "rewrite_data_files" not in maintain(spark, targets, NAME,
                                                MaintenancePolicy(files_per_bucket=2))


def test_only_the_file_with_many_deleted_rows_is_rewritten(spark, make_cfg) -> None:  # type: ignore[no-untyped-def]
    targets = _table(spark, make_cfg)
    files = _files(spark, targets)
    hot = max(files, key=files.get)  # type: ignore[arg-type]
    ids = [r[0] for r in spark.sql(f"SELECT id FROM {targets.ident(NAME)} "
                                   f"WHERE _file = '{hot}' ORDER BY id").collect()]
    gone = ids[: len(ids) * 3 // 10]  # 30% of one file: 7.5% of the table
    gone += [r[0] for r in spark.sql(  # and one row of each other file
        f"SELECT min(id) FROM {targets.ident(NAME)} WHERE _file <> '{hot}' GROUP BY _file"
    ).collect()]
    spark.sql(f"DELETE FROM {targets.ident(NAME)} WHERE id IN ({', '.join(map(str, gone))})")
    summary = _summary(spark, targets)
    assert int(summary["total-position-deletes"]) == len(gone)
    assert 0.05 * int(summary["total-records"]) < len(gone) < 0.1 * int(summary["total-records"])
    content = _content(spark, targets)
    done = maintain(spark, targets, NAME, MaintenancePolicy(delete_ratio=0.05))
    rewrite = done["rewrite_data_files"]
    assert rewrite["why"].startswith(f"deleted rows {len(gone)} of 4000 records")
    assert rewrite["rewritten_data_files_count"] == 1
    after = _files(spark, targets)
    assert hot not in after and set(files) - {hot} <= set(after)
    assert int(_summary(spark, targets)["total-position-deletes"]) == len(files) - 1
    assert _content(spark, targets) == content


def test_files_near_the_ratio_go_with_a_rewrite_that_deleted_rows_made_due(spark, make_cfg) -> None:  # type: ignore[no-untyped-def]
    """A table changed evenly: one file past the ratio, one just under it (9%, past 0.8
    of it) and the others far under. The due rewrite takes the first two, so the second
    is not rewritten alone one apply later; the others are left as they were."""
    targets = _table(spark, make_cfg)
    files = _files(spark, targets)
    hot, near, *cold = sorted(files, key=files.get, reverse=True)  # type: ignore[arg-type]

    def ids(f: str) -> list[int]:
        return [r[0] for r in spark.sql(f"SELECT id FROM {targets.ident(NAME)} "
                                        f"WHERE _file = '{f}' ORDER BY id").collect()]

    gone = ids(hot)[: len(ids(hot)) * 12 // 100] + ids(near)[: len(ids(near)) * 9 // 100]
    gone += [ids(f)[0] for f in cold]
    spark.sql(f"DELETE FROM {targets.ident(NAME)} WHERE id IN ({', '.join(map(str, gone))})")
    content = _content(spark, targets)
    done = maintain(spark, targets, NAME, MaintenancePolicy(delete_ratio=0.1))
    rewrite = done["rewrite_data_files"]
    assert rewrite["why"].startswith("a data file with 12% of its rows deleted")
    assert rewrite["rewritten_data_files_count"] == 2
    assert rewrite["delete_ratio_threshold"] == pytest.approx(0.08)
    after = _files(spark, targets)
    assert hot not in after and near not in after and set(cold) <= set(after)
    assert int(_summary(spark, targets)["total-position-deletes"]) == len(cold)
    assert _content(spark, targets) == content
    # a rewrite due for small files alone keeps the ratio: a 9% file is not taken
    for i in range(12):
        _rows(spark, 9000 + 4 * i, 9004 + 4 * i, "new").writeTo(targets.ident(NAME)).append()
    cool = max(_files(spark, targets), key=_files(spark, targets).get)
    spark.sql(f"DELETE FROM {targets.ident(NAME)} WHERE id IN "
              f"({', '.join(map(str, ids(cool)[: len(ids(cool)) * 9 // 100]))})")
    content_now = _content(spark, targets)
    done = maintain(spark, targets, NAME, MaintenancePolicy(delete_ratio=0.1,
                                                            files_per_bucket=2))
    assert "data files" in done["rewrite_data_files"]["why"]
    assert done["rewrite_data_files"]["delete_ratio_threshold"] == pytest.approx(0.1)
    assert cool in _files(spark, targets)
    # the smallest ratio a policy takes is still a threshold Iceberg accepts (> 0)
    done = maintain(spark, targets, NAME, MaintenancePolicy(delete_ratio=1e-9))
    assert 0 < done["rewrite_data_files"]["delete_ratio_threshold"] < 1e-9
    assert int(_summary(spark, targets).get("total-position-deletes", 0)) == 0
    assert _content(spark, targets) == content_now


def _applied_table(spark: Any, make_cfg: Any, enqueue: Any) -> tuple[Any, Any]:
    """A pipeline whose apply has inserted 400 rows into HR.EMP; its config and targets."""
    cfg = make_cfg(APPLY)
    enqueue(cfg, [row("INSERT", new=vals(id=i, name=f"n{i}"), pos=i) for i in range(400)])
    apply_once(spark, cfg, "ap")
    return cfg, targets_of(cfg, cfg.applies[0])


def _concentrated_deletes(spark: Any, cfg: Any, ident: str, enqueue: Any
                          ) -> tuple[dict[str, list[int]], str, list[int]]:
    """Apply the deletion of 30% of the largest data file's rows (under 10% of the
    table's 400); the ids per data file before, that file, and the ids deleted."""
    per_file = {r[0]: sorted(r[1]) for r in spark.sql(
        f"SELECT _file, collect_list(id) FROM {ident} GROUP BY _file").collect()}
    hot = max(per_file, key=lambda f: len(per_file[f]))
    gone = per_file[hot][: len(per_file[hot]) * 3 // 10]  # 30% of one file
    assert len(gone) < 0.1 * 400  # but under 10% of the table
    enqueue(cfg, [row("DELETE", old=vals(id=i), txn="d1", scn=100, pos=i) for i in gone])
    apply_once(spark, cfg, "ap")
    return per_file, hot, gone


def test_an_apply_keeps_one_delete_file_per_data_file(
        spark, make_cfg, enqueue) -> None:  # type: ignore[no-untyped-def]
    cfg, targets = _applied_table(spark, make_cfg, enqueue)
    base = {r[0] for r in spark.sql(f"SELECT DISTINCT _file FROM {targets.ident(EMP)}")
            .collect()}
    for run in range(3):  # each apply deletes rows of every base file
        enqueue(cfg, [row("DELETE", old=vals(id=i), txn=f"d{run}", scn=100 + run, pos=i)
                      for i in range(run * 40, run * 40 + 40)])
        apply_once(spark, cfg, "ap")
    jt = targets.java_table(spark, EMP)
    # as Spark's own writer: the new delete file of a data file holds the earlier ones'
    # positions, and the commit removes those
    assert {n for f, n in _deletes_per_file(jt).items() if f in base} == {1}
    summary = dict(jt.currentSnapshot().summary())
    assert int(summary["total-delete-files"]) == len(base)
    assert int(summary["total-position-deletes"]) == 120
    assert table_rows(spark, cfg) == [(i, f"n{i}") for i in range(120, 400)]
    # as another reader plans it (PyIceberg): each delete file's file_path bounds name
    # its one data file, so a reader opens it for that file alone
    from changeflow.targets.read import pyiceberg_catalog

    tasks = list(pyiceberg_catalog(targets).load_table(EMP).scan().plan_files())
    named = [(t.file.file_path.encode(), d.lower_bounds.get(rowdelta.FILE_PATH_ID),
              d.upper_bounds.get(rowdelta.FILE_PATH_ID)) for t in tasks for d in t.delete_files]
    assert len(named) == len(base) and all(p == lo == hi for p, lo, hi in named)
    # the whole table's rules: nothing due (a spread rewrite's turn would come)
    policy = MaintenancePolicy(files_per_bucket=2, delete_ratio=0.5, spread=False)
    assert maintain(spark, targets, EMP, policy) == {}


def test_a_file_where_the_applies_concentrate_is_rewritten_before_the_table_is_due(
        spark, make_cfg, enqueue) -> None:  # type: ignore[no-untyped-def]
    cfg, targets = _applied_table(spark, make_cfg, enqueue)
    ident = targets.ident(EMP)
    per_file, hot, gone = _concentrated_deletes(spark, cfg, ident, enqueue)
    jt = targets.java_table(spark, EMP)
    recorded = float(jt.currentSnapshot().summary()[rowdelta.HOTTEST])
    assert recorded == pytest.approx(len(gone) / len(per_file[hot]), abs=1e-6)
    # another writer's snapshot on top (Spark's own DELETE) does not hide it
    other = next(f for f in per_file if f != hot)
    spark.sql(f"DELETE FROM {ident} WHERE id = {per_file[other][-1]}")
    content = table_rows(spark, cfg)
    [view] = views.targets(cfg)  # what an operator sees (PyIceberg, no Spark)
    assert (view["deleted_rows"], view["hottest_file"]) == (len(gone) + 1, f"{recorded:.0%}")
    done = maintain(spark, targets, EMP, MaintenancePolicy(delete_ratio=0.1))
    rewrite = done["rewrite_data_files"]
    assert rewrite["why"] == (f"a data file with {recorded:.0%} of its rows deleted "
                              "(>= 0.1)")
    assert rewrite["rewritten_data_files_count"] == 1
    after = {r[0] for r in spark.sql(f"SELECT DISTINCT _file FROM {ident}").collect()}
    assert hot not in after and set(per_file) - {hot} <= after
    assert table_rows(spark, cfg) == content
    [view] = views.targets(cfg)
    assert (view["deleted_rows"], view["hottest_file"]) == (1, "0%")
    # the rewrite starts the count again: one more deleted row is far from due
    enqueue(cfg, [row("DELETE", old=vals(id=per_file[other][0]), txn="d2", scn=101, pos=0)])
    apply_once(spark, cfg, "ap")
    jt.refresh()
    assert float(jt.currentSnapshot().summary()[rowdelta.HOTTEST]) < 0.1
    # rows an apply adds (small files) and the next one deletes do not count: the small
    # files are merged for being small
    enqueue(cfg, [row("INSERT", new=vals(id=i, name=f"n{i}"), txn="i3", scn=102, pos=i)
                  for i in range(1000, 1008)])
    apply_once(spark, cfg, "ap")
    enqueue(cfg, [row("DELETE", old=vals(id=i), txn="d4", scn=103, pos=i)
                  for i in range(1000, 1004)])
    apply_once(spark, cfg, "ap")
    jt.refresh()
    assert float(jt.currentSnapshot().summary()[rowdelta.HOTTEST]) < 0.1
    assert "rewrite_data_files" not in maintain(spark, targets, EMP,
                                                MaintenancePolicy(delete_ratio=0.1))
    # another writer deletes 40% of a file: the next row delta counts it (from the plan)
    many = per_file[other][1:len(per_file[other]) * 4 // 10]
    spark.sql(f"DELETE FROM {ident} WHERE id IN ({', '.join(map(str, many))})")
    enqueue(cfg, [row("INSERT", new=vals(id=2000, name="x"), txn="i5", scn=104, pos=0)])
    apply_once(spark, cfg, "ap")
    jt.refresh()
    assert float(jt.currentSnapshot().summary()[rowdelta.HOTTEST]) == pytest.approx(
        (len(many) + 2) / len(per_file[other]), abs=1e-6)


def test_deletion_vectors_where_the_applies_concentrate_are_found_in_the_plan(
        spark, make_cfg, enqueue, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A format-version 3 table's applies write with ``MERGE INTO`` (deletion vectors),
    which records no share: maintenance finds the file from the scan plan, and plans
    only when the table's deleted rows could make a file due."""
    from changeflow.targets import maintenance

    cfg = make_cfg("applies: [{name: ap, queue: strmadmin.apply_q@site2, buckets: 4, "
                   "iceberg: {format_version: 3, maintenance: {enabled: false}}}]")
    enqueue(cfg, [row("INSERT", new=vals(id=i, name=f"n{i}"), pos=i) for i in range(400)])
    apply_once(spark, cfg, "ap")
    targets = targets_of(cfg, cfg.applies[0])
    ident = targets.ident(EMP)
    per_file, hot, gone = _concentrated_deletes(spark, cfg, ident, enqueue)
    jt = targets.java_table(spark, EMP)
    snap = jt.currentSnapshot()
    assert int(jt.operations().current().formatVersion()) == 3
    assert rowdelta.HOTTEST not in dict(snap.summary())  # not a row delta's snapshot
    policy = MaintenancePolicy(delete_ratio=0.1)
    share = len(gone) / len(per_file[hot])
    assert maintenance.hottest_now(spark, jt, snap, policy) == pytest.approx(share, abs=1e-6)
    [view] = views.targets(cfg)  # the operator's view plans it too (PyIceberg)
    assert (view["deleted_rows"], view["hottest_file"]) == (len(gone), f"{share:.0%}")
    content = table_rows(spark, cfg)
    rewrite = maintain(spark, targets, EMP, policy)["rewrite_data_files"]
    assert rewrite["why"] == f"a data file with {share:.0%} of its rows deleted (>= 0.1)"
    assert rewrite["rewritten_data_files_count"] == 1
    after = {r[0] for r in spark.sql(f"SELECT DISTINCT _file FROM {ident}").collect()}
    assert hot not in after and set(per_file) - {hot} <= after
    assert table_rows(spark, cfg) == content
    assert views.targets(cfg)[0]["hottest_file"] == "0%"
    # one deleted row cannot make a file of the average size due: no plan is made
    planned: list[float] = []
    real = maintenance.planned_hottest
    monkeypatch.setattr(maintenance, "planned_hottest",
                        lambda *a: planned.append(real(*a)) or planned[-1])
    other = next(f for f in per_file if f != hot)
    enqueue(cfg, [row("DELETE", old=vals(id=per_file[other][0]), txn="d2", scn=101, pos=0)])
    apply_once(spark, cfg, "ap")
    assert "rewrite_data_files" not in maintain(spark, targets, EMP, policy)
    assert planned == []


def test_many_delete_files_of_a_data_file_are_merged(spark, make_cfg) -> None:  # type: ignore[no-untyped-def]
    targets = _table(spark, make_cfg)
    # a table whose writers scope deletes by partition (as tables made before file scope)
    spark.sql(f"ALTER TABLE {targets.ident(NAME)} SET TBLPROPERTIES "
              "('write.delete.granularity' = 'partition')")
    files = _files(spark, targets)
    per_file = [sorted(r[1]) for r in spark.sql(
        f"SELECT _file, collect_list(id) FROM {targets.ident(NAME)} GROUP BY _file").collect()]
    for i in range(3):  # three deletes of a row in each data file: 3 delete files each
        ids = ", ".join(str(ids[i]) for ids in per_file)
        spark.sql(f"DELETE FROM {targets.ident(NAME)} WHERE id IN ({ids})")
    jt = targets.java_table(spark, NAME)
    assert set(_deletes_per_file(jt).values()) == {3}
    content = _content(spark, targets)
    done = maintain(spark, targets, NAME, MaintenancePolicy(files_per_bucket=2))
    assert "rewrite_data_files" not in done  # few rows deleted: the data files stay
    merged = done["rewrite_position_delete_files"]
    assert merged["why"] == f"{3 * len(files)} delete files for {len(files)} data files"
    assert merged["rewritten_delete_files_count"] == 3 * len(files)
    jt.refresh()
    assert set(_deletes_per_file(jt).values()) == {1}
    assert int(jt.currentSnapshot().summary()["total-position-deletes"]) == 3 * len(files)
    assert set(_files(spark, targets)) == set(files)
    assert _content(spark, targets) == content


def _deletes_per_file(jt: Any) -> dict[str, int]:
    out = {}
    tasks = jt.newScan().planFiles()
    it = tasks.iterator()
    while it.hasNext():
        task = it.next()
        out[str(task.file().location())] = len(list(task.deletes()))
    tasks.close()
    return out


def test_a_merge_of_small_files_waits_for_a_rewrite_of_deleted_rows_due_soon(
        spark, make_cfg, enqueue) -> None:  # type: ignore[no-untyped-def]
    """Applies delete 3% of every large file's rows each (a table changed evenly) and
    add small files. Where the files are due for a merge while the applies' pace makes
    the deleted rows due within two applies, the merge waits; the rewrite of deleted
    rows then merges the small files too. An operator's run does not wait."""
    cfg = make_cfg(APPLY)
    enqueue(cfg, [row("INSERT", new=vals(id=i, name=f"n{i}"), pos=i) for i in range(2000)])
    apply_once(spark, cfg, "ap")
    targets = targets_of(cfg, cfg.applies[0])
    ident = targets.ident(EMP)
    # the whole table's rewrite of deleted rows (spreading it is tested below)
    policy = MaintenancePolicy(delete_ratio=0.1, files_per_bucket=1, spread=False)
    scn = iter(range(100, 200))

    def large() -> dict[str, list[int]]:
        return {f: sorted(ids) for f, ids in spark.sql(
            f"SELECT _file, collect_list(id) FROM {ident} GROUP BY _file "
            "HAVING count(*) >= 100").collect()}

    def apply(files: dict[str, list[int]], done: float, now: float, new: int = 0) -> None:
        """Delete the rows of each file between the shares ``done`` and ``now`` of it;
        insert ``new`` rows (small files)."""
        n = next(scn)
        gone = [i for ids in files.values()
                for i in ids[round(len(ids) * done):round(len(ids) * now)]]
        lcrs = [row("DELETE", old=vals(id=i), txn=f"t{n}", scn=n, pos=i) for i in gone]
        lcrs += [row("INSERT", new=vals(id=10_000 + 100 * n + k, name="new"), txn=f"t{n}",
                     scn=n, pos=5000 + k) for k in range(new)]
        enqueue(cfg, lcrs)
        apply_once(spark, cfg, "ap")

    base = large()
    assert len(base) == 4
    apply(base, 0.0, 0.03)
    apply(base, 0.03, 0.06)
    assert maintain(spark, targets, EMP, policy) == {}  # nothing due yet
    apply(base, 0.06, 0.09, new=40)  # 9% of each large file: one apply from due
    before = set(_files_of(spark, ident))
    assert len(before) > 4 * policy.files_per_bucket  # due for the small files alone
    done = maintain(spark, targets, EMP, policy)
    assert "rewrite_data_files" not in done
    assert "data files" in done["deferred"]["why"]
    assert done["deferred"]["waits"].startswith("deleted rows make a rewrite due within 1")
    assert set(_files_of(spark, ident)) == before  # nothing rewritten
    cfg_policy = cfg.model_copy(update={"applies": [cfg.applies[0].model_copy(update={
        "iceberg": cfg.applies[0].iceberg.model_copy(update={"maintenance": policy})})]})
    [view] = views.targets(cfg_policy)  # what an operator sees (PyIceberg, no Spark)
    assert view["maintenance"] == f"waits: {done['deferred']['waits']}"
    assert views.targets(cfg)[0]["maintenance"] == "off"  # the apply's own policy
    apply(base, 0.09, 0.12)
    content = table_rows(spark, cfg)
    [view] = views.targets(cfg_policy)
    assert view["maintenance"].startswith("due: ")
    done = maintain(spark, targets, EMP, policy)
    assert view["maintenance"] == f"due: {done['rewrite_data_files']['why']}"
    assert "deleted rows" in done["rewrite_data_files"]["why"]
    assert views.targets(cfg_policy)[0]["maintenance"] == "nothing due"
    after = _files_of(spark, ident)
    assert not set(after) & before  # the small files were merged with the large ones
    assert len(after) <= 4
    jt = targets.java_table(spark, EMP)
    assert int(jt.currentSnapshot().summary().get("total-position-deletes", 0)) == 0
    assert table_rows(spark, cfg) == content
    # the same pace after the rewrite: an operator's run merges without waiting
    rewritten = large()
    apply(rewritten, 0.0, 0.03)
    apply(rewritten, 0.03, 0.06, new=40)
    small = set(_files_of(spark, ident)) - set(rewritten)
    assert "deferred" in maintain(spark, targets, EMP, policy)
    done = maintain(spark, targets, EMP, policy, defer=False)
    assert "deferred" not in done and "data files" in done["rewrite_data_files"]["why"]
    assert not small & set(_files_of(spark, ident))


def _files_of(spark: Any, ident: str) -> dict[str, int]:
    """A table's data files and their live rows."""
    return {r[0]: int(r[1]) for r in spark.sql(
        f"SELECT _file, count(*) FROM {ident} GROUP BY _file").collect()}


def test_snapshots_past_the_age_are_expired_keeping_the_last_ones(
        spark, make_cfg) -> None:  # type: ignore[no-untyped-def]
    """``expire_snapshots`` runs once the oldest snapshot is past ``expire_after_hours``
    and removes every one past it but the last ``retain_last``; younger ones stay, and
    time travel reaches them."""
    import time

    targets = _table(spark, make_cfg)
    for i in range(3):
        _rows(spark, 4000 + i, 4001 + i, "old").writeTo(targets.ident(NAME)).append()
    jt = targets.java_table(spark, NAME)
    old = [s.snapshotId() for s in java_each(jt.snapshots())]
    time.sleep(2)
    for i in range(2):
        _rows(spark, 5000 + i, 5001 + i, "new").writeTo(targets.ident(NAME)).append()
    content = _content(spark, targets)
    young = MaintenancePolicy(expire_after_hours=1, retain_last=1)
    assert "expire_snapshots" not in maintain(spark, targets, NAME, young)
    jt.refresh()
    # the age that falls between the old snapshots and the new ones, as maintain runs
    between = (jt.snapshot(old[-1]).timestampMillis() + 1000) / 1000
    policy = MaintenancePolicy(expire_after_hours=(time.time() - between) / 3600,
                               retain_last=1)
    done = maintain(spark, targets, NAME, policy)
    assert done["expire_snapshots"]["deleted_manifest_lists_count"] == len(old)
    jt.refresh()
    kept = [s.snapshotId() for s in java_each(jt.snapshots())]
    assert len(kept) == 2 and not set(kept) & set(old)
    assert _content(spark, targets) == content
    assert spark.sql(f"SELECT count(*) FROM {targets.ident(NAME)} VERSION AS OF {kept[0]}"
                     ).first()[0] == len(content) - 1
    with pytest.raises(Exception, match="(?i)snapshot|version"):
        spark.sql(f"SELECT * FROM {targets.ident(NAME)} VERSION AS OF {old[-1]}").collect()
