"""Moving a source database's change log into the MCQ (outbox-mode triggers).

A trigger in *outbox* mode (:mod:`changeflow.mcq.triggers`) appends each log call to
``changeflow_mcq.changeflow_mcq_log`` in the source database. The pump moves those rows
into the MCQ store, where each becomes one entry per interested listener, and then
deletes them from the source. The store and the source are two databases, so the move
is made exactly-once by a record of what was moved:

1. the entries and a ``meta_change_pump`` row per moved log row (source, log_id)
   commit in one MCQ transaction;
2. the moved rows are deleted from the source's log;
3. their ``meta_change_pump`` rows are deleted.

A pump that dies after 1 finishes 2 and 3 at its next start, before moving anything,
so nothing is moved twice; one that dies before 1 moved nothing. Rows are taken in
``log_id`` order and removed once moved, so a transaction that commits late (with a
lower ``log_id``) is picked up by the next pass instead of being skipped. One pump
runs per source at a time (a lease, ``mcq-pump:<source>``).

Unknown pairs follow the MCQ's strictness: strict stops the pump with an error and
leaves the rows in the source's log (nothing lost; register the pair and pump
again); otherwise they are dropped with a warning.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, select

from changeflow.mcq.log import Change, Logger
from changeflow.mcq.model import ChangeType
from changeflow.mcq.triggers import OUTBOX_SCHEMA
from changeflow.state.leases import Lease
from changeflow.state.schema import utcnow
from changeflow.state.schema_mcq import pump as P
from changeflow.state.schema_mcq import tables as T

if TYPE_CHECKING:
    import psycopg

    from changeflow.state import StateStore

log = logging.getLogger(__name__)
_COLS = ("log_id", "tname", "subtype", "rrowid", "change_type", "person_id", "pkey_string",
         "pkey_number", "aux_string", "entry_date", "origin")


@dataclass
class PumpResult:
    """What one pump run did."""

    source: str
    moved: int = 0
    entries: int = 0
    dropped: int = 0
    recovered: int = 0
    passes: int = 0


def _finish(store: StateStore, pg: psycopg.Connection[Any], source: str, table: Any) -> int:
    """Steps 2 and 3 for whatever step 1 committed."""
    with store.read() as conn:
        ids = list(conn.execute(select(P.c.log_id).where(P.c.source == source)).scalars())
    if not ids:
        return 0
    pg.execute(_sql("DELETE FROM {} WHERE log_id = ANY(%s)", table), (ids,))
    pg.commit()
    with store.begin() as conn:
        conn.execute(delete(P).where(P.c.source == source, P.c.log_id.in_(ids)))
    return len(ids)


def _sql(template: str, table: Any) -> Any:
    from psycopg import sql

    return sql.SQL(template).format(table)


def _move(store: StateStore, logger: Logger, source: str, rows: list[tuple[Any, ...]],
          lease: Lease, result: PumpResult) -> None:
    now = utcnow()
    with store.begin() as conn:
        lease.check(conn)
        for r in rows:
            m = dict(zip(_COLS, r, strict=True))
            c = Change(m["tname"], m["subtype"] or "", ChangeType.parse(m["change_type"]),
                       m["rrowid"], m["person_id"], m["pkey_string"], m["pkey_number"],
                       m["aux_string"], entry_date=m["entry_date"],
                       origin=f"{m['origin']} in source {source} (moved by the pump)")
            made = logger.write(conn, c)
            result.entries += made
            result.dropped += 0 if made or _known(conn, c) else 1
            conn.execute(P.insert().values(source=source, log_id=m["log_id"], moved_at=now))
        result.moved += len(rows)


def _known(conn: Any, c: Change) -> bool:
    return conn.execute(select(T.c.tname).where(T.c.tname == c.tname,
                                                T.c.subtype == c.subtype)).first() is not None


def pump(store: StateStore, source: str, source_url: str, *, strict: bool = True,
         batch: int = 1000, max_seconds: float | None = None, follow: bool = False,
         poll: float = 1.0, outbox_schema: str = OUTBOX_SCHEMA) -> PumpResult:
    """Move a source's change log into the MCQ until it is empty (or for ``max_seconds``;
    with ``follow``, keep polling every ``poll`` seconds until then).

    Raises:
        UnknownTableError: strict, and a logged pair is not registered (the rows stay).
        LeaseHeldError: another pump of this source is running.
    """
    from psycopg import sql

    from changeflow.pgconn import connect

    result = PumpResult(source)
    logger = Logger(store, strict=strict, cache_seconds=0)
    table = sql.Identifier(outbox_schema, "changeflow_mcq_log")
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    with Lease(store, f"mcq-pump:{source}", wait=5.0) as lease, \
            connect(source_url, application_name="changeflow-mcq-pump",
                    autocommit=False) as pg:
        result.recovered = _finish(store, pg, source, table)
        while True:
            rows = pg.execute(_sql("SELECT " + ", ".join(_COLS) + " FROM {} ORDER BY log_id "
                                   "LIMIT %s", table), (batch,)).fetchall()
            pg.commit()
            if rows:
                _move(store, logger, source, rows, lease, result)
                _finish(store, pg, source, table)
                result.passes += 1
                continue
            if not follow or (deadline is not None and time.monotonic() >= deadline):
                break
            time.sleep(poll)
            if deadline is not None and time.monotonic() >= deadline:
                break
    if result.moved:
        log.info("mcq pump %s: moved %d log rows into %d entries (%d dropped)", source,
                 result.moved, result.entries, result.dropped)
    return result
