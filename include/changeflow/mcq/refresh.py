"""Manual refresh / backfill: every object of a selection into one listener's queue.

The seed loads a new system through the MCQ itself: a script selects every object of
interest and logs an update for each (Figure 5), and the listener's normal code path
does the load. Here one call does that for one listener:

* the selection is a SQL query on a PostgreSQL source, or a Parquet or CSV file of
  keys; its columns are entry keys (``person_id``, ``pkey_string``, ``pkey_number``,
  ``aux_string``, ``rrowid``), and any other column is an error;
* the selection is read and checked completely before anything is written, and the
  entries are written in one transaction: a selection that fails halfway queues
  nothing;
* entries go to the bulk lane by default, so real-time changes keep flowing past a
  large backfill (seed "Bulk Priority Queue");
* it is idempotent: an object that already has a pending entry of this listener for
  the pair is not queued again, so re-running a refresh (after a failure, or twice)
  leaves one pending entry per object.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from changeflow.mcq.log import Change, make_change
from changeflow.mcq.model import BadChangeError, ChangeType, McqError, UnknownTableError
from changeflow.mcq.registry import label, pair, require_listener
from changeflow.state.schema_mcq import interests, queue, tables

if TYPE_CHECKING:
    from changeflow.state import StateStore

log = logging.getLogger(__name__)
Q, N, T = queue, interests, tables
KEYS = ("rrowid", "person_id", "pkey_string", "pkey_number", "aux_string")


@dataclass(frozen=True)
class RefreshResult:
    """What a refresh queued."""

    listener: str
    pair: str
    selected: int
    queued: int
    already_pending: int
    interested: bool


def _key(c: Change) -> tuple[Any, ...]:
    return (c.rrowid, c.person_id, c.pkey_string, c.pkey_number, c.aux_string)


def _checked(rows: Iterable[dict[str, Any]], tname: str, subtype: str, change_type: ChangeType,
             bulk: bool, where: str) -> list[Change]:
    out = []
    for i, row in enumerate(rows, 1):
        extra = set(row) - set(KEYS)
        if extra:
            raise BadChangeError(f"refresh selection {where}: column(s) {sorted(extra)} are not "
                                 f"entry keys (use {', '.join(KEYS)}); nothing was queued")
        try:
            c = make_change(change_type, tname, subtype, bulk=bulk, **row)
        except BadChangeError as exc:
            raise BadChangeError(f"refresh selection {where}, row {i}: {exc}; nothing was "
                                 "queued") from exc
        if not any(v is not None for v in _key(c)):
            raise BadChangeError(f"refresh selection {where}, row {i}: every key is empty; "
                                 "nothing was queued")
        out.append(c)
    return out


def refresh(store: StateStore, listener: str, tname: str, subtype: str | None,
            rows: Iterable[dict[str, Any]], *, bulk: bool = True,
            change_type: str | ChangeType = ChangeType.CHANGE,
            where: str = "(rows)") -> RefreshResult:
    """Queue every row of a selection for one listener, all or nothing, idempotently.

    Raises:
        UnknownListenerError, UnknownTableError: the listener or pair is not registered.
        BadChangeError: a row has an unknown column or a bad key (nothing is queued).
        Exception: whatever reading the selection raised (nothing is queued).
    """
    t, s = pair(tname, subtype)
    changes = _checked(rows, t, s, ChangeType.parse(change_type), bulk, where)
    with store.begin() as conn:
        require_listener(conn, listener)
        if conn.execute(select(T.c.tname).where(T.c.tname == t, T.c.subtype == s)).first() \
                is None:
            raise UnknownTableError(f"refresh: table {label(t, s)!r} is not registered; "
                                    "nothing was queued")
        interested = conn.execute(select(N.c.proc_name).where(
            N.c.proc_name == listener, N.c.tname == t, N.c.subtype.in_([s, "*"]))).first() \
            is not None
        pending = {tuple(r) for r in conn.execute(
            select(*(Q.c[k] for k in KEYS)).where(Q.c.queue_name == listener, Q.c.tname == t,
                                                  Q.c.subtype == s))}
        todo, seen = [], set(pending)
        for c in changes:
            k = _key(c)
            if k in seen:
                continue
            seen.add(k)
            todo.append({**c.params(), "queue_name": listener, "proc_name": listener})
        if todo:
            conn.execute(Q.insert(), todo)
    if not interested:
        log.warning("refresh: listener %s is not interested in %s; its entries were queued "
                    "anyway (a manual refresh)", listener, label(t, s))
    return RefreshResult(listener, label(t, s), len(changes), len(todo),
                         len(changes) - len(todo), interested)


def rows_from_file(path: str) -> Iterator[dict[str, Any]]:
    """The rows of a Parquet or CSV file of keys (CSV: a header line, empty cells are null).

    Raises:
        McqError: the file is missing or not Parquet/CSV.
    """
    p = Path(path)
    if not p.exists():
        raise McqError(f"refresh selection {path}: no such file; nothing was queued")
    if p.suffix.lower() in (".parquet", ".pq") or p.is_dir():
        import pyarrow.parquet as pq

        for batch in pq.ParquetFile(p).iter_batches() if p.is_file() else \
                pq.read_table(p).to_batches():
            yield from batch.to_pylist()
        return
    if p.suffix.lower() != ".csv":
        raise McqError(f"refresh selection {path}: use a .parquet or .csv file")
    with p.open(newline="") as f:
        for row in csv.DictReader(f):
            yield {k: (v if v != "" else None) for k, v in row.items()}


def rows_from_query(source_url: str, query: str,
                    params: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
    """The rows of a SQL query on a PostgreSQL source, read with a server-side cursor."""
    from psycopg.rows import dict_row

    from changeflow.pgconn import connect

    with connect(source_url, application_name="changeflow-mcq-refresh",
                 autocommit=False) as pg, pg.cursor(name="mcq_refresh", row_factory=dict_row) \
            as cur:
        cur.execute(query, params or {})
        yield from cur
