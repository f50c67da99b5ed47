"""Maintenance spreads the rewrite of deleted rows over the applies, a group of buckets
at a time in turn, on a real Iceberg table changed evenly (docs/apply.md, *Spreading the
rewrite*)."""

from __future__ import annotations

import pytest

from changeflow.apply.engine import apply_once, targets_of
from changeflow.targets.maintenance import maintain
from changeflow.targets.plans import hottest
from changeflow.targets.policy import MaintenancePolicy
from changeflow.views import targets as views

from .conftest import row, vals
from .test_iceberg_maintenance import APPLY, EMP

pytestmark = pytest.mark.spark


def test_the_rewrite_of_deleted_rows_is_spread_over_the_applies(
        spark, make_cfg, enqueue) -> None:  # type: ignore[no-untyped-def]
    """Applies delete 2% of every bucket's rows each (a table changed evenly). Spread,
    the rewrite of deleted rows takes a group of buckets (two: the test session's
    cores) in turn, never the whole table at once: each group when the pace makes its
    turn come, the first early (staggered), later ones at the ratio. The rows stay."""
    cfg = make_cfg(APPLY)
    enqueue(cfg, [row("INSERT", new=vals(id=i, name=f"n{i}"), pos=i) for i in range(2000)])
    apply_once(spark, cfg, "ap")
    targets = targets_of(cfg, cfg.applies[0])
    ident = targets.ident(EMP)
    policy = MaintenancePolicy(delete_ratio=0.1, files_per_bucket=4)
    assert policy.spread and spark.sparkContext.defaultParallelism == 2
    live = {b: sorted(ids) for b, ids in spark.sql(
        f"SELECT _partition.id_bucket, collect_list(id) FROM {ident} GROUP BY 1").collect()}
    assert len(live) == 4

    def by_bucket() -> dict[int, set[str]]:
        out: dict[int, set[str]] = {}
        for b, f in spark.sql(f"SELECT DISTINCT _partition.id_bucket, _file FROM {ident}"
                              ).collect():
            out.setdefault(b, set()).add(f)
        return out

    # what an operator sees of it (PyIceberg, no Spark), with the same policy
    cfg_policy = cfg.model_copy(update={"applies": [cfg.applies[0].model_copy(update={
        "iceberg": cfg.applies[0].iceberg.model_copy(update={"maintenance": policy})})]})
    rewritten: list[list[int]] = []
    seen: list[str] = []
    for n in range(100, 110):  # ten applies of 2% of each bucket's first rows
        gone = [i for b in live for i in live[b][:10]]
        live = {b: ids[10:] for b, ids in live.items()}
        enqueue(cfg, [row("DELETE", old=vals(id=i), txn=f"t{n}", scn=n, pos=i)
                      for i in gone])
        apply_once(spark, cfg, "ap")
        [view] = views.targets(cfg_policy)
        seen.append(view["maintenance"])
        before = by_bucket()
        done = maintain(spark, targets, EMP, policy)
        if "rewrite_data_files_spread" in done:  # the view told the group and why
            assert view["maintenance"] == f"due: {done['rewrite_data_files_spread']['why']}"
        else:
            assert not view["maintenance"].startswith("due: "), (n, view, done)
        after = by_bucket()
        changed = sorted(b for b in before if before[b] != after.get(b))
        rewritten.append(changed)
        assert ("rewrite_data_files_spread" in done) == bool(changed), (n, done)
        if changed:
            assert len(changed) == 2, (n, changed)  # one group, never the whole table
            assert done["rewrite_data_files_spread"]["why"].startswith(
                f"buckets {', '.join(map(str, changed))} of 4 due in turn")
            jt = targets.java_table(spark, EMP)  # the rest's share, for the next apply
            rest = hottest(spark, jt, int(jt.currentSnapshot().snapshotId()))
            assert rest is not None and 0.0 < rest < policy.delete_ratio, rest
        assert "rewrite_data_files" not in done  # no rewrite of the whole table
    # between the turns, the view names the group that comes next and when
    assert any(v.startswith("nothing due (buckets ") and "next in turn, in about" in v
               for v in seen), seen
    groups = [tuple(c) for c in rewritten if c]
    assert len(groups) >= 3 and set(groups[0]) | set(groups[1]) == {0, 1, 2, 3}, rewritten
    assert all(a != b for a, b in zip(groups, groups[1:], strict=False)), rewritten  # in turn
    first = rewritten.index(list(groups[0]))
    assert first < 4, rewritten  # the first group early: staggered
    assert sorted(r[0] for r in spark.sql(f"SELECT id FROM {ident}").collect()) == sorted(
        i for ids in live.values() for i in ids)
    jt = targets.java_table(spark, EMP)
    deleted = int(jt.currentSnapshot().summary().get("total-position-deletes", 0))
    assert deleted < policy.delete_ratio * 1.3 * sum(map(len, live.values()))
