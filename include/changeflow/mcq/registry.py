"""Registering tables and subtypes, listeners and interests (seed Tables 3, 4 and 6).

Every function takes the state store holding the MCQ and changes it in one
transaction. Adding something that exists updates its descriptive fields (the
recorded call stack is kept); dropping something still in use is refused unless
``force`` is given, and says what uses it.

>>> from changeflow.state import StateStore
>>> store = StateStore("sqlite://")
>>> add_table(store, "person", "Telephone", comments="phone numbers")
'PERSON/Telephone'
>>> add_listener(store, "LDAP", frequency=5)
'LDAP'
>>> add_interest(store, "LDAP", "PERSON", "Telephone")
'LDAP -> PERSON/Telephone'
>>> [r["proc_name"] for r in list_interests(store)]
['LDAP']
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, delete, func, select, update
from sqlalchemy.engine import Connection

from changeflow.mcq.config import McqConfig, check_name, seconds
from changeflow.mcq.model import (
    REDELIVER,
    McqError,
    UnknownListenerError,
    UnknownTableError,
    redelivery,
)
from changeflow.state.schema import utcnow
from changeflow.state.schema_mcq import interests, listeners, queue, tables

if TYPE_CHECKING:
    from changeflow.state import StateStore

T, L, N, Q = tables, listeners, interests, queue


def pair(tname: str, subtype: str | None) -> tuple[str, str]:
    """A (table, subtype) pair as stored: table upper-case, no subtype as ``''``.

    >>> pair("person", None), pair("PERSON", "Telephone")
    (('PERSON', ''), ('PERSON', 'Telephone'))
    """
    try:
        t = check_name("table", tname).upper()
        s = check_name("subtype", subtype) if subtype else ""
    except ValueError as exc:
        raise UnknownTableError(str(exc)) from exc
    return t, s


def label(tname: str, subtype: str) -> str:
    """``PERSON/Telephone``, or ``LOGINS`` for a table without subtypes."""
    return f"{tname}/{subtype}" if subtype else tname


def _upsert(conn: Connection, table: Any, key: dict[str, Any], values: dict[str, Any],
            insert_only: dict[str, Any] | None = None) -> None:
    where = and_(*(table.c[k] == v for k, v in key.items()))
    exists = conn.execute(select(func.count()).select_from(table).where(where)).scalar()
    if exists:
        if values:
            conn.execute(update(table).where(where).values(**values))
    else:
        conn.execute(table.insert().values(**key, **values, **(insert_only or {})))


def add_table(store: StateStore, tname: str, subtype: str | None = None, *,
              comments: str | None = None, person_id: str | None = None,
              pkey_string: str | None = None, pkey_number: str | None = None,
              aux_string: str | None = None, conn: Connection | None = None) -> str:
    """Register (or describe again) a table and subtype, with the sources of its keys."""
    t, s = pair(tname, subtype)
    values = {"comments": comments, "person_id": person_id, "pkey_string": pkey_string,
              "pkey_number": pkey_number, "aux_string": aux_string}
    if conn is None:
        with store.begin() as c:
            _upsert(c, T, {"tname": t, "subtype": s}, values, {"created_at": utcnow()})
    else:
        _upsert(conn, T, {"tname": t, "subtype": s}, values, {"created_at": utcnow()})
    return label(t, s)


def drop_table(store: StateStore, tname: str, subtype: str | None = None, *,
               force: bool = False) -> str:
    """Unregister a table and subtype; with ``force``, drop the interests in it too.

    Raises:
        UnknownTableError: it is not registered.
        McqError: listeners are interested in it and ``force`` is not given.
    """
    t, s = pair(tname, subtype)
    with store.begin() as conn:
        if conn.execute(select(T.c.tname).where(T.c.tname == t, T.c.subtype == s)).first() \
                is None:
            raise UnknownTableError(f"table {label(t, s)!r} is not registered")
        users = sorted(conn.execute(select(N.c.proc_name).where(
            N.c.tname == t, N.c.subtype == s)).scalars())
        if users and not force:
            raise McqError(f"table {label(t, s)!r} is still of interest to {', '.join(users)}; "
                           "drop those interests first, or use force")
        conn.execute(delete(N).where(N.c.tname == t, N.c.subtype == s))
        conn.execute(delete(T).where(T.c.tname == t, T.c.subtype == s))
    return label(t, s)


def add_listener(store: StateStore, proc_name: str, *, comments: str | None = None,
                 role: str | None = None, owner: str | None = None,
                 frequency: str | float = "daily", alert_after: str | float | None = None,
                 claim_timeout: str | float = "5min", workers: int = 1,
                 redeliver: str | None = None, conn: Connection | None = None) -> str:
    """Register (or describe again) a listener and how often it runs.

    Args:
        role: a database role a consumer must have (enforced on PostgreSQL).
        workers: how many workers consume it at once.
        redeliver: when an entry got but not acknowledged is handed out again:
            ``immediate`` (the next ``get_changes`` returns it, as the seed's does; the
            default for one worker) or ``claim_timeout`` (after the claim times out; the
            default for several workers, so that they never share an entry).
    """
    try:
        name = check_name("listener", proc_name)
        if redeliver is not None and redeliver not in REDELIVER:
            raise ValueError(f"redeliver must be {' or '.join(REDELIVER)}, not {redeliver!r}")
        if int(workers) < 1:
            raise ValueError(f"workers must be at least 1, not {workers}")
        values = {"comments": comments, "role": role, "owner": owner,
                  "frequency": seconds(frequency),
                  "alert_after": seconds(alert_after) if alert_after is not None else None,
                  "claim_timeout": seconds(claim_timeout), "workers": int(workers),
                  "redeliver": redeliver}
    except ValueError as exc:
        raise McqError(f"listener {proc_name!r}: {exc}") from exc
    if conn is None:
        with store.begin() as c:
            _upsert(c, L, {"proc_name": name}, values, {"created_at": utcnow()})
    else:
        _upsert(conn, L, {"proc_name": name}, values, {"created_at": utcnow()})
    return name


def drop_listener(store: StateStore, proc_name: str, *, force: bool = False) -> int:
    """Unregister a listener and its interests. Returns the pending entries flushed.

    With ``force`` its pending entries are removed, as ``flush`` removes them: they were
    never delivered, so they are not counted as processed (its processed entries stay,
    for the counts, until a purge).

    Raises:
        UnknownListenerError: it is not registered.
        McqError: entries are pending for it and ``force`` is not given.
    """
    with store.begin() as conn:
        require_listener(conn, proc_name)
        pending = conn.execute(select(func.count()).select_from(Q).where(
            Q.c.queue_name == proc_name)).scalar() or 0
        if pending and not force:
            raise McqError(f"listener {proc_name!r} has {pending} pending entries; flush them "
                           "first (changeflow mcq flush), or use force")
        conn.execute(delete(Q).where(Q.c.queue_name == proc_name))
        conn.execute(delete(N).where(N.c.proc_name == proc_name))
        conn.execute(delete(L).where(L.c.proc_name == proc_name))
    return int(pending)


def require_listener(conn: Connection, proc_name: str) -> dict[str, Any]:
    """A listener's row.

    Raises:
        UnknownListenerError: it is not registered.
    """
    row = conn.execute(select(L).where(L.c.proc_name == proc_name)).first()
    if row is None:
        known = sorted(conn.execute(select(L.c.proc_name)).scalars())
        raise UnknownListenerError(
            f"unknown listener {proc_name!r} (registered: {', '.join(known) or 'none'})")
    return dict(row._mapping)


def add_interest(store: StateStore, proc_name: str, tname: str, subtype: str | None = None, *,
                 comments: str | None = None, conn: Connection | None = None) -> str:
    """Make a listener interested in a table and subtype (``*``: every subtype).

    Raises:
        UnknownListenerError, UnknownTableError: either side is not registered.
    """
    t = pair(tname, None)[0]
    s = "*" if subtype == "*" else pair(t, subtype)[1]

    def run(c: Connection) -> None:
        require_listener(c, proc_name)
        where = T.c.tname == t if s == "*" else and_(T.c.tname == t, T.c.subtype == s)
        if c.execute(select(T.c.tname).where(where)).first() is None:
            raise UnknownTableError(f"interest of {proc_name!r}: table {label(t, s)!r} is not "
                                    "registered (add it first)")
        _upsert(c, N, {"proc_name": proc_name, "tname": t, "subtype": s},
                {"comments": comments})

    if conn is None:
        with store.begin() as c:
            run(c)
    else:
        run(conn)
    return f"{proc_name} -> {label(t, s)}"


def drop_interest(store: StateStore, proc_name: str, tname: str,
                  subtype: str | None = None) -> str:
    """Remove a listener's interest (its pending entries stay queued).

    Raises:
        McqError: there is no such interest.
    """
    t = pair(tname, None)[0]
    s = "*" if subtype == "*" else pair(t, subtype)[1]
    with store.begin() as conn:
        n = conn.execute(delete(N).where(N.c.proc_name == proc_name, N.c.tname == t,
                                         N.c.subtype == s)).rowcount
    if not n:
        raise McqError(f"listener {proc_name!r} has no interest in {label(t, s)!r}")
    return f"{proc_name} -> {label(t, s)}"


def _rows(store: StateStore, stmt: Any) -> list[dict[str, Any]]:
    with store.read() as conn:
        return [dict(r._mapping) for r in conn.execute(stmt)]


def list_tables(store: StateStore) -> list[dict[str, Any]]:
    """``meta_change_tables`` rows, by table and subtype."""
    return _rows(store, select(T).order_by(T.c.tname, T.c.subtype))


def list_listeners(store: StateStore) -> list[dict[str, Any]]:
    """``meta_change_listeners`` rows, by name, with the ``redelivery`` in force."""
    rows = _rows(store, select(L).order_by(L.c.proc_name))
    return [{**r, "redelivery": redelivery(r["redeliver"], int(r["workers"]))} for r in rows]


def list_interests(store: StateStore, proc_name: str | None = None) -> list[dict[str, Any]]:
    """``meta_change_interests`` rows (of one listener, or all)."""
    stmt = select(N).order_by(N.c.proc_name, N.c.tname, N.c.subtype)
    if proc_name is not None:
        stmt = stmt.where(N.c.proc_name == proc_name)
    return _rows(store, stmt)


def sync(store: StateStore, cfg: McqConfig) -> dict[str, int]:
    """Register every table, listener and interest a configuration declares, in one
    transaction. Registrations made elsewhere (CLI, Python) are kept.

    Returns:
        how many of each were declared.
    """
    with store.begin() as conn:
        for t in cfg.tables:
            add_table(store, t.tname, t.subtype, comments=t.comments, person_id=t.person_id,
                      pkey_string=t.pkey_string, pkey_number=t.pkey_number,
                      aux_string=t.aux_string, conn=conn)
        for li in cfg.listeners:
            add_listener(store, li.proc_name, comments=li.comments, role=li.role,
                         owner=li.owner, frequency=li.frequency, alert_after=li.alert_after,
                         claim_timeout=li.claim_timeout, workers=li.workers,
                         redeliver=li.redeliver, conn=conn)
        for it in cfg.interests:
            add_interest(store, it.proc_name, it.tname, it.subtype, comments=it.comments,
                         conn=conn)
    return {"tables": len(cfg.tables), "listeners": len(cfg.listeners),
            "interests": len(cfg.interests)}
