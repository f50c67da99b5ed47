"""One apply pass's write to one target table: staged, checked, published, recognised.

Iceberg's write-audit-publish, with the pass's identity on every snapshot it writes:

1. :func:`find_pass`: if an earlier attempt of the same pass published to the table
   already (it crashed before the apply's positions committed), the table's history
   says so: its snapshots carry the summary property ``changeflow.pass-id``. The pass
   then reads the table as it was before that snapshot, finds the same changes, and
   does not write them again;
2. :func:`stage`: a branch ``cf_<pass>_<nonce>`` is created at the snapshot the pass
   read, and the pass's final image per changed key is merged into it with one
   ``MERGE INTO`` (merge-on-read: new rows, and delete files for the replaced ones);
   a TRUNCATE first empties the branch;
3. the data-quality check reads the branch (:mod:`changeflow.quality.target`);
4. :func:`publish`: ``main`` is fast-forwarded to the branch, and the branch dropped,
   in one catalog commit: the one that makes the changes visible. It fails, and nothing
   is published, when another writer moved ``main`` since the pass read it (Iceberg's
   optimistic concurrency): the pass is retried. A failed check keeps the branch as
   ``quarantine_<pass>_<nonce>`` for the operator instead (:func:`quarantine`).

The apply's positions commit in its state store after every table is published; a
crash in between is what step 1 recognises.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from changeflow.errors import TargetError, TransientError
from changeflow.jvm import java_dict, java_each
from changeflow.targets import rowdelta
from changeflow.targets.catalog import META, IcebergTargets, TargetTable, rows_of
from changeflow.targets.tables import create_branch, drop_branch, q

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)
PASS_ID = "changeflow.pass-id"
PREFIX = rowdelta.PROPERTY_PREFIX
#: how far back a table's history is searched for a pass (its own crashed attempt)
SEARCH_DEPTH = 200
_props_lock = threading.Lock()
#: the summary properties :func:`snapshot_properties` set (its lock is held meanwhile)
_active: dict[str, str] = {}


class TargetConflictError(TransientError):
    """Another writer committed to a target table since the pass read it."""


@dataclass
class Staged:
    """A table's staged write: the branch and the snapshot the pass wrote there."""

    table: TargetTable
    branch: str
    snapshot: int | None = None
    summary: dict[str, str] = field(default_factory=dict)
    rows_before: int = 0
    changed: int = 0
    scratch: str | None = None  # the branch the images were appended to, if any

    @property
    def rows_after(self) -> int:
        """Live rows on the branch (the table once published)."""
        return rows_of(self.summary)


def find_pass(jtable: Any, pass_id: str) -> tuple[int, int | None] | None:
    """Whether ``main`` holds snapshots of this pass: (its first one, that one's parent).

    Args:
        jtable: Iceberg's Java ``Table``.
    """
    snap = jtable.currentSnapshot()
    first: tuple[int, int | None] | None = None
    for _ in range(SEARCH_DEPTH):
        if snap is None:
            break
        summary = snap.summary()
        if summary.get(PASS_ID) == pass_id:
            first = (snap.snapshotId(), snap.parentId())
        elif first is not None:
            break
        parent = snap.parentId()
        snap = None if parent is None else jtable.snapshot(parent)
    return first


@contextlib.contextmanager
def snapshot_properties(spark: SparkSession, props: dict[str, str]) -> Iterator[None]:
    """Summary properties on every snapshot the session's SQL writes inside the block."""
    with _props_lock:
        for k, v in props.items():
            spark.conf.set(PREFIX + k, v)
        _active.update(props)
        try:
            yield
        finally:
            _active.clear()
            for k in props:
                spark.conf.unset(PREFIX + k)


def stage(spark: SparkSession, targets: IcebergTargets, table: TargetTable, pass_id: str,
          images: DataFrame, *, partial: bool, truncate: bool,
          located: pa.Table | None = None) -> Staged:
    """Write a pass's final images to a new branch at the snapshot the pass read.

    With ``located`` (the pass's lookup found where the changed keys' rows are), whole
    images of a format-version 2 table are appended and the located rows deleted by
    position (:mod:`.rowdelta`: no scan of the table); into a table with no snapshot
    yet (no rows), the written images are appended; otherwise one ``MERGE INTO``.

    Args:
        images: one row per changed key: the key and data columns, the bookkeeping
            columns, ``_cf_op`` (``D``: delete the row; ``W``: write it) and, when
            ``partial``, ``_cf_absent`` (columns the image lacks: the row keeps them).
        truncate: empty the branch first (a TRUNCATE in the pass).
        located: per current row of a changed key at ``table.snapshot`` (Arrow): the
            key columns and :data:`.rowdelta.LOCATION`.
    """
    branch = f"cf_{pass_id}_{uuid.uuid4().hex[:6]}"
    jt = targets.java_table(spark, table.name)
    if jt is None:
        raise TargetError(f"target table {table.name} was dropped outside changeflow while "
                          "the apply wrote to it; nothing was published")
    changed: int | None = None
    appended = False
    scratch = None
    if located is not None and table.snapshot is not None and rowdelta.usable(
            jt, partial=partial, truncate=truncate):
        changed = rowdelta.write(spark, targets, table, branch, images, located,
                                 dict(_active), jt)
        scratch = rowdelta.scratch_of(branch)
    else:
        create_branch(spark, targets, table.name, branch, table.snapshot)
        appended = _merge(spark, targets.ident(table.name, branch=branch), table, images,
                          partial=partial, truncate=truncate)
    staged = Staged(table, branch, scratch=scratch)
    jt = targets.java_table(spark, table.name)
    assert jt is not None
    ref = jt.refs().get(branch)
    staged.snapshot = ref.snapshotId()
    staged.summary = java_dict(jt.snapshot(staged.snapshot).summary())
    if staged.summary.get(PASS_ID) == pass_id:
        if changed is None:
            changed = int(staged.summary.get("added-records", 0)) if appended \
                else changed_rows(staged.summary)
        staged.changed = changed
    if table.snapshot is not None and not truncate:  # a TRUNCATE starts from nothing
        staged.rows_before = rows_of(java_dict(jt.snapshot(table.snapshot).summary()))
    return staged


def _merge(spark: SparkSession, target: str, table: TargetTable, images: DataFrame, *,
           partial: bool, truncate: bool) -> bool:
    """Write the images to the branch ``target`` names with one ``MERGE INTO`` (after a
    TRUNCATE's delete of every row), or as an append into a table without rows yet;
    returns whether it was an append."""
    if table.snapshot is None and not truncate:
        # A table without rows yet: every written image is an insert. An append writes
        # them (a MERGE INTO would plan a join with nothing); rows as MERGE INTO counts.
        from pyspark.sql import functions as F

        images.where(F.col("_cf_op") != "D").select(*table.column_names, *META) \
            .writeTo(target).append()
        return True
    if truncate:
        spark.sql(f"DELETE FROM {target} WHERE true")
    view = f"cf_images_{uuid.uuid4().hex[:12]}"
    images.createOrReplaceTempView(view)
    try:
        spark.sql(merge_sql(target, view, table, partial=partial))
    finally:
        spark.catalog.dropTempView(view)
    return False


def changed_rows(summary: dict[str, str]) -> int:
    """Rows a ``MERGE INTO`` inserted, updated and deleted, from its snapshot's summary."""
    return sum(int(summary.get(f"spark.merge-into.num-target-rows-{k}", 0))
               for k in ("inserted", "updated", "deleted"))


def merge_sql(target: str, view: str, table: TargetTable, *, partial: bool) -> str:
    """The ``MERGE INTO`` of a pass's final images (see :func:`stage`)."""
    on = " AND ".join(f"t.{q(k)} = s.{q(k)}" for k in table.key_columns)
    data = [c for c in table.column_names if c not in table.key_columns]
    sets = []
    for c in data:
        if partial:
            sets.append(f"{q(c)} = CASE WHEN array_contains(s._cf_absent, '{c}') "
                        f"THEN t.{q(c)} ELSE s.{q(c)} END")
        else:
            sets.append(f"{q(c)} = s.{q(c)}")
    sets += [f"{q(m)} = s.{q(m)}" for m in META]
    cols = [*table.column_names, *META]
    return (f"MERGE INTO {target} t USING {view} s ON {on} "
            "WHEN MATCHED AND s._cf_op = 'D' THEN DELETE "
            f"WHEN MATCHED THEN UPDATE SET {', '.join(sets)} "
            f"WHEN NOT MATCHED AND s._cf_op <> 'D' THEN INSERT ({', '.join(map(q, cols))}) "
            f"VALUES ({', '.join('s.' + q(c) for c in cols)})")


def publish(spark: SparkSession, targets: IcebergTargets, staged: Staged, *,
            tries: int = 4) -> None:
    """Fast-forward ``main`` to the staged branch and drop the branch (and its scratch
    branch), in one catalog commit.

    A catalog that cannot be reached is tried again (``tries`` times, backing off).

    Raises:
        TargetConflictError: ``main`` moved since the pass read it (transient: the pass
            is retried and reads the table again); nothing was published.
        TargetError: the table was dropped behind the apply's back.
    """
    name = staged.table.name
    dropped = TargetError(f"target table {name} was dropped outside changeflow while the "
                          "apply wrote to it; nothing was published")
    for attempt in range(tries):
        try:
            jt = targets.java_table(spark, name)
            if jt is None:
                raise dropped
            refs = jt.manageSnapshots().fastForwardBranch("main", staged.branch) \
                .removeBranch(staged.branch)
            if staged.scratch is not None and jt.refs().containsKey(staged.scratch):
                refs = refs.removeBranch(staged.scratch)
            refs.commit()
            return
        except TargetError:
            raise
        except Exception as exc:  # noqa: BLE001  (classified below)
            text = str(exc)
            if "not an ancestor" in text:
                raise TargetConflictError(
                    f"target table {name}: another writer committed to it since this pass "
                    f"read snapshot {staged.table.snapshot}; nothing was published, the "
                    "pass will read the table again") from exc
            if "NoSuchTable" in text or "Cannot find table" in text:
                raise dropped from exc
            if attempt == tries - 1:
                raise
            log.warning("publishing %s failed (%s); trying again", name, text.splitlines()[0])
            time.sleep(0.5 * 2 ** attempt)


def quarantine(spark: SparkSession, targets: IcebergTargets, staged: Staged) -> str:
    """Keep a staged write that failed its checks as a branch ``quarantine_...`` (readable
    as ``<table>.branch_quarantine_...``); returns the branch's name.

    Raises:
        TargetError: the write is not on a staging branch (nothing to set aside).
    """
    if not staged.branch.startswith("cf_"):
        raise TargetError(f"target table {staged.table.name}: {staged.branch!r} is not a "
                          "staging branch")
    name = staged.branch.replace("cf_", "quarantine_", 1)
    create_branch(spark, targets, staged.table.name, name, staged.snapshot)
    drop_branch(spark, targets, staged.table.name, staged.branch)
    if staged.scratch is not None:
        drop_branch(spark, targets, staged.table.name, staged.scratch)
    return name


def drop_stale_branches(spark: SparkSession, targets: IcebergTargets, table: str,
                        prefix: str = "cf_") -> int:
    """Drop staging branches left by attempts that crashed (not quarantined ones)."""
    jt = targets.java_table(spark, table)
    if jt is None:
        return 0
    stale = [b for b in java_each(jt.refs().keySet()) if str(b).startswith(prefix)]
    for b in stale:
        drop_branch(spark, targets, table, str(b))
    return len(stale)


def read_branch(spark: SparkSession, targets: IcebergTargets, staged: Staged) -> DataFrame:
    """The staged rows (as ``main`` will hold them once published)."""
    return spark.table(targets.ident(staged.table.name, branch=staged.branch))


__all__ = ["META", "PASS_ID", "Staged", "TargetConflictError", "drop_branch",
           "drop_stale_branches", "find_pass", "merge_sql", "publish", "quarantine", "read_branch",
           "snapshot_properties", "stage"]
