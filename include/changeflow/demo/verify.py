"""The demo's end-to-end check: every applied target equals the source's final state."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from changeflow.apply.engine import targets_of
from changeflow.capture.snapshot import list_snapshots, read_snapshot
from changeflow.config import ApplySpec, PipelineConfig
from changeflow.targets.read import read_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass
class TableCheck:
    """The comparison of one table."""

    table: str
    source_rows: int
    target_rows: int
    missing: int
    unexpected: int

    @property
    def ok(self) -> bool:
        return self.missing == 0 and self.unexpected == 0 and self.source_rows == self.target_rows


@dataclass
class Verification:
    """All tables of a demo run."""

    tables: list[TableCheck] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.tables) and all(t.ok for t in self.tables)

    def report(self) -> str:
        lines = [f"{'table':<18}{'source':>8}{'target':>8}{'missing':>9}{'extra':>7}  result"]
        for t in self.tables:
            lines.append(f"{t.table:<18}{t.source_rows:>8}{t.target_rows:>8}{t.missing:>9}"
                         f"{t.unexpected:>7}  {'OK' if t.ok else 'DIFFERS'}")
        lines.append("verification: " + ("PASSED" if self.ok else "FAILED"))
        return "\n".join(lines)


def verify(spark: SparkSession, cfg: PipelineConfig, apply_name: str) -> Verification:
    """Compare each captured table's latest snapshot with the apply's target table."""
    from pyspark.sql import functions as F

    spec: ApplySpec = cfg.component("apply", apply_name)
    targets = targets_of(cfg, spec)
    names = set(targets.names(spark))
    out = Verification()
    for cap in cfg.captures:
        if cap.source.type != "snapshot":
            continue
        for t in cap.source.tables:
            n = max(list_snapshots(spark, cap.source, t.name), default=None)
            if n is None:
                continue
            src = read_snapshot(spark, cap.source, t, n)
            src = src.select(*[F.col(c).alias(c.lower()) for c in src.columns])
            tgt = read_table(spark, targets, t.name.lower()) if t.name.lower() in names \
                else src.limit(0)
            tgt = tgt.select(*[F.col(f.name).cast(f.dataType) for f in src.schema.fields])
            out.tables.append(TableCheck(
                t.name.lower(), src.count(), tgt.count(),
                src.exceptAll(tgt).count(), tgt.exceptAll(src).count()))
    print(out.report())
    return out
