"""SQL for applying LCRs to PostgreSQL: one statement per LCR, composed safely.

Statements are composed with :mod:`psycopg.sql` (identifiers quoted, values bound as
parameters) and cached by shape (table, command, columns), so the server prepares
each shape once.

With conflict detection on (the default), UPDATE and DELETE match the key *and* the
compared old values (``IS NOT DISTINCT FROM``) and go through
``changeflow.expect_rows``, which raises when no row matched; an INSERT of an existing
key raises a unique violation. A conflict therefore fails the statement on the
server, which keeps pipelined execution safe; the apply then replays the
transaction statement by statement to resolve it (:mod:`changeflow.apply.postgres`).
With detection off, INSERT and UPDATE are upserts (``INSERT ... ON CONFLICT DO
UPDATE``) and DELETE deletes what is there.

DDL LCRs (:mod:`changeflow.apply.ddl`) are re-rendered with quoted identifiers, the
target schema mapped and the column types translated.

Names: LCR owners, tables and columns are canonical (upper case for unquoted
names); an all-upper-case name is folded back to lower case for PostgreSQL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from changeflow import lcr
from changeflow.apply import ddl as ddl_parser

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
CREATE TABLE IF NOT EXISTS changeflow.applied_txns (
    apply_name text NOT NULL,
    source_database text NOT NULL,
    commit_scn bigint NOT NULL,
    transaction_id text NOT NULL,
    commit_time timestamptz,
    outcome text NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (apply_name, source_database, commit_scn, transaction_id)
);
CREATE INDEX IF NOT EXISTS applied_txns_time
    ON changeflow.applied_txns (apply_name, source_database, commit_time);
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

#: One done transaction (applied, or set aside in the error queue), exactly.
TXN_SQL = (
    "INSERT INTO changeflow.applied_txns AS a (apply_name, source_database, commit_scn, "
    "transaction_id, commit_time, outcome) VALUES (%s, %s, %s, %s, %s, %s) "
    "ON CONFLICT (apply_name, source_database, commit_scn, transaction_id) DO UPDATE "
    "SET outcome = excluded.outcome, recorded_at = now()"
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
        "to_regclass('changeflow.applied_txns') IS NOT NULL AND "
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
    """Turns LCRs (as dicts from Arrow) into :class:`Statement` s.

    Args:
        conn: the target connection (for quoting and for import-table columns).
        schema_map: LCR owner -> target schema.
        import_tables: ``OWNER.NAME`` -> ``schema.import_table``.
        detect: conflict detection (see the module docstring).
        compare: ``owner.table`` -> the columns whose old values are compared; a table
            not listed compares every old value its LCRs carry.
    """

    def __init__(
        self, conn: psycopg.Connection[Any], schema_map: dict[str, str],
        import_tables: dict[str, str], *, detect: bool = True,
        compare: dict[str, list[str]] | None = None,
    ):
        self.conn = conn
        self.schema_map = {k.upper(): v for k, v in schema_map.items()}
        self.import_tables = {k.upper(): v for k, v in import_tables.items()}
        self.detect = detect
        self.compare = {k.lower(): [c.upper() for c in v] for k, v in (compare or {}).items()}
        self._sql: dict[tuple[Any, ...], str] = {}
        self._import_cols: dict[str, list[str]] = {}
        self._commands: dict[tuple[str, str], lcr.CommandType] = {}

    def schema_of(self, owner: str) -> str:
        """The target schema of an LCR owner."""
        return self.schema_map.get(owner.upper(), pg_name(owner))

    def _table(self, owner: str, name: str) -> Any:
        from psycopg import sql

        return sql.Identifier(self.schema_of(owner), pg_name(name))

    def _text(self, key: tuple[Any, ...], build: Any) -> str:
        text = self._sql.get(key)
        if text is None:
            text = build().as_string(self.conn)
            self._sql[key] = text
        return text

    def statement(self, m: dict[str, Any]) -> Statement:
        """The statement applying one LCR.

        Raises:
            UnknownCommandTypeError: a command type the contract does not know.
            DdlError: a DDL statement that is not executed.
        """
        cmd = self._commands.get((m["command_type"], m["kind"]))
        if cmd is None:
            cmd = lcr.CommandType.parse(m["command_type"], kind=m["kind"])
            self._commands[(m["command_type"], m["kind"])] = cmd
        owner, name = m["object_owner"], m["object_name"]
        if m["kind"] == "DDL":
            return self.ddl(m)
        target = self.import_tables.get(f"{owner}.{name}".upper())
        if target is not None:
            return self._import(target, m)
        new = _values(m["new_values"])
        old = _values(m["old_values"])
        keys = list(m["key_columns"] or old or new)
        if cmd is lcr.CommandType.INSERT:
            if self.detect:
                return self._insert(owner, name, new, m["msg_id"])
            return self.upsert(owner, name, new, keys, m["msg_id"])
        where = [(k, old[k] if k in old else new.get(k)) for k in keys]
        checked = self.compared(owner, name, old, keys) if self.detect else []
        if cmd is lcr.CommandType.UPDATE:
            moved = any(k in new and k in old and new[k] != old[k] for k in keys)
            if not self.detect and not moved:
                return self.upsert(owner, name, {**dict(where), **new}, keys, m["msg_id"])
            return self._update(owner, name, new, where + checked, m["msg_id"],
                                expect=self.detect)
        return self._delete(owner, name, where + checked, m["msg_id"], expect=self.detect)

    def compared(self, owner: str, name: str, old: dict[str, Any], keys: list[str]
                  ) -> list[tuple[str, Any]]:
        """(column, old value) pairs an UPDATE/DELETE must match besides the key."""
        wanted = self.compare.get(f"{owner}.{name}".lower())
        cols = [c for c in old if c not in keys and (wanted is None or c in wanted)]
        return [(f"~{c}", old[c]) for c in cols]

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

    def upsert(self, owner: str, name: str, values: dict[str, Any], keys: list[str],
               msg_id: str) -> Statement:
        """``INSERT ... ON CONFLICT (key) DO UPDATE`` of the given columns."""
        from psycopg import sql

        cols, key = tuple(values), tuple(keys)
        rest = [c for c in cols if c not in key]

        def build() -> Any:
            action = sql.SQL("DO NOTHING") if not rest else sql.SQL("DO UPDATE SET {}").format(
                sql.SQL(", ").join(sql.SQL("{0} = excluded.{0}").format(
                    sql.Identifier(pg_name(c))) for c in rest))
            return sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT ({}) {}").format(
                self._table(owner, name),
                sql.SQL(", ").join(sql.Identifier(pg_name(c)) for c in cols),
                sql.SQL(", ").join(sql.Placeholder() * len(cols)),
                sql.SQL(", ").join(sql.Identifier(pg_name(c)) for c in key), action)

        return Statement(self._text(("UP", owner, name, cols, key), build),
                         tuple(values.values()), msg_id)

    def _update(self, owner: str, name: str, new: dict[str, Any],
                where: list[tuple[str, Any]], msg_id: str, *, expect: bool = True
                ) -> Statement:
        from psycopg import sql

        cols, keys = tuple(new), tuple(k for k, _ in where)
        what = f"UPDATE of {owner}.{name}"

        def build() -> Any:
            body = sql.SQL("UPDATE {} SET {} WHERE {}").format(
                self._table(owner, name), _assign(cols, ", "), _match(keys))
            if not expect:
                return body
            return sql.SQL("WITH u AS ({} RETURNING 1) "
                           "SELECT changeflow.expect_rows((SELECT count(*) FROM u), {})"
                           ).format(body, sql.Literal(what))

        params = tuple(new.values()) + tuple(v for _, v in where)
        return Statement(self._text(("U", owner, name, cols, keys, expect), build), params,
                         msg_id)

    def _delete(self, owner: str, name: str, where: list[tuple[str, Any]],
                msg_id: str, *, expect: bool = True) -> Statement:
        from psycopg import sql

        keys = tuple(k for k, _ in where)
        what = f"DELETE of {owner}.{name}"

        def build() -> Any:
            body = sql.SQL("DELETE FROM {} WHERE {}").format(self._table(owner, name),
                                                            _match(keys))
            if not expect:
                return body
            return sql.SQL("WITH d AS ({} RETURNING 1) "
                           "SELECT changeflow.expect_rows((SELECT count(*) FROM d), {})"
                           ).format(body, sql.Literal(what))

        return Statement(self._text(("D", owner, name, keys, expect), build),
                         tuple(v for _, v in where), msg_id)

    def update_columns(self, owner: str, name: str, values: dict[str, Any],
                       keys: list[tuple[str, Any]], msg_id: str) -> Statement:
        """A plain UPDATE of some columns by key (a resolved conflict)."""
        return self._update(owner, name, values, keys, msg_id, expect=False)

    def delete_by_key(self, owner: str, name: str, keys: list[tuple[str, Any]],
                      msg_id: str) -> Statement:
        """A plain DELETE by key (a resolved conflict)."""
        return self._delete(owner, name, keys, msg_id, expect=False)

    def current_row(self, owner: str, name: str, keys: list[tuple[str, Any]]
                    ) -> dict[str, Any] | None:
        """The target row of a key (locked), as ``{COLUMN: value}``, or None."""
        from psycopg import sql

        text = sql.SQL("SELECT * FROM {} WHERE {} FOR UPDATE").format(
            self._table(owner, name), _match(tuple(k for k, _ in keys))).as_string(self.conn)
        cur = self.conn.execute(text, tuple(v for _, v in keys))
        row = cur.fetchone()
        if row is None:
            return None
        names = [lcr.canonical_identifier(d.name) for d in (cur.description or [])]
        return dict(zip(names, row, strict=True))

    def ddl(self, m: dict[str, Any]) -> Statement:
        """A DDL LCR as the statement PostgreSQL runs (see :mod:`changeflow.apply.ddl`)."""
        from psycopg import sql

        op = ddl_parser.parse(m.get("ddl_text") or "")
        owner = op.owner or m.get("base_table_owner") or m.get("object_owner") or "PUBLIC"
        table = self._table(owner, op.table)
        self._import_cols.clear()
        if op.op == "create_table":
            parts = [sql.SQL("{} {}{}").format(
                sql.Identifier(c.name), sql.SQL(ddl_parser.logical_type(c.sql_type)[1]),
                sql.SQL(" NOT NULL" if c.not_null else "")) for c in op.columns]
            if op.primary_key:
                parts.append(sql.SQL("PRIMARY KEY ({})").format(
                    sql.SQL(", ").join(map(sql.Identifier, op.primary_key))))
            text = sql.SQL("CREATE TABLE {} ({})").format(table, sql.SQL(", ").join(parts))
        elif op.op == "drop_table":
            text = sql.SQL("DROP TABLE {}{}").format(
                sql.SQL("IF EXISTS " if op.if_exists else ""), table)
        elif op.op == "truncate":
            text = sql.SQL("TRUNCATE {}").format(table)
        elif op.op == "add_column":
            text = sql.SQL("ALTER TABLE {} {}").format(table, sql.SQL(", ").join(
                sql.SQL("ADD COLUMN {}{} {}").format(
                    sql.SQL("IF NOT EXISTS " if op.if_exists else ""), sql.Identifier(c.name),
                    sql.SQL(ddl_parser.logical_type(c.sql_type)[1])) for c in op.columns))
        elif op.op == "drop_column":
            text = sql.SQL("ALTER TABLE {} DROP COLUMN {}{}").format(
                table, sql.SQL("IF EXISTS " if op.if_exists else ""),
                sql.Identifier(op.names[0]))
        else:
            text = sql.SQL("ALTER TABLE {} RENAME COLUMN {} TO {}").format(
                table, sql.Identifier(op.names[0]), sql.Identifier(op.names[1]))
        return Statement(text.as_string(self.conn), (), m["msg_id"])

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


def _match(cols: tuple[str, ...]) -> Any:
    """``key = %s AND ... AND col IS NOT DISTINCT FROM %s`` (compared columns start with ~)."""
    from psycopg import sql

    parts = []
    for c in cols:
        if c.startswith("~"):
            parts.append(sql.SQL("{} IS NOT DISTINCT FROM {}").format(
                sql.Identifier(pg_name(c[1:])), sql.Placeholder()))
        else:
            parts.append(sql.SQL("{} = {}").format(sql.Identifier(pg_name(c)),
                                                   sql.Placeholder()))
    return sql.SQL(" AND ").join(parts)


def _values(entries: Any) -> dict[str, Any]:
    """A value map as ``{COLUMN: python value}`` (from a dict, or Arrow's (key, struct) pairs)."""
    if not entries:
        return {}
    if isinstance(entries, dict):
        return entries
    field = _FIELD
    return {key: struct[field[struct["type"]]] for key, struct in entries}


_FIELD = {name: t.field for name, t in lcr.LOGICAL_TYPES.items()}
