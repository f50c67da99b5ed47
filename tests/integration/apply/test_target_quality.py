"""The apply's target check (write-audit-publish): a staged write that disagrees with the
applied LCRs is caught before anything is published, and kept for the operator."""

from __future__ import annotations

from dataclasses import replace

import pytest

from changeflow.apply.engine import apply_once, targets_of
from changeflow.quality import QualityError, check_target
from changeflow.quality.target import TargetWrite
from changeflow.sites import consumer_name, queue_site
from changeflow.targets import commit as tcommit
from changeflow.targets.read import read_table

from .conftest import QUEUE, row, table_rows, vals

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
