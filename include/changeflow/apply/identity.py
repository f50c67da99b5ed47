"""A pass's identity, and what it finds of itself in a table's history.

The same batches give the same pass again after a crash: its id hashes the apply, the
queue's batch range and the first transaction of the pass's segment (for a
re-execution, the error-queue entries and their attempt numbers: each attempt is a
pass of its own). Every snapshot the pass writes carries the id
(:data:`changeflow.targets.commit.PASS_ID`) with what the pass applied, so a re-run
after a crash between a table's publish and the apply's state commit recognises the
table as written (:func:`base`).

>>> len(pass_id("ap", [], [], None))
16
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from changeflow.errors import TargetError
from changeflow.jvm import java_dict
from changeflow.targets import commit as tcommit

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from changeflow.apply.errorq import ErrorEntry
    from changeflow.apply.positions import TxnId
    from changeflow.apply.survey import TxnInfo
    from changeflow.queues.catalog import Batch
    from changeflow.targets.catalog import IcebergTargets, TargetTable

log = logging.getLogger(__name__)


def pass_id(apply: str, batches: list[Batch], segment: list[TxnInfo],
            reexec: dict[str, ErrorEntry] | None) -> str:
    """The identity of a pass (16 hex digits)."""
    parts = [apply]
    if batches:
        parts.append(f"{batches[0].queue}:{batches[0].seq}-{batches[-1].seq}")
    if segment:
        parts.append(segment[0].id.key)
    if reexec is not None:  # each attempt at an entry is a pass of its own
        parts.append("reexec:" + ",".join(f"{e.id}.{e.attempts}" for e in reexec.values()))
    return hashlib.sha1("\x1f".join(parts).encode()).hexdigest()[:16]


def snapshot_props(apply: str, pid: str, batches: list[Batch],
                   txns: list[TxnId]) -> dict[str, str]:
    """Summary properties of every snapshot a pass writes: the pass, the apply, the queue
    and batch range, and the newest commit position per source database applied."""
    props = {tcommit.PASS_ID: pid, "changeflow.apply": apply}
    if batches:
        props["changeflow.batches"] = f"{batches[0].seq}-{batches[-1].seq}"
        props["changeflow.queue"] = batches[0].queue
    if txns:
        top: dict[str, int] = {}
        for t in txns:
            top[t.source] = max(top.get(t.source, t.scn), t.scn)
        props["changeflow.positions"] = ",".join(f"{k}={v}" for k, v in sorted(top.items()))
    return props


def base(spark: SparkSession, targets: IcebergTargets, header: TargetTable,
         pid: str) -> tuple[TargetTable, dict[str, str] | None]:
    """The snapshot a pass reads a table at: the current one, or, when an earlier attempt
    of this pass published to the table already, the one before it (the pass then finds
    what it found then, and does not write again).

    Returns:
        The header at that snapshot, and the published snapshot's summary (or None).

    Raises:
        TargetError: the table was dropped outside changeflow (the apply published to
            it before).
    """
    if not header.exists:
        known = targets.last_published(header.name)
        if known is not None and targets.dropped(header.name) is None:
            raise TargetError(
                f"target table {header.name} was dropped outside changeflow (the apply "
                f"last published snapshot {known['version']} of it at "
                f"{known['updated_at']}); run `changeflow targets forget {header.name}` "
                "to let the apply create it again, then re-execute its errors")
        return header, None
    jt: Any = targets.java_table(spark, header.name)
    found = tcommit.find_pass(jt, pid) if jt is not None else None
    if found is None:
        return header, None
    first, parent = found
    summary = java_dict(jt.currentSnapshot().summary())
    log.info("table %s holds pass %s already (snapshot %s): not written again",
             header.name, pid, first)
    return replace(header, snapshot=parent), summary
