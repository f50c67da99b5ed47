"""Target tables and the snapshots each apply wrote (``DBA_APPLY`` has no such view: these
are Iceberg's own ``snapshots`` metadata, read with PyIceberg, no Spark needed).

Every snapshot an apply writes carries the pass that wrote it: the queue's batch range,
the newest commit position per source database applied (``changeflow.positions``) and
the pass id (:mod:`changeflow.targets.commit`).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterator
from typing import Any

from changeflow.config import ApplySpec, PipelineConfig
from changeflow.jvm import default_master, local_cores
from changeflow.sites import queue_site
from changeflow.targets.catalog import IcebergTargets, rows_of
from changeflow.targets.maintenance import TARGET_FILE_SIZE, hottest_at, rewrite_plan
from changeflow.targets.plans import hottest_of, largest_per_bucket, recorded_growth
from changeflow.targets.policy import MaintenancePolicy
from changeflow.targets.read import pyiceberg_catalog
from changeflow.targets.spread import (
    GROUP,
    applies_to_turn,
    counted_rows,
    due_buckets,
    next_group,
    spreads,
    turn,
)
from changeflow.views.common import check_component

TABLE_COLUMNS = (
    ("apply", "text"), ("table", "text"), ("rows", "count"), ("snapshots", "count"),
    ("data_files", "count", "data files"), ("delete_files", "count", "delete files"),
    ("deleted_rows", "count", "deleted rows"),
    ("hottest_file", "text", "most deleted in a file"),
    ("maintenance", "text", "maintenance"),
    ("last_positions", "text", "applied up to"), ("last_commit", "time", "last commit"))
SNAPSHOT_COLUMNS = (
    ("table", "text"), ("snapshot", "text"), ("committed_at", "time", "committed"),
    ("operation", "text"), ("batches", "text"), ("positions", "text", "applied up to"),
    ("rows", "count"), ("pass_id", "text", "pass"))


def _targets(cfg: PipelineConfig, spec: ApplySpec) -> IcebergTargets:
    rt, _ = queue_site(cfg, spec.queue)
    return IcebergTargets(rt.name, rt.store, rt.spec.target_root,
                          format_version=spec.iceberg.format_version)


def _applies(cfg: PipelineConfig, component: str | None) -> list[ApplySpec]:
    check_component(cfg, "apply", component)
    return [a for a in cfg.applies if a.target is None and component in (None, a.name)]


def _main(table: Any) -> Iterator[Any]:
    """A PyIceberg table's snapshots on ``main``, newest first."""
    meta = table.metadata
    by_id = {s.snapshot_id: s for s in meta.snapshots}
    current = meta.current_snapshot_id
    while current is not None and current in by_id:
        yield by_id[current]
        current = by_id[current].parent_snapshot_id


def _summary(s: Any) -> dict[str, str]:
    return dict(s.summary.additional_properties) if s.summary else {}


def _chain(table: Any) -> Iterator[tuple[str, dict[str, str]]]:
    """A PyIceberg table's snapshots on ``main``, newest first, as (operation, summary)."""
    return ((s.summary.operation.value if s.summary else "", _summary(s))
            for s in _main(table))


def _maintenance(table: Any, policy: MaintenancePolicy, hot: float) -> str:
    """What an apply's maintenance would do to the table's data files now: the rewrite of
    a group of buckets whose turn it is (:func:`_turn`, where the rewrite is spread),
    then the whole table's rules (:func:`changeflow.targets.maintenance.rewrite_plan`):
    ``due: <why>`` (each that is due, joined by ``; ``), ``waits: <why>`` (a merge of
    small files waiting for a rewrite of deleted rows due soon), ``nothing due`` (with
    the next group's turn, where the rewrite is spread), or ``off``."""
    cur = table.metadata.current_snapshot()
    if not policy.enabled:
        return "off"
    if cur is None:
        return "nothing due"
    buckets = max([getattr(f.transform, "num_buckets", 0) for f in table.spec().fields]
                  or [0])
    target = int(table.properties.get("write.target-file-size-bytes", TARGET_FILE_SIZE))
    summary = _summary(cur)
    spread = _turn(table, policy, hot, buckets, summary) if policy.spread else None
    said = []
    if spread is not None and spread[0]:
        said.append(f"due: {spread[1]}")
        hot = spread[2]
    # while the rewrite is spread, a merge of small files does not wait for it
    why, wait = rewrite_plan(summary, buckets, policy, target, hot, lambda: (
        None if spread is not None else recorded_growth(_chain(table))))
    if wait is not None:
        said.append(f"waits: {wait}")
    elif why is not None:
        said.append(f"due: {why}")
    if said:
        return "; ".join(said)
    return f"nothing due ({spread[1]})" if spread is not None else "nothing due"


def _turn(table: Any, policy: MaintenancePolicy, hot: float, buckets: int,
          summary: dict[str, str]) -> tuple[bool, str, float] | None:
    """Where maintenance spreads the rewrite of deleted rows (:mod:`changeflow.targets
    .spread`): whether a group's turn is now, why (or which group comes next, and in how
    many applies), and the largest share left in the other buckets; None where it does
    not spread. The group is as many buckets as the last spread rewrite took at once
    (recorded: the cluster's cores then), else as the local master's cores."""
    group = next((int(s[GROUP]) for _, s in _chain(table) if s.get(GROUP)), None) \
        or local_cores(default_master())
    pace = recorded_growth(_chain(table))
    if group is None or not spreads(buckets, group, hot, policy.delete_ratio) \
            or pace is None or pace <= 0:
        return None
    records, files = int(summary.get("total-records", 0)), int(
        summary.get("total-data-files", 0))
    shares = largest_per_bucket(_file_shares(
        table, table.metadata.current_snapshot().snapshot_id, counted_rows(records, files),
        buckets=True))
    chosen = due_buckets(shares, policy.delete_ratio, pace, group)
    if chosen:
        rest = max((v for b, v in shares.items() if b not in chosen), default=0.0)
        return True, turn(chosen, shares, buckets, pace), rest
    wait = applies_to_turn(shares, policy.delete_ratio, pace, group) or 0.0
    n = max(1, math.ceil(wait))
    nxt = ", ".join(map(str, next_group(shares, group)))
    return False, (f"buckets {nxt} of {buckets} next in turn, in about {n} "
                   f"appl{'y' if n == 1 else 'ies'}"), hot


def _hottest(table: Any, delete_ratio: float) -> float:
    """The largest share of a data file's rows deleted in a PyIceberg table, as
    maintenance sees it (:func:`changeflow.targets.maintenance.hottest_at`).

    PyIceberg does not read the data file a format-version 2 delete file names
    (``referenced_data_file``), only its ``file_path`` bounds (which the row deltas'
    delete files carry, as Spark's do): the share the row deltas recorded on ``main``
    (:func:`changeflow.targets.plans.hottest_of`) counts too, for older files."""
    cur = table.metadata.current_snapshot()
    if cur is None:
        return 0.0
    recorded = hottest_of(_chain(table), others=False) or 0.0
    return max(recorded, hottest_at(_summary(cur), delete_ratio, lambda average: _planned(
        table, cur.snapshot_id, average)))


def _planned(table: Any, snapshot_id: int, average: float) -> float:
    """:func:`changeflow.targets.plans.planned_hottest` with PyIceberg's scan plan
    (:func:`_file_shares`)."""
    return max((share for _, share in _file_shares(table, snapshot_id, average)),
               default=0.0)


def _file_shares(table: Any, snapshot_id: int, average: float, *, buckets: bool = False
                 ) -> Iterator[tuple[int | None, float]]:
    """Each data file's share of rows deleted at the snapshot (files of fewer than
    ``average`` rows: 0.0), with its bucket when asked (None for another partition
    spec's files), as :func:`changeflow.targets.plans.bucket_shares` plans it, over the
    delete files whose data file PyIceberg can tell: deletion vectors (from their
    Puffin files' blob metadata, :func:`_vectors`) and Parquet position deletes whose
    ``file_path`` bounds name one file (PyIceberg's own rule)."""
    from pyiceberg.manifest import DataFileContent, FileFormat
    from pyiceberg.transforms import BucketTransform

    from changeflow.targets.rowdelta import FILE_PATH_ID

    spec = table.spec()
    at = next((i for i, f in enumerate(spec.fields)
               if isinstance(f.transform, BucketTransform)), None) if buckets else None
    tasks = list(table.scan(snapshot_id=snapshot_id).plan_files())
    vectors = _vectors(table, {d.file_path for t in tasks for d in t.delete_files
                               if d.file_format == FileFormat.PUFFIN})
    for task in tasks:
        records, path = task.file.record_count, task.file.file_path
        bucket = task.file.partition[at] if at is not None and \
            task.file.spec_id == spec.spec_id else None
        if not records or records < average:
            yield bucket, 0.0
            continue
        n = vectors.get(path, 0)
        for d in task.delete_files:
            if d.content != DataFileContent.POSITION_DELETES or d.file_format != \
                    FileFormat.PARQUET:
                continue
            lo = (d.lower_bounds or {}).get(FILE_PATH_ID)
            if lo is not None and lo == (d.upper_bounds or {}).get(FILE_PATH_ID) \
                    and lo == path.encode():
                n += d.record_count
        yield bucket, min(n / records, 1.0)


def _vectors(table: Any, puffins: set[str]) -> dict[str, int]:
    """Per data file, the rows its deletion vector deletes, from the blob metadata of
    the Puffin files (PyIceberg does not read which data file a vector names). A newer
    vector of a data file holds the older one's positions: the largest counts."""
    from pyiceberg.table.puffin import PuffinFile

    out: dict[str, int] = {}
    for path in sorted(puffins):
        with table.io.new_input(path).open() as f:
            footer = PuffinFile(f.read()).footer
        for blob in footer.blobs:
            ref = blob.properties.get("referenced-data-file")
            if blob.type == "deletion-vector-v1" and ref is not None:
                out[ref] = max(out.get(ref, 0), int(blob.properties.get("cardinality", 0)))
    return out


def _snapshots(table: Any, name: str) -> list[dict[str, Any]]:
    """A PyIceberg table's snapshots on ``main``, oldest first."""
    out = []
    for s in reversed(list(_main(table))):
        summary = _summary(s)
        out.append({
            "table": name, "snapshot": str(s.snapshot_id),
            "committed_at": dt.datetime.fromtimestamp(s.timestamp_ms / 1000, dt.UTC),
            "operation": s.summary.operation.value if s.summary else None,
            "batches": summary.get("changeflow.batches"),
            "positions": summary.get("changeflow.positions"),
            "rows": rows_of(summary), "pass_id": summary.get("changeflow.pass-id"),
            "apply": summary.get("changeflow.apply")})
    return out


def snapshots(cfg: PipelineConfig, component: str | None = None) -> list[dict[str, Any]]:
    """Every snapshot on ``main`` of every target table of the pipeline's applies.

    Raises:
        UnknownComponentError: ``component`` is not an apply of the pipeline.
    """
    out: list[dict[str, Any]] = []
    for spec in _applies(cfg, component):
        catalog = pyiceberg_catalog(_targets(cfg, spec))
        for ns in catalog.list_namespaces():
            for ident in catalog.list_tables(ns):
                name = ".".join(ident)
                out += [{**s, "apply": s["apply"] or spec.name}
                        for s in _snapshots(catalog.load_table(ident), name)]
    return out


def targets(cfg: PipelineConfig, component: str | None = None) -> list[dict[str, Any]]:
    """One row per target table: rows, snapshots, files, rows deleted but still in data
    files (what maintenance rewrites: all of them, and the largest share of one data
    file's rows, as maintenance sees it), what maintenance would do now, and how far it
    is applied.

    Raises:
        UnknownComponentError: ``component`` is not an apply of the pipeline.
    """
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for spec in _applies(cfg, component):
        catalog = pyiceberg_catalog(_targets(cfg, spec))
        policy = spec.iceberg.maintenance
        for ns in catalog.list_namespaces():
            for ident in catalog.list_tables(ns):
                name = ".".join(ident)
                table = catalog.load_table(ident)
                snaps = _snapshots(table, name)
                last = snaps[-1] if snaps else {}
                cur = table.metadata.current_snapshot()
                summary = _summary(cur) if cur is not None else {}
                applied = [s for s in snaps if s["positions"]]
                hot = _hottest(table, policy.delete_ratio)
                rows[(spec.name, name)] = {
                    "apply": spec.name, "table": name, "rows": rows_of(summary),
                    "snapshots": len(snaps),
                    "data_files": int(summary.get("total-data-files", 0)),
                    "delete_files": int(summary.get("total-delete-files", 0)),
                    "deleted_rows": int(summary.get("total-position-deletes", 0))
                    + int(summary.get("total-equality-deletes", 0)),
                    "hottest_file": f"{hot:.0%}",
                    "maintenance": _maintenance(table, policy, hot),
                    "last_positions": applied[-1]["positions"] if applied else None,
                    "last_commit": last.get("committed_at")}
    return [rows[k] for k in sorted(rows)]
