"""The objects apply handlers receive: row LCRs, DDL LCRs, user messages, commits.

They mirror Oracle's ``LCR$_ROW_RECORD`` and ``LCR$_DDL_RECORD`` member functions
(``get_value('NEW', 'SALARY')``, ``set_value``, ``get_command_type``, ...). A DML or
DDL handler applies the LCR by calling :meth:`RowLCR.execute` (after changing it, if
it likes; it may call it more than once, e.g. after ``set_object_name``); a handler
that returns without calling it skips the LCR.

>>> row = {"kind": "ROW", "command_type": "UPDATE", "object_owner": "HR",
...        "object_name": "JOBS", "msg_id": "m1", "new_values": {"MIN_SALARY":
...        {"type": "INTEGER", "int": 4000}}}
>>> lcr = RowLCR(row)
>>> lcr.get_value("NEW", "min_salary")
4000
>>> lcr.set_value("NEW", "MIN_SALARY", 4500)
>>> lcr.execute()
>>> [r["new_values"]["MIN_SALARY"]["int"] for r in lcr.executed]
[4500]
"""

from __future__ import annotations

import copy
import datetime as dt
from dataclasses import dataclass
from typing import Any

from changeflow import lcr as contract
from changeflow.errors import TerminalError


class HandlerError(TerminalError):
    """A handler raised, could not be imported, or used an LCR wrongly."""


def _values(entries: Any) -> dict[str, dict[str, Any]]:
    """A value map as ``{COLUMN: value struct}`` from a dict or Arrow's (key, struct) pairs."""
    if not entries:
        return {}
    if isinstance(entries, dict):
        return {k: dict(v) if v is not None else v  # type: ignore[misc]
                for k, v in entries.items()}
    return {k: dict(v) for k, v in entries}


def _column(name: str) -> str:
    return contract.canonical_identifier(name.strip('"'))


class _Base:
    """What every record holds: the contract row it came from."""

    def __init__(self, row: dict[str, Any]):
        self._row = dict(row)
        self.executed: list[dict[str, Any]] = []

    def get_source_database_name(self) -> str | None:
        """The source database's global name."""
        return self._row.get("source_database_name")

    def get_transaction_id(self) -> str | None:
        """The source transaction id."""
        return self._row.get("transaction_id")

    def get_commit_scn(self) -> int | None:
        """The commit position."""
        return self._row.get("commit_scn")

    get_scn = get_commit_scn

    def get_commit_time(self) -> dt.datetime | None:
        """The commit time (UTC)."""
        return self._row.get("commit_time")

    def get_position(self) -> int | None:
        """The position within the transaction."""
        return self._row.get("position")

    def get_msg_id(self) -> str:
        """The stable message id."""
        return str(self._row.get("msg_id"))

    def get_tag(self) -> bytes | None:
        """The tag (NULL unless the change was made by a tagged session)."""
        return self._row.get("tag")

    def set_tag(self, tag: bytes | None) -> None:
        """Set the tag."""
        self._row["tag"] = tag

    def is_null_tag(self) -> str:
        """``'Y'`` when the tag is NULL, else ``'N'`` (as the seed's rules write it)."""
        return "Y" if self._row.get("tag") is None else "N"

    def get_command_type(self) -> str | None:
        """INSERT, UPDATE, DELETE, or the DDL statement type."""
        return self._row.get("command_type")

    def get_object_owner(self) -> str | None:
        """The table's owner (schema)."""
        return self._row.get("object_owner")

    def get_object_name(self) -> str | None:
        """The table's name."""
        return self._row.get("object_name")

    def set_object_owner(self, owner: str) -> None:
        """Apply the change to a table of another owner."""
        self._row["object_owner"] = _column(owner)

    def set_object_name(self, name: str) -> None:
        """Apply the change to another table."""
        self._row["object_name"] = _column(name)

    def execute(self) -> None:
        """Apply the record as it is now (it is applied when the transaction commits)."""
        self.executed.append(self.to_row())

    def to_row(self) -> dict[str, Any]:
        """The record as an LCR-contract row."""
        return copy.deepcopy(self._row)


class RowLCR(_Base):
    """A row LCR (``LCR$_ROW_RECORD``)."""

    def set_command_type(self, command: str) -> None:
        """Change the command (INSERT, UPDATE or DELETE).

        Raises:
            UnknownCommandTypeError: not a row command.
        """
        self._row["command_type"] = contract.CommandType.parse(command, kind="ROW").value

    def _side(self, value_type: str) -> str:
        side = value_type.strip().upper()
        if side not in ("OLD", "NEW"):
            raise HandlerError(f"value type must be 'OLD' or 'NEW', not {value_type!r}")
        return "old_values" if side == "OLD" else "new_values"

    def get_values(self, value_type: str) -> dict[str, Any]:
        """Every old or new value, as ``{COLUMN: python value}``."""
        return {k: contract.decode_value(v) for k, v in
                _values(self._row.get(self._side(value_type))).items()}

    def get_value(self, value_type: str, column: str) -> Any:
        """One old or new value (``None`` when NULL or not carried)."""
        struct = _values(self._row.get(self._side(value_type))).get(_column(column))
        return contract.decode_value(struct) if struct is not None else None

    def has_value(self, value_type: str, column: str) -> bool:
        """Whether the LCR carries the column (an UPDATE may leave unchanged ones out)."""
        return _column(column) in _values(self._row.get(self._side(value_type)))

    def set_value(self, value_type: str, column: str, value: Any,
                  logical_type: str | None = None) -> None:
        """Set (or add) an old or new value; its type stays the column's unless given."""
        side = self._side(value_type)
        values = _values(self._row.get(side))
        name = _column(column)
        current = values.get(name)
        ltype = logical_type or (current or {}).get("type")
        values[name] = contract.encode_value(value, ltype)
        self._row[side] = values

    def delete_column(self, column: str, value_type: str = "*") -> None:
        """Remove a column from the old values, the new values, or both (``*``)."""
        sides = ("old_values", "new_values") if value_type == "*" else (self._side(value_type),)
        for side in sides:
            values = _values(self._row.get(side))
            values.pop(_column(column), None)
            self._row[side] = values or None

    def rename_column(self, old: str, new: str, value_type: str = "*") -> None:
        """Rename a column in the old values, the new values, or both (``*``)."""
        sides = ("old_values", "new_values") if value_type == "*" else (self._side(value_type),)
        for side in sides:
            values = _values(self._row.get(side))
            if _column(old) in values:
                values[_column(new)] = values.pop(_column(old))
            self._row[side] = values or None

    def key_columns(self) -> list[str]:
        """The primary-key columns."""
        return list(self._row.get("key_columns") or [])


class DdlLCR(_Base):
    """A DDL LCR (``LCR$_DDL_RECORD``)."""

    def get_ddl_text(self) -> str | None:
        """The statement."""
        return self._row.get("ddl_text")

    def set_ddl_text(self, text: str) -> None:
        """Change the statement executed by :meth:`execute`."""
        self._row["ddl_text"] = text

    def get_object_type(self) -> str | None:
        """TABLE, INDEX, ..."""
        return self._row.get("object_type")

    def get_base_table_owner(self) -> str | None:
        """The owner of the table the statement is about."""
        return self._row.get("base_table_owner")

    def get_base_table_name(self) -> str | None:
        """The table the statement is about."""
        return self._row.get("base_table_name")

    def get_logon_user(self) -> str | None:
        """Who ran the statement."""
        return self._row.get("logon_user")

    def get_current_schema(self) -> str | None:
        """The schema the statement ran in."""
        return self._row.get("current_schema")


class UserMessage(_Base):
    """A user message (not an LCR): what a message handler receives."""

    def get_msg_type_name(self) -> str | None:
        """The payload type name."""
        return self._row.get("msg_type_name")

    def get_payload(self) -> dict[str, Any]:
        """The typed payload fields as ``{FIELD: python value}``."""
        return {k: contract.decode_value(v) for k, v in _values(self._row.get("payload")).items()}

    def get(self, field: str) -> Any:
        """One payload field (``:msg.field`` in rules); ``None`` when absent."""
        payload = {k.upper(): v for k, v in self.get_payload().items()}
        return payload.get(field.upper())

    def get_correlation(self) -> str | None:
        """The correlation id."""
        return self._row.get("correlation")

    def get_priority(self) -> int | None:
        """The priority."""
        return self._row.get("priority")

    def get_sender(self) -> str | None:
        """The sender."""
        return self._row.get("sender")

    def get_enq_time(self) -> dt.datetime | None:
        """When it was enqueued."""
        return self._row.get("enq_time")

    def get_payload_text(self) -> str | None:
        """A text/XML payload."""
        return self._row.get("payload_text")

    def get_payload_raw(self) -> bytes | None:
        """A RAW payload."""
        return self._row.get("payload_raw")


@dataclass(frozen=True)
class Commit:
    """What a precommit handler sees: one source transaction about to commit."""

    source_database: str
    transaction_id: str
    commit_scn: int
    commit_time: dt.datetime | None
    n_lcrs: int
    tables: tuple[str, ...]


def record_for(row: dict[str, Any]) -> _Base:
    """The handler object for a contract row of any kind."""
    kind = row.get("kind")
    if kind == "ROW":
        return RowLCR(row)
    if kind == "DDL":
        return DdlLCR(row)
    return UserMessage(row)
