"""The import-table listener (seed Figures 2, 6 and 3): push into a target's import table.

For each change, the listener reads the object's current state from the source (the
query configured for the entry's table, its keys as parameters, as
``Insite_Interface.Push_Person`` calls ``Meta_Change_Data``) and inserts each row into
the target's import table. The target's own trigger on that table applies its
business rules to its own tables; a rule it refuses raises, the insert fails, and the
change is put back (the error is in the run's result and log). The import table's
contents do not matter once the trigger ran; the target flushes it when it likes.

Each change's rows are inserted in one target transaction, then the change is
acknowledged: a crash in between inserts it again on the next run, which the seed's
idempotent triggers allow. An unreachable source or target ends the run (transient):
the changes wait in the queue, as the seed's daily push does when the target is down.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from changeflow.errors import ConfigError
from changeflow.mcq.listeners.handlers import TargetUnavailableError, fetch_rows
from changeflow.mcq.model import ChangeRec, McqError

log = logging.getLogger(__name__)


class ImportRefusedError(McqError):
    """The target's import trigger (its business rules) refused a row."""


class PgImport:
    """Pushes the current state of each change's object into a target's import table.

    Args:
        source_url: the source database (libpq URL) the current state is read from.
        target_url: the target database holding the import table.
        import_table: ``schema.table`` or ``table`` in the target.
        queries: ``TNAME`` or ``TNAME/Subtype`` -> SQL on the source returning import
            columns, with the entry's keys as named parameters (``%(person_id)s``).
        key_columns: import column -> entry field, inserted when the object is gone.
        on_missing: ``keys`` (insert ``key_columns`` only) or ``skip``.
    """

    def __init__(self, source_url: str, target_url: str, import_table: str,
                 queries: dict[str, str], *, key_columns: dict[str, str] | None = None,
                 on_missing: str = "skip"):
        if not queries:
            raise ConfigError("pg_import listener: queries is empty")
        self.source_url = source_url
        self.target_url = target_url
        self.import_table = import_table
        self.queries = queries
        self.key_columns = key_columns or {}
        self.on_missing = on_missing
        self._src: Any = None
        self._dst: Any = None
        self._sql: dict[tuple[str, ...], Any] = {}

    def _connect(self) -> tuple[Any, Any]:
        from changeflow.pgconn import connect

        if self._src is None or self._src.closed:
            self._src = connect(self.source_url, application_name="mcq-import-source",
                                attempts=2)
        if self._dst is None or self._dst.closed:
            self._dst = connect(self.target_url, application_name="mcq-import-target",
                                attempts=2, autocommit=False)
        return self._src, self._dst

    def _insert(self, cols: tuple[str, ...]) -> Any:
        from psycopg import sql

        stmt = self._sql.get(cols)
        if stmt is None:
            parts = self.import_table.split(".")
            stmt = sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
                sql.Identifier(*parts), sql.SQL(", ").join(map(sql.Identifier, cols)),
                sql.SQL(", ").join(sql.Placeholder() * len(cols)))
            self._sql[cols] = stmt
        return stmt

    def rows(self, rec: ChangeRec) -> list[dict[str, Any]]:
        """The rows to insert for a change (the object's current state, or its keys)."""
        src, _ = self._connect()
        rows = fetch_rows(src, self.queries, rec)
        if rows or self.on_missing == "skip":
            return rows
        keys = rec.keys()
        return [{col: keys[field] for col, field in self.key_columns.items()}]

    def handle(self, rec: ChangeRec) -> None:
        """Insert the change's rows into the import table (one target transaction)."""
        import psycopg

        try:
            rows = self.rows(rec)
            _, dst = self._connect()
            try:
                for row in rows:
                    cols = tuple(row)
                    dst.execute(self._insert(cols), tuple(row[c] for c in cols))
                dst.commit()
            except psycopg.OperationalError:
                raise
            except psycopg.Error as exc:
                dst.rollback()
                msg = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
                raise ImportRefusedError(f"import of entry {rec.entry_number} "
                                         f"({rec.tname}/{rec.subtype or '-'}) into "
                                         f"{self.import_table} refused: {msg}") from exc
        except psycopg.OperationalError as exc:
            self.close()
            raise TargetUnavailableError(f"import listener: {exc}".strip()) from exc
        log.debug("entry %s: %d row(s) into %s", rec.entry_number, len(rows), self.import_table)

    def close(self) -> None:
        """Close both connections."""
        for conn in (self._src, self._dst):
            if conn is not None:
                with contextlib.suppress(Exception):  # closing a broken connection
                    conn.close()
        self._src = self._dst = None
