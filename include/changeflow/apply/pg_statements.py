"""SQL for applying row LCRs to PostgreSQL: one statement per LCR, composed safely.

Statements are composed with :mod:`psycopg.sql` (identifiers quoted, values bound as
parameters) and cached by shape (table, command, columns), so the server prepares
each shape once. UPDATE and DELETE go through ``changeflow.expect_rows``, which
raises when the row to change is missing: a conflict fails the statement on the
server, which keeps pipelined execution safe.

Names: LCR owners, tables and columns are canonical (upper case for unquoted
names); an all-upper-case name is folded back to lower case for PostgreSQL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from changeflow import lcr

if TYPE_CHECKING:
    import psycopg

BOOKKEEPING_SQL = """
CREATE SCHEMA IF NOT EXISTS changeflow;
CREATE TABLE IF NOT EXISTS changeflow.apply_progress (
    apply_name text NOT NULL,
    source_database text NOT NULL,
    commit_scn bigint NOT NULL,
    commit_time timestamptz,
    transaction_id text,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (apply_name, source_database)
);
CREATE OR REPLACE FUNCTION changeflow.expect_rows(n bigint, what text) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    IF n <> 1 THEN
        RAISE EXCEPTION 'changeflow conflict: % matched % rows, expected 1', what, n
            USING ERRCODE = 'P0001';
    END IF;
    RETURN n;
END $$;
"""

MARK_SQL = (
    "INSERT INTO changeflow.apply_progress AS p "
    "(apply_name, source_database, commit_scn, commit_time, transaction_id, applied_at) "
    "VALUES (%s, %s, %s, %s, %s, now()) ON CONFLICT (apply_name, source_database) DO UPDATE "
    "SET commit_scn = excluded.commit_scn, commit_time = excluded.commit_time, "
    "transaction_id = excluded.transaction_id, applied_at = now() "
    "WHERE p.commit_scn < excluded.commit_scn"
)

IMPORT_META = ("cf_command_type", "cf_source_database", "cf_transaction_id", "cf_commit_scn",
               "cf_position")


def pg_name(name: str) -> str:
    """A canonical LCR identifier as PostgreSQL spells it.

    >>> pg_name("PGBENCH_ACCOUNTS"), pg_name("MixedCase")
    ('pgbench_accounts', 'MixedCase')
    """
    return name.lower() if name == name.upper() else name


def ensure_bookkeeping(conn: psycopg.Connection[Any]) -> None:
    """Create the ``changeflow`` schema, progress table and conflict check if missing."""
    exists = conn.execute(
        "SELECT to_regclass('changeflow.apply_progress') IS NOT NULL AND "
        "to_regprocedure('changeflow.expect_rows(bigint,text)') IS NOT NULL"
    ).fetchone()
    if exists and exists[0]:
        return
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtextextended('changeflow.bookkeeping', 0))")
        conn.execute(BOOKKEEPING_SQL)


@dataclass(frozen=True)
class Statement:
    """One LCR as a statement: the SQL text and its parameters."""

    sql: str
    params: tuple[Any, ...]
    msg_id: str


class StatementBuilder:
    """Turns row LCRs (as dicts from Arrow) into :class:`Statement` s.

    Args:
        conn: the target connection (for quoting and for import-table columns).
        schema_map: LCR owner -> target schema.
        import_tables: ``OWNER.NAME`` -> ``schema.import_table``.
    """

    def __init__(
        self, conn: psycopg.Connection[Any], schema_map: dict[str, str],
        import_tables: dict[str, str],
    ):
        self.conn = conn
        self.schema_map = {k.upper(): v for k, v in schema_map.items()}
        self.import_tables = {k.upper(): v for k, v in import_tables.items()}
        self._sql: dict[tuple[Any, ...], str] = {}
        self._import_cols: dict[str, list[str]] = {}

    def _table(self, owner: str, name: str) -> Any:
        from psycopg import sql

        schema = self.schema_map.get(owner.upper(), pg_name(owner))
        return sql.Identifier(schema, pg_name(name))

    def _text(self, key: tuple[Any, ...], build: Any) -> str:
        text = self._sql.get(key)
        if text is None:
            text = build().as_string(self.conn)
            self._sql[key] = text
        return text

    def statement(self, m: dict[str, Any]) -> Statement:
        """The statement applying one LCR (row, or a TRUNCATE DDL LCR)."""
        owner, name, cmd = m["object_owner"], m["object_name"], m["command_type"]
        if m["kind"] == "DDL":
            if cmd != "TRUNCATE TABLE":
                raise ValueError(f"DDL LCR {cmd!r} is not applied to PostgreSQL targets")
            from psycopg import sql

            text = self._text(("T", owner, name),
                              lambda: sql.SQL("TRUNCATE {}").format(self._table(owner, name)))
            return Statement(text, (), m["msg_id"])
        target = self.import_tables.get(f"{owner}.{name}".upper())
        if target is not None:
            return self._import(target, m)
        new = _values(m["new_values"])
        old = _values(m["old_values"])
        if cmd == "INSERT":
            return self._insert(owner, name, new, m["msg_id"])
        keys = m["key_columns"] or list(old)
        where = [(k, old[k] if k in old else new[k]) for k in keys]
        if cmd == "UPDATE":
            return self._update(owner, name, new, where, m["msg_id"])
        return self._delete(owner, name, where, m["msg_id"])

    def _insert(self, owner: str, name: str, new: dict[str, Any], msg_id: str) -> Statement:
        from psycopg import sql

        cols = tuple(new)

        def build() -> Any:
            return sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
                self._table(owner, name), sql.SQL(", ").join(sql.Identifier(pg_name(c))
                                                             for c in cols),
                sql.SQL(", ").join(sql.Placeholder() * len(cols)))

        return Statement(self._text(("I", owner, name, cols), build), tuple(new.values()),
                         msg_id)

    def _update(self, owner: str, name: str, new: dict[str, Any],
                where: list[tuple[str, Any]], msg_id: str) -> Statement:
        from psycopg import sql

        cols, keys = tuple(new), tuple(k for k, _ in where)
        what = f"UPDATE of {owner}.{name}"

        def build() -> Any:
            return sql.SQL(
                "WITH u AS (UPDATE {} SET {} WHERE {} RETURNING 1) "
                "SELECT changeflow.expect_rows((SELECT count(*) FROM u), {})"
            ).format(self._table(owner, name), _assign(cols, ", "), _assign(keys, " AND "),
                     sql.Literal(what))

        params = tuple(new.values()) + tuple(v for _, v in where)
        return Statement(self._text(("U", owner, name, cols, keys), build), params, msg_id)

    def _delete(self, owner: str, name: str, where: list[tuple[str, Any]],
                msg_id: str) -> Statement:
        from psycopg import sql

        keys = tuple(k for k, _ in where)
        what = f"DELETE of {owner}.{name}"

        def build() -> Any:
            return sql.SQL(
                "WITH d AS (DELETE FROM {} WHERE {} RETURNING 1) "
                "SELECT changeflow.expect_rows((SELECT count(*) FROM d), {})"
            ).format(self._table(owner, name), _assign(keys, " AND "), sql.Literal(what))

        return Statement(self._text(("D", owner, name, keys), build),
                         tuple(v for _, v in where), msg_id)

    def _import(self, target: str, m: dict[str, Any]) -> Statement:
        """An INSERT into an import table: the row image plus ``cf_*`` columns it has."""
        from psycopg import sql

        have = self._columns_of(target)
        image = _values(m["new_values"] if m["command_type"] != "DELETE" else m["old_values"])
        meta = {"cf_command_type": m["command_type"],
                "cf_source_database": m["source_database_name"],
                "cf_transaction_id": m["transaction_id"], "cf_commit_scn": m["commit_scn"],
                "cf_position": m["position"]}
        values = {pg_name(k): v for k, v in image.items() if pg_name(k) in have}
        values.update({k: v for k, v in meta.items() if k in have})
        cols = tuple(values)
        schema, _, table = target.rpartition(".")

        def build() -> Any:
            ident = sql.Identifier(schema, table) if schema else sql.Identifier(table)
            return sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
                ident, sql.SQL(", ").join(map(sql.Identifier, cols)),
                sql.SQL(", ").join(sql.Placeholder() * len(cols)))

        return Statement(self._text(("M", target, cols), build), tuple(values.values()),
                         m["msg_id"])

    def _columns_of(self, target: str) -> list[str]:
        if target not in self._import_cols:
            schema, _, table = target.rpartition(".")
            rows = self.conn.execute(
                "SELECT column_name::text FROM information_schema.columns "
                "WHERE table_schema = coalesce(nullif(%s, ''), current_schema()) "
                "AND table_name = %s", (schema, table),
            ).fetchall()
            if not rows:
                raise ValueError(f"import table {target} does not exist in the target")
            self._import_cols[target] = [r[0] for r in rows]
        return self._import_cols[target]


def _assign(cols: tuple[str, ...], sep: str) -> Any:
    from psycopg import sql

    return sql.SQL(sep).join(
        sql.SQL("{} = {}").format(sql.Identifier(pg_name(c)), sql.Placeholder()) for c in cols
    )


def _values(entries: Any) -> dict[str, Any]:
    """A value map as ``{COLUMN: python value}`` (from a dict, or Arrow's (key, struct) pairs)."""
    if not entries:
        return {}
    if isinstance(entries, dict):
        return entries
    field = _FIELD
    return {key: struct[field[struct["type"]]] for key, struct in entries}


_FIELD = {name: t.field for name, t in lcr.LOGICAL_TYPES.items()}
