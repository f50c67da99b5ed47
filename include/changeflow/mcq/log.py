"""The log calls: ``log_insert``, ``log_update``, ``log_delete`` (seed Meta_Change_Rtn).

A log call names a table and subtype and the changed object's keys. It makes one
``meta_change_queue`` entry for every listener interested in that pair (one
``INSERT ... SELECT`` over ``meta_change_interests``), with ``queue_name`` and
``proc_name`` both set to the listener. No interested listener: no entry, no error.

The pair must be registered in ``meta_change_tables``. An unknown pair is an error
when the MCQ is *strict* (the default) and otherwise a warning, the call dropped.
The first log of a pair records the caller's origin (``call_stack``, ``stack_date``);
clearing ``stack_date`` records it again. Known pairs are remembered for a few
seconds per process (``cache_seconds``) so a log call is one statement.

A *manual entry* (``listener=...``) goes to that one listener only, interested or
not, which is how a new listener is tried out (seed "Manual Entries"). A *bulk* entry
flows only when the listener has no real-time entry pending (seed "Bulk Priority
Queue").
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, literal, select, update
from sqlalchemy.engine import Connection

from changeflow.mcq.conn import statement
from changeflow.mcq.model import BULK, REALTIME, BadChangeError, ChangeType, UnknownTableError
from changeflow.mcq.origin import call_stack
from changeflow.mcq.registry import label, pair, require_listener
from changeflow.state.schema import utcnow
from changeflow.state.schema_mcq import interests, queue, tables

if TYPE_CHECKING:
    from changeflow.state import StateStore

log = logging.getLogger(__name__)
Q, N, T = queue, interests, tables

_FIELDS = ("tname", "subtype", "rrowid", "change_type", "person_id", "pkey_string",
           "pkey_number", "aux_string", "entry_date", "lane")
# DISTINCT: a listener interested in a pair and in '*' of its table gets one entry.
_WHO = select(N.c.proc_name).distinct().where(
    N.c.tname == bindparam("tname"),
    N.c.subtype.in_([bindparam("subtype"), literal("*")])).subquery("who")
_FANOUT = Q.insert().from_select(
    [*_FIELDS, "queue_name", "proc_name"],
    select(*(bindparam(f, type_=Q.c[f].type) for f in _FIELDS), _WHO.c.proc_name,
           _WHO.c.proc_name))
#: the same fan-out reporting its rows (PostgreSQL's rowcount is -1 in autocommit)
_FANOUT_COUNTED = _FANOUT.returning(Q.c.entry_number)
_STACK = select(T.c.stack_date).where(T.c.tname == bindparam("t"), T.c.subtype == bindparam("s"))


@dataclass(frozen=True)
class Change:
    """One log call's values, checked."""

    tname: str
    subtype: str
    change_type: ChangeType
    rrowid: str | None = None
    person_id: int | None = None
    pkey_string: str | None = None
    pkey_number: int | None = None
    aux_string: str | None = None
    bulk: bool = False
    entry_date: dt.datetime | None = None
    origin: str | None = None

    def params(self) -> dict[str, Any]:
        """The statement parameters of its entries."""
        return {"tname": self.tname, "subtype": self.subtype, "rrowid": self.rrowid,
                "change_type": self.change_type.value, "person_id": self.person_id,
                "pkey_string": self.pkey_string, "pkey_number": self.pkey_number,
                "aux_string": self.aux_string, "entry_date": self.entry_date or utcnow(),
                "lane": BULK if self.bulk else REALTIME}


def _int(name: str, v: Any) -> int | None:
    if v is None or v == "":
        return None
    if isinstance(v, bool):
        raise BadChangeError(f"{name} must be a whole number, not {v!r}")
    try:
        f = float(v)
        if not f.is_integer():
            raise ValueError
        return int(f) if not isinstance(v, int) else v
    except (TypeError, ValueError):
        raise BadChangeError(f"{name} must be a whole number, not {v!r}") from None


def _str(name: str, v: Any, limit: int = 255) -> str | None:
    if v is None:
        return None
    s = str(v)
    if len(s) > limit:
        raise BadChangeError(f"{name} is {len(s)} characters long; at most {limit} are kept")
    return s


def make_change(change_type: str | ChangeType, tname: str, subtype: str | None = None, *,
                rrowid: Any = None, person_id: Any = None, pkey_string: Any = None,
                pkey_number: Any = None, aux_string: Any = None,
                bulk: bool = False) -> Change:
    """A checked :class:`Change`.

    Raises:
        BadChangeError: a key has the wrong type or length, or the change type is unknown.
        UnknownTableError: the table or subtype name is malformed.

    >>> make_change("U", "logins", pkey_number="1001").pkey_number
    1001
    """
    t, s = pair(tname, subtype)
    return Change(t, s, ChangeType.parse(change_type), _str("rrowid", rrowid),
                  _int("person_id", person_id), _str("pkey_string", pkey_string),
                  _int("pkey_number", pkey_number), _str("aux_string", aux_string), bulk)


class Logger:
    """Writes log calls into one store.

    Args:
        store: the state store holding the MCQ tables.
        strict: an unknown (table, subtype) raises instead of being dropped.
        cache_seconds: how long a known pair is remembered (0: check every call).
    """

    def __init__(self, store: StateStore, *, strict: bool = True, cache_seconds: float = 10.0):
        self.store = store
        self.strict = strict
        self.cache_seconds = cache_seconds
        self._known: dict[tuple[str, str], float] = {}

    def _check_pair(self, conn: Connection, c: Change) -> bool:
        key = (c.tname, c.subtype)
        if self._fresh(c):
            return True
        row = conn.execute(_STACK, {"t": c.tname, "s": c.subtype}).first()
        if row is None:
            msg = (f"log call for unknown table {label(c.tname, c.subtype)!r}: register it "
                   "in meta_change_tables (changeflow mcq table add)")
            if self.strict:
                raise UnknownTableError(msg + "; nothing was logged")
            log.warning("%s; the call was dropped (strict is off)", msg)
            return False
        if row[0] is None:
            conn.execute(update(T).where(T.c.tname == c.tname, T.c.subtype == c.subtype)
                         .values(call_stack=c.origin or call_stack(label="log call"),
                                 stack_date=utcnow()))
        self._known[key] = time.monotonic()
        return True

    def write(self, conn: Connection, c: Change, listener: str | None = None) -> int:
        """Log one change inside a transaction. Returns the number of entries made."""
        if not self._check_pair(conn, c):
            return 0
        params = c.params()
        if listener is not None:
            require_listener(conn, listener)
            conn.execute(Q.insert(), {**params, "queue_name": listener, "proc_name": listener})
            return 1
        return len(conn.execute(_FANOUT_COUNTED, params).all())

    def log(self, c: Change, *, listener: str | None = None,
            conn: Connection | None = None) -> int:
        """Log one change, in ``conn``'s transaction or in a transaction of its own."""
        if conn is not None:
            return self.write(conn, c, listener)
        if listener is None and self._fresh(c):  # one statement: commits by itself
            with statement(self.store) as one:
                return len(one.execute(_FANOUT_COUNTED, c.params()).all())
        with self.store.begin() as own:
            return self.write(own, c, listener)

    def _fresh(self, c: Change) -> bool:
        seen = self._known.get((c.tname, c.subtype))
        return seen is not None and time.monotonic() - seen < self.cache_seconds

    def forget(self) -> None:
        """Drop the remembered pairs (after unregistering one in this process)."""
        self._known.clear()
