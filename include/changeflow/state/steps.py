"""Migration steps and the idempotent bodies they are built from (see :mod:`.migrations`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Column, Index, Table, inspect, text
from sqlalchemy.engine import Connection
from sqlalchemy.schema import CreateIndex


@dataclass(frozen=True)
class Step:
    """One migration step of a domain.

    Args:
        version: its number in the domain's chain (1, 2, ...).
        description: what it changes, for the log and ``cf_schema_versions``.
        up: the change, run inside the migration's transaction.
    """

    version: int
    description: str
    up: Callable[[Connection], None]


def create_tables(*tables: Table) -> Callable[[Connection], None]:
    """A step body creating tables (and their indexes) that do not exist yet."""

    def up(conn: Connection) -> None:
        tables[0].metadata.create_all(conn, tables=list(tables), checkfirst=True)

    return up


def add_columns(table: Table, *names: str) -> Callable[[Connection], None]:
    """A step body adding columns (declared on ``table``) that the stored table lacks.

    New columns must be nullable or carry a server default, as on any live table.
    """

    def up(conn: Connection) -> None:
        present = {c["name"] for c in inspect(conn).get_columns(table.name)}
        for name in names:
            if name in present:
                continue
            col: Column = table.c[name]
            ddl = col.type.compile(dialect=conn.dialect)
            default = ""
            if col.server_default is not None:
                arg: Any = getattr(col.server_default, "arg", None)
                default = f" DEFAULT {getattr(arg, 'text', None) or repr(arg)}"
            null = "" if col.nullable or default else " NOT NULL"
            conn.execute(text(f'ALTER TABLE {table.name} ADD COLUMN "{name}" {ddl}{default}{null}'))

    return up


def create_indexes(*indexes: Index) -> Callable[[Connection], None]:
    """A step body creating indexes that do not exist yet."""

    def up(conn: Connection) -> None:
        for index in indexes:
            table = index.table
            assert table is not None
            have = {i["name"] for i in inspect(conn).get_indexes(table.name)}
            if index.name not in have:
                conn.execute(CreateIndex(index))

    return up
