"""What the seed's web tool shows, as functions: for the CLI, the Airflow UI and scripts.

* :func:`listener_rows`: per listener, pending entries (real-time and bulk, held,
  in flight), processed entries, the oldest pending entry, retries, the last mark;
* :func:`table_rows`: the same counts per (table, subtype), and whether it was logged;
* :func:`origin_rows`: the call stack of the first log per (table, subtype), and of the
  first ``get_changes`` per listener;
* :func:`pending_entries`: a listener's pending entries, in the order it gets them;
* :func:`process_rows`: the process monitor's view (last mark, silence, limit);
* :func:`flush`: remove a listener's pending entries, confirmed by repeating its name;
* :func:`purge`: delete processed entries older than a cut-off.

Every function returns plain rows (dicts), JSON-ready apart from datetimes.

>>> from changeflow.mcq.api import MetaChangeQueue
>>> from changeflow.state import StateStore
>>> mcq = MetaChangeQueue(StateStore("sqlite://"))
>>> _ = mcq.add_table("LOGINS"), mcq.add_listener("ADSI"), mcq.add_interest("ADSI", "LOGINS")
>>> mcq.log_update("LOGINS", pkey_string="finkej")
1
>>> [(r["pending"], r["processed"]) for r in listener_rows(mcq.store) if r["listener"] == "ADSI"]
[(1, 0)]
>>> flush(mcq.store, "ADSI", confirm="ADSI")
1
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, case, delete, func, select

from changeflow.mcq.model import McqError, aware, rec_from_row
from changeflow.mcq.registry import label, require_listener
from changeflow.state.schema import utcnow
from changeflow.state.schema_mcq import interests, listeners, process_monitor, queue, tables

if TYPE_CHECKING:
    from changeflow.state import StateStore

Q, L, T, N, P = queue, listeners, tables, interests, process_monitor


def _counts(store: StateStore, now: dt.datetime) -> list[dict[str, Any]]:
    """One pass over the queue: counts per listener, pair, state and lane."""
    done = Q.c.queue_name.is_(None)
    held = and_(Q.c.queue_name.isnot(None), Q.c.hold_until > now)
    stmt = select(
        Q.c.proc_name, Q.c.tname, Q.c.subtype, done.label("done"), Q.c.lane,
        func.count().label("n"), func.min(Q.c.entry_date).label("oldest"),
        func.min(Q.c.entry_number).label("first"), func.max(Q.c.retry_count).label("retries"),
        func.sum(case((and_(held, Q.c.claimed_by.is_(None)), 1), else_=0)).label("held"),
        func.sum(case((and_(held, Q.c.claimed_by.isnot(None)), 1), else_=0)).label("claimed"),
    ).group_by(Q.c.proc_name, Q.c.tname, Q.c.subtype, done, Q.c.lane)
    with store.read() as conn:
        return [dict(r._mapping) for r in conn.execute(stmt)]


def _blank() -> dict[str, Any]:
    return {"pending": 0, "bulk": 0, "held": 0, "in_flight": 0, "processed": 0,
            "oldest_pending": None, "next_entry": None, "max_retries": 0}


def _add(acc: dict[str, Any], r: dict[str, Any]) -> None:
    if r["done"]:
        acc["processed"] += r["n"]
        return
    acc["pending"] += r["n"]
    if r["lane"]:
        acc["bulk"] += r["n"]
    acc["held"] += int(r["held"] or 0)
    acc["in_flight"] += int(r["claimed"] or 0)
    oldest = aware(r["oldest"])
    if oldest is not None and (acc["oldest_pending"] is None or oldest < acc["oldest_pending"]):
        acc["oldest_pending"] = oldest
    if acc["next_entry"] is None or r["first"] < acc["next_entry"]:
        acc["next_entry"] = r["first"]
    acc["max_retries"] = max(acc["max_retries"], int(r["retries"] or 0))


def listener_rows(store: StateStore, now: dt.datetime | None = None) -> list[dict[str, Any]]:
    """One row per registered listener (and per unregistered one that still has entries)."""
    now = now or utcnow()
    acc: dict[str, dict[str, Any]] = defaultdict(_blank)
    for r in _counts(store, now):
        _add(acc[r["proc_name"]], r)
    with store.read() as conn:
        regs = {r.proc_name: r for r in conn.execute(select(L))}
        per = select(N.c.proc_name, func.count()).group_by(N.c.proc_name)
        n_int: dict[str, int] = dict(conn.execute(per).tuples().all())
        marks = {r.proc: r for r in conn.execute(select(P))}
    out = []
    for name in sorted(set(regs) | set(acc)):
        reg, mark = regs.get(name), marks.get(name)
        out.append({"listener": name, **acc[name], "registered": reg is not None,
                    "frequency": reg.frequency if reg else None,
                    "owner": reg.owner if reg else None, "interests": n_int.get(name, 0),
                    "last_mark": aware(mark.last_mark) if mark else None,
                    "comments": reg.comments if reg else None})
    return out


def table_rows(store: StateStore, now: dt.datetime | None = None) -> list[dict[str, Any]]:
    """One row per registered (table, subtype), and per unregistered one with entries."""
    now = now or utcnow()
    acc: dict[tuple[str, str], dict[str, Any]] = defaultdict(_blank)
    for r in _counts(store, now):
        _add(acc[(r["tname"], r["subtype"])], r)
    with store.read() as conn:
        regs = {(r.tname, r.subtype): r for r in conn.execute(select(T))}
        listeners_of: dict[tuple[str, str], list[str]] = defaultdict(list)
        for i in conn.execute(select(N).order_by(N.c.proc_name)):
            listeners_of[(i.tname, i.subtype)].append(i.proc_name)
    out = []
    for key in sorted(set(regs) | set(acc)):
        reg = regs.get(key)
        who = listeners_of.get(key, []) + [f"{x}(*)" for x in listeners_of.get((key[0], "*"), [])]
        out.append({"table": label(*key), "tname": key[0], "subtype": key[1] or None,
                    **acc[key], "registered": reg is not None, "listeners": ", ".join(who),
                    "first_logged": aware(reg.stack_date) if reg else None,
                    "comments": reg.comments if reg else None})
    return out


def origin_rows(store: StateStore) -> list[dict[str, Any]]:
    """The recorded call stacks: per (table, subtype) its first log, per listener its first
    ``get_changes`` (empty until it happens; cleared ``stack_date`` records it again)."""
    with store.read() as conn:
        out = [{"kind": "table", "name": label(r.tname, r.subtype),
                "stack_date": aware(r.stack_date), "call_stack": r.call_stack}
               for r in conn.execute(select(T).order_by(T.c.tname, T.c.subtype))]
        out += [{"kind": "listener", "name": r.proc_name, "stack_date": aware(r.stack_date),
                 "call_stack": r.call_stack}
                for r in conn.execute(select(L).order_by(L.c.proc_name))]
    return out


def process_rows(store: StateStore, now: dt.datetime | None = None) -> list[dict[str, Any]]:
    """Every process the monitor watches: last mark, marks, silence so far, its limit,
    whether it is late and whether an alert went out."""
    from changeflow.mcq.monitor import status

    return status(store, now)


def pending_entries(store: StateStore, listener: str, limit: int = 50) -> list[dict[str, Any]]:
    """A listener's pending entries in the order ``get_changes`` hands them out."""
    with store.read() as conn:
        require_listener(conn, listener)
        rows = conn.execute(select(Q).where(Q.c.queue_name == listener)
                            .order_by(Q.c.lane, Q.c.entry_number).limit(limit)).all()
    return [rec_from_row(r._mapping).as_dict() for r in rows]


def flush(store: StateStore, listener: str, *, confirm: str | None) -> int:
    """Remove every pending entry of a listener; ``confirm`` must repeat its name.

    Returns:
        how many entries were removed.

    Raises:
        McqError: the confirmation does not match (nothing removed).
        UnknownListenerError: no such listener.
    """
    if confirm != listener:
        raise McqError(f"flush of {listener!r}: confirm by repeating the listener's name "
                       f"(got {confirm!r}); nothing was removed")
    with store.begin() as conn:
        require_listener(conn, listener)
        return int(conn.execute(delete(Q).where(Q.c.queue_name == listener)).rowcount or 0)


def purge(store: StateStore, older_than: float, *, batch: int = 50_000) -> int:
    """Delete processed entries whose ``proc_date`` is older than ``older_than`` seconds.

    Works in batches of ``batch`` rows, each its own transaction, so a large purge
    never holds the store's write lock for long.
    """
    if older_than < 0:
        raise McqError(f"purge: older_than {older_than} is negative")
    cutoff = utcnow() - dt.timedelta(seconds=older_than)
    total = 0
    while True:
        ids = select(Q.c.entry_number).where(Q.c.queue_name.is_(None),
                                             Q.c.proc_date < cutoff).limit(batch)
        with store.begin() as conn:
            n = int(conn.execute(delete(Q).where(Q.c.entry_number.in_(ids.scalar_subquery())))
                    .rowcount or 0)
        total += n
        if n < batch:
            return total
