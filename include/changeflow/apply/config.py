"""Configuration of an apply process beyond its queue and target (see ``docs/apply.md``).

These models hang off :class:`changeflow.config.ApplySpec`:

.. code-block:: yaml

    applies:
      - name: apply_dbs2
        queue: strmadmin.streams_queue@site2
        conflicts:
          detect: true                         # row missing/exists, old values differ
          compare: {hr.employees: [salary]}    # default: every old value an LCR carries
          handlers:
            - {table: hr.employees, columns: [salary, commission_pct],
               method: MAXIMUM, resolution_column: salary}
            - {table: hr.regions, conflict: uniqueness, method: OVERWRITE}
        handlers:
          dml: [{table: hr.jobs, operation: UPDATE, handler: my_pkg.handlers:jobs}]
          ddl: my_pkg.handlers:ddl
          message: my_pkg.handlers:on_message
          precommit: my_pkg.handlers:precommit
        enqueue:
          - {queue: strmadmin.audit_q@site2, condition: ":dml.get_object_name() = 'JOBS'",
             execute: true}
        errors: {stop_on_error: false}
        positions: {history_days: 7}

Everything is validated when the file is loaded: handler paths must look like
``module:function`` (they are imported when the apply starts), conflict handlers need
a resolution column for MAXIMUM and MINIMUM, and enqueue conditions are parsed with
the rule condition language (an error names the position).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_TABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_$#]*\.[A-Za-z_][A-Za-z0-9_$#]*$")
_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*([:.][A-Za-z_]"
                   r"[A-Za-z0-9_]*)$")

ConflictKind = Literal["update", "uniqueness", "delete"]
Method = Literal["OVERWRITE", "DISCARD", "MAXIMUM", "MINIMUM"]
METHODS: tuple[str, ...] = ("OVERWRITE", "DISCARD", "MAXIMUM", "MINIMUM")
CONFLICTS: tuple[str, ...] = ("update", "uniqueness", "delete")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def table_name(value: str) -> str:
    """A target table reference, checked and lower-cased (``owner.name``).

    >>> table_name("HR.Employees")
    'hr.employees'
    """
    if not _TABLE.match(value):
        raise ValueError(f"table name {value!r} must be owner.table")
    return value.lower()


def handler_path(value: str) -> str:
    """A handler's dotted path: ``package.module:function`` (or ``package.module.function``).

    >>> handler_path("my_pkg.handlers:on_jobs")
    'my_pkg.handlers:on_jobs'
    """
    if not _PATH.match(value) or ("." not in value and ":" not in value):
        raise ValueError(f"handler {value!r} must be a dotted path such as "
                         "'package.module:function'")
    return value


class ConflictHandlerSpec(_Model):
    """A prebuilt conflict handler for a table's column group (SET_UPDATE_CONFLICT_HANDLER).

    * ``update`` conflicts (the row's current values differ from the LCR's old values
      in a compared column of ``columns``): OVERWRITE takes the LCR's values for the
      group, DISCARD keeps the row's, MAXIMUM/MINIMUM take the LCR's values when its new
      value of ``resolution_column`` is greater/less than the row's.
    * ``uniqueness`` (INSERT of an existing key): the same four methods, on the whole row.
    * ``delete`` (UPDATE or DELETE of a missing row): OVERWRITE turns an UPDATE into an
      INSERT, DISCARD drops the LCR; a DELETE of a missing row is dropped either way.

    ``columns`` empty means every column of the table.
    """

    table: str
    conflict: ConflictKind = "update"
    columns: list[str] = []
    method: Method
    resolution_column: str | None = None

    @field_validator("table")
    @classmethod
    def _table(cls, v: str) -> str:
        return table_name(v)

    @field_validator("columns")
    @classmethod
    def _columns(cls, v: list[str]) -> list[str]:
        return sorted({c.lower() for c in v})

    @field_validator("method", mode="before")
    @classmethod
    def _method(cls, v: object) -> object:
        return v.upper() if isinstance(v, str) else v

    @model_validator(mode="after")
    def _consistent(self) -> ConflictHandlerSpec:
        res = self.resolution_column.lower() if self.resolution_column else None
        if self.method in ("MAXIMUM", "MINIMUM"):
            if res is None:
                raise ValueError(f"method {self.method} needs a resolution_column")
            if self.conflict == "delete":
                raise ValueError("a delete conflict has no row to compare: use OVERWRITE "
                                 "or DISCARD")
        if res is not None and self.columns and res not in self.columns:
            raise ValueError(f"resolution_column {res!r} must be one of the column group "
                             f"{self.columns}")
        if self.conflict != "update" and self.columns:
            raise ValueError(f"{self.conflict} conflicts resolve whole rows: leave "
                             "'columns' empty")
        object.__setattr__(self, "resolution_column", res)
        return self

    @property
    def columns_key(self) -> str:
        """The column group as one string (``*`` for every column)."""
        return ",".join(self.columns) or "*"


class ConflictConfig(_Model):
    """Conflict detection and the prebuilt handlers that resolve conflicts.

    ``detect: false`` applies by key without checking (upsert semantics: an INSERT of
    an existing key replaces it, an UPDATE of a missing key inserts it, a DELETE of a
    missing key does nothing).
    """

    detect: bool = True
    compare: dict[str, list[str]] = {}
    handlers: list[ConflictHandlerSpec] = []

    @field_validator("compare")
    @classmethod
    def _compare(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        return {table_name(t): sorted({c.lower() for c in cols}) for t, cols in v.items()}

    @model_validator(mode="after")
    def _unique(self) -> ConflictConfig:
        seen: set[tuple[str, str, str]] = set()
        for h in self.handlers:
            key = (h.table, h.conflict, h.columns_key)
            if key in seen:
                raise ValueError(f"two {h.conflict} conflict handlers for {h.table} columns "
                                 f"{h.columns_key}")
            seen.add(key)
        return self


DmlOperation = Literal["INSERT", "UPDATE", "DELETE", "DEFAULT"]


class DmlHandlerSpec(_Model):
    """A DML handler: a Python callable that receives each row LCR of a table and operation.

    ``operation: DEFAULT`` covers every operation the table has no specific handler for.
    """

    table: str
    operation: DmlOperation = "DEFAULT"
    handler: str

    @field_validator("table")
    @classmethod
    def _table(cls, v: str) -> str:
        return table_name(v)

    @field_validator("operation", mode="before")
    @classmethod
    def _operation(cls, v: object) -> object:
        return v.upper() if isinstance(v, str) else v

    @field_validator("handler")
    @classmethod
    def _handler(cls, v: str) -> str:
        return handler_path(v)


class HandlerConfig(_Model):
    """The apply handlers, by dotted path (see ``docs/apply.md``)."""

    dml: list[DmlHandlerSpec] = []
    ddl: str | None = None
    message: str | None = None
    precommit: str | None = None

    @field_validator("ddl", "message", "precommit")
    @classmethod
    def _path(cls, v: str | None) -> str | None:
        return handler_path(v) if v is not None else None

    @model_validator(mode="after")
    def _unique(self) -> HandlerConfig:
        seen: set[tuple[str, str]] = set()
        for h in self.dml:
            if (h.table, h.operation) in seen:
                raise ValueError(f"two DML handlers for {h.table} {h.operation}")
            seen.add((h.table, h.operation))
        return self


class EnqueueDestination(_Model):
    """Re-enqueue the messages that match into another queue (SET_ENQUEUE_DESTINATION).

    ``condition`` is a rule condition (``:dml``, ``:ddl``, ``:msg``); ``rule`` names a
    rule of the rules file instead; with neither, every message matches. ``execute``
    says whether matching messages are also applied (SET_EXECUTE): by default they are
    enqueued *instead of* being applied. Re-enqueued messages are user-enqueued
    messages (origin USER) in the destination, written once per source batch range.
    """

    queue: str
    condition: str | None = None
    rule: str | None = None
    execute: bool = False

    @field_validator("condition")
    @classmethod
    def _condition(cls, v: str | None) -> str | None:
        if v is None:
            return v
        from changeflow.rules.errors import RuleError
        from changeflow.rules.parser import parse

        try:
            parse(v)
        except RuleError as exc:
            raise ValueError(f"condition: {exc}") from None
        return v

    @model_validator(mode="after")
    def _one(self) -> EnqueueDestination:
        if self.condition is not None and self.rule is not None:
            raise ValueError("give at most one of condition and rule")
        return self


class ErrorPolicy(_Model):
    """What an unresolved error does besides putting its transaction in the error queue.

    ``stop_on_error`` (Oracle's DISABLE_ON_ERROR): the run commits what came before the
    failed transaction and fails; the next run goes on after it.
    """

    stop_on_error: bool = False


class PositionPolicy(_Model):
    """How long an apply remembers each applied transaction exactly.

    A transaction is skipped only when that exact transaction was applied. Entries
    whose commit time is more than ``history_days`` older than the newest applied from
    the same source collapse into that source's watermark: a transaction at or below
    the watermark counts as applied, so a path may deliver a source's transactions at
    most this much later than newer ones.
    """

    history_days: float = Field(default=7.0, gt=0)
