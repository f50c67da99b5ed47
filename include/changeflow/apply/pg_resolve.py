"""Resolving one conflicting LCR against a PostgreSQL target row.

When a transaction fails on a conflict (a unique violation, or ``expect_rows``
finding no row with the LCR's key and old values) and its table has conflict
handlers, the apply replays the transaction statement by statement under savepoints.
A statement that conflicts is rolled back to its savepoint, the target row is read
(``FOR UPDATE``) and the same rules as for Iceberg targets decide
(:func:`changeflow.apply.conflicts._one`): apply the LCR as it is, apply part of it,
turn it into an INSERT, skip it, or fail the transaction with the reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from changeflow.apply import conflicts
from changeflow.apply.config import ConflictHandlerSpec
from changeflow.apply.pg_statements import Statement, StatementBuilder, _values
from changeflow.errors import TerminalError
from changeflow.targets.catalog import TargetTable

if TYPE_CHECKING:
    import psycopg


class UnresolvedConflictError(TerminalError):
    """A conflict no handler resolves: the transaction goes to the error queue."""


def is_conflict(exc: BaseException) -> bool:
    """Whether a database error is a conflict (unique violation or ``expect_rows``)."""
    import psycopg

    if isinstance(exc, psycopg.errors.UniqueViolation):
        return True
    return isinstance(exc, psycopg.errors.RaiseException) and "changeflow conflict" in str(exc)


def _effect(m: dict[str, Any], keys: list[str], compare: list[str]) -> dict[str, Any]:
    new, old = _values(m["new_values"]), _values(m["old_values"])
    kind = {"INSERT": "I", "UPDATE": "U", "DELETE": "D"}[m["command_type"]]
    e: dict[str, Any] = {c.lower(): v for c, v in new.items()}
    for k in keys:
        e.setdefault(k.lower(), old.get(k, new.get(k)))
    for c in compare:
        e[f"_o_{c.lower()}"] = old.get(c)
        e[f"_h_{c.lower()}"] = c in old
    e.update(_e_kind=kind, _e_msg=m["msg_id"], _e_pos=m["position"], _e_absent=None)
    return e


def resolve(builder: StatementBuilder, conn: psycopg.Connection[Any], m: dict[str, Any],
            handlers: list[ConflictHandlerSpec]) -> list[Statement]:
    """The statements that apply a conflicting LCR as its handlers decide (maybe none).

    Raises:
        UnresolvedConflictError: no handler resolves the conflict; the message says why.
    """
    owner, name = m["object_owner"], m["object_name"]
    new, old = _values(m["new_values"]), _values(m["old_values"])
    keys = list(m["key_columns"] or old or new)
    where = [(k, old[k] if k in old else new.get(k)) for k in keys]
    current = builder.current_row(owner, name, where)
    compare = [c for c, _ in builder.compared(owner, name, old, keys)]
    compare = [c[1:] for c in compare]
    cols = list(current or new)
    table = TargetTable(f"{owner}.{name}".lower(), [k.lower() for k in keys],
                        [(c.lower(), "VARCHAR2") for c in dict.fromkeys(cols + keys)], 1)
    state = {"exists": current is not None, "found": False,
             "values": {c.lower(): v for c, v in (current or {}).items()}}
    outcome = conflicts._one(_effect(m, keys, compare), state, table,
                             [c.lower() for c in compare], handlers)
    if isinstance(outcome, str):
        raise UnresolvedConflictError(outcome)
    if outcome is None:
        return []
    image, _ = outcome
    msg = m["msg_id"]
    if image["_e_kind"] == "D":
        return [builder.delete_by_key(owner, name, where, msg)]
    absent = {c.lower() for c in image.get("_e_absent") or []}
    values = {c: v for c, v in new.items() if c.lower() not in absent}
    if image["_e_kind"] == "I" or current is None:
        return [builder.upsert(owner, name, {**dict(where), **values}, keys, msg)]
    values = {c: v for c, v in values.items() if c not in keys or values[c] != dict(where)[c]}
    if not values:
        return []
    return [builder.update_columns(owner, name, values, where, msg)]
