"""The apply error queue: failed transactions, kept whole and durably.

When an apply cannot apply a source transaction (an unresolved conflict, a handler
that raised, a constraint of a PostgreSQL target, a DDL it cannot apply, an unknown
command type), the transaction goes here *whole*: every LCR of it is written to a
Parquet file (the LCR contract) under ``<staging root>/_apply_errors/<apply>/``, and
one row of ``cf_apply_error_queue`` records its source database, transaction id,
commit position, the failing LCR and its position, the error and when. The file is
not part of any queue batch, so purging the batches it came in loses nothing.

A user message its message handler failed on is its own entry (``msg:<id>``): in a
queue, each user message is its own transaction.

Entries are listed, shown, re-executed (:mod:`changeflow.apply.reexec`) and deleted
from Python, the CLI (``changeflow apply errors ...``) and the Airflow UI.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, select, update
from sqlalchemy.engine import Connection

from changeflow import fs
from changeflow.errors import TerminalError
from changeflow.state import StateStore, utcnow
from changeflow.state.schema_apply import error_queue

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)
E = error_queue
#: Error kinds, for listings and filters.
KINDS = ("conflict", "handler", "ddl", "command_type", "target", "table", "message", "legacy")


class ErrorNotFoundError(TerminalError):
    """An error-queue id that does not exist (for that apply)."""


@dataclass
class FailedTxn:
    """A transaction (or user message) on its way to the error queue."""

    txn_key: str
    error_kind: str
    error_message: str
    source_database: str | None = None
    transaction_id: str | None = None
    commit_scn: int | None = None
    commit_time: dt.datetime | None = None
    failing_msg_id: str | None = None
    failing_position: int | None = None
    tables: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ErrorEntry:
    """One entry of the error queue."""

    id: int
    apply: str
    txn_key: str
    source_database: str | None
    transaction_id: str | None
    commit_scn: int | None
    commit_time: dt.datetime | None
    failing_msg_id: str | None
    failing_position: int | None
    error_kind: str
    error_message: str
    n_messages: int
    tables: list[str]
    lcr_path: str | None
    attempts: int
    created_at: dt.datetime
    updated_at: dt.datetime

    def to_dict(self) -> dict[str, Any]:
        """A plain dict (for JSON output and the UI)."""
        return dict(self.__dict__)


def _entry(row: Any) -> ErrorEntry:
    m = row._mapping
    return ErrorEntry(
        id=int(m["id"]), apply=m["apply"], txn_key=m["txn_key"],
        source_database=m["source_database"], transaction_id=m["transaction_id"],
        commit_scn=m["commit_scn"], commit_time=m["commit_time"],
        failing_msg_id=m["failing_msg_id"], failing_position=m["failing_position"],
        error_kind=m["error_kind"], error_message=m["error_message"],
        n_messages=int(m["n_messages"] or 0), tables=json.loads(m["tables"] or "[]"),
        lcr_path=m["lcr_path"], attempts=int(m["attempts"] or 1), created_at=m["created_at"],
        updated_at=m["updated_at"])


def lcr_file(staging_root: str, apply: str) -> str:
    """A fresh path for one failed transaction's LCR file."""
    return fs.join(staging_root, "_apply_errors", apply, f"txn-{uuid.uuid4().hex}.parquet")


def write_lcrs(path: str, table: pa.Table) -> None:
    """Write a transaction's LCRs (the LCR contract, in position order) to ``path``."""
    import pyarrow.parquet as pq

    from changeflow.queues.arrow_io import _filesystem, conform_arrow

    table = conform_arrow(table, origin=path)
    filesystem, inner = _filesystem(path)
    filesystem.create_dir(inner.rsplit("/", 1)[0], recursive=True)
    pq.write_table(table, inner, filesystem=filesystem, compression="snappy")


def read_lcrs(entry: ErrorEntry) -> pa.Table:
    """Every LCR of an entry's transaction, in position order.

    Raises:
        TerminalError: the entry predates whole-transaction records, or its file is gone.
    """
    import pyarrow.parquet as pq

    from changeflow.queues.arrow_io import _filesystem, conform_arrow

    if entry.lcr_path is None:
        raise TerminalError(
            f"apply {entry.apply} error {entry.id}: recorded before the error queue kept "
            "whole transactions; its LCRs were never kept (delete it)")
    filesystem, inner = _filesystem(entry.lcr_path)
    try:
        table = pq.read_table(inner, filesystem=filesystem)
    except (OSError, FileNotFoundError) as exc:
        raise TerminalError(
            f"apply {entry.apply} error {entry.id}: its LCR file {entry.lcr_path} cannot be "
            f"read: {exc}") from exc
    return conform_arrow(table, origin=entry.lcr_path).sort_by(
        [("commit_scn", "ascending"), ("position", "ascending")])


def delete_file(path: str | None) -> None:
    """Remove an LCR file (missing is fine)."""
    if not path:
        return
    from changeflow.queues.arrow_io import _filesystem

    filesystem, inner = _filesystem(path)
    try:
        filesystem.delete_file(inner)
    except (OSError, FileNotFoundError):
        log.debug("error LCR file %s already gone", path)


def record(conn: Connection, apply: str, failed: FailedTxn, lcr_path: str | None,
           n_messages: int) -> tuple[int, str | None]:
    """Insert an entry, or update the one the same transaction already has.

    Returns:
        The entry id and the LCR file it replaced (to delete after the commit), if any.
    """
    now = utcnow()
    values = {
        "source_database": failed.source_database, "transaction_id": failed.transaction_id,
        "commit_scn": failed.commit_scn, "commit_time": failed.commit_time,
        "failing_msg_id": failed.failing_msg_id, "failing_position": failed.failing_position,
        "error_kind": failed.error_kind, "error_message": failed.error_message[:20000],
        "n_messages": n_messages, "tables": json.dumps(sorted(set(failed.tables))),
        "lcr_path": lcr_path, "updated_at": now,
    }
    found = conn.execute(select(E.c.id, E.c.attempts, E.c.lcr_path).where(
        E.c.apply == apply, E.c.txn_key == failed.txn_key)).first()
    if found is None:
        res = conn.execute(E.insert().values(apply=apply, txn_key=failed.txn_key, attempts=1,
                                             created_at=now, **values))
        key = res.inserted_primary_key
        assert key is not None
        return int(key[0]), None
    conn.execute(update(E).where(E.c.id == found[0]).values(attempts=int(found[1]) + 1,
                                                            **values))
    old = found[2] if found[2] != lcr_path else None
    return int(found[0]), old


def note_failure(conn: Connection, entry: ErrorEntry, kind: str, message: str) -> None:
    """A re-execution failed again: the entry keeps its LCRs and gets the new error."""
    conn.execute(update(E).where(E.c.id == entry.id).values(
        error_kind=kind, error_message=message[:20000], attempts=entry.attempts + 1,
        updated_at=utcnow()))


def remove(conn: Connection, ids: list[int]) -> None:
    """Remove entries (their files are deleted by the caller after the commit)."""
    if ids:
        conn.execute(delete(E).where(E.c.id.in_(ids)))


def entries(store: StateStore, apply: str | None = None, *, ids: list[int] | None = None,
            ) -> list[ErrorEntry]:
    """Error-queue entries, in commit order (oldest source commit first)."""
    stmt = select(E)
    if apply is not None:
        stmt = stmt.where(E.c.apply == apply)
    if ids is not None:
        stmt = stmt.where(E.c.id.in_(ids))
    stmt = stmt.order_by(E.c.commit_scn.is_(None), E.c.commit_scn, E.c.source_database,
                         E.c.id)
    with store.read() as conn:
        return [_entry(r) for r in conn.execute(stmt)]


def get(store: StateStore, apply: str, entry_id: int) -> ErrorEntry:
    """One entry of an apply's error queue.

    Raises:
        ErrorNotFoundError: no such id for that apply.
    """
    found = entries(store, apply, ids=[entry_id])
    if not found:
        raise ErrorNotFoundError(
            f"apply {apply} has no error {entry_id} in its error queue "
            f"(`changeflow apply errors list --apply {apply}` lists them)")
    return found[0]


def keys(store: StateStore, apply: str) -> dict[str, int]:
    """``txn_key -> id`` of an apply's entries (to notice a transaction that applies now)."""
    with store.read() as conn:
        return {r[0]: int(r[1]) for r in conn.execute(
            select(E.c.txn_key, E.c.id).where(E.c.apply == apply))}


def delete_entries(store: StateStore, apply: str, ids: list[int] | None = None) -> int:
    """Delete entries (all of the apply's when ``ids`` is None) and their LCR files.

    The transactions stay counted as done, so a replay of them is still skipped.

    Raises:
        ErrorNotFoundError: an id is not in the apply's error queue (nothing deleted).
    """
    found = entries(store, apply, ids=ids)
    if ids is not None:
        missing = sorted(set(ids) - {e.id for e in found})
        if missing:
            raise ErrorNotFoundError(
                f"apply {apply} has no error {missing[0]} in its error queue; nothing deleted")
    with store.begin() as conn:
        remove(conn, [e.id for e in found])
    for e in found:
        delete_file(e.lcr_path)
    return len(found)
