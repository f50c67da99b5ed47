"""Installing the log trigger on PostgreSQL source tables (``changeflow mcq install-trigger``).

An ordinary ``INSERT``, ``UPDATE`` or ``DELETE`` on the source table then logs a change
(``I``, ``C``, ``D``) for the configured (table, subtype), with keys read from the
row's columns, as the seed's Figure 8 trigger does. Updates that change none of the
watched columns (all columns by default) log nothing, which keeps "housekeeping"
updates out of the queue without a more complex trigger.

Two modes, chosen by where the MCQ lives:

* **direct**: the source database *is* the MCQ's state store. The trigger
  (``mcq/sql/pg_trigger.sql``) fans the change out to the interested listeners inside
  the source transaction: the entries commit with the change, or not at all, and are
  visible to ``get_changes`` at once.
* **outbox**: the state store is elsewhere (SQLite, another server). The trigger
  (``mcq/sql/pg_outbox.sql``) appends to a change log in the source database,
  ``changeflow_mcq.changeflow_mcq_log``, and ``changeflow mcq pump`` moves it into the
  MCQ (:mod:`changeflow.mcq.pump`). A source transaction never waits for the MCQ store
  and never fails because it is down; the cost is the pump's delay.

``auto`` picks direct when the source and the store are the same database (probed by
writing a marker through one connection and reading it through the other).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy import delete, select, text

from changeflow.mcq.model import McqError, UnknownTableError
from changeflow.mcq.registry import label, pair
from changeflow.state import schema
from changeflow.state.schema_mcq import tables

if TYPE_CHECKING:
    import psycopg

    from changeflow.state import StateStore

Mode = Literal["auto", "direct", "outbox"]
OUTBOX_SCHEMA = "changeflow_mcq"
FUNCTIONS = ("changeflow_mcq_log", "changeflow_mcq_capture")
_INTEGER_TYPES = {"smallint", "integer", "bigint", "numeric"}


@dataclass(frozen=True)
class TriggerSpec:
    """What a trigger logs: the pair, and the source columns its keys come from.

    Attributes:
        table: the source table (``schema.table`` or ``table``).
        tname, subtype: the registered pair the changes are logged under.
        person_id, pkey_string, pkey_number, aux_string: source column names (or None).
        rowid: the columns that identify the row (default: its primary key).
        columns: log updates only when one of these columns changes (default: any).
        events: which of INSERT, UPDATE, DELETE log.
        strict: in direct mode, an unregistered pair fails the source statement
            (else a warning, and the change is dropped).
    """

    table: str
    tname: str
    subtype: str = ""
    person_id: str | None = None
    pkey_string: str | None = None
    pkey_number: str | None = None
    aux_string: str | None = None
    rowid: list[str] | None = None
    columns: list[str] | None = None
    events: tuple[str, ...] = ("INSERT", "UPDATE", "DELETE")
    strict: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The trigger's name: ``mcq_<tname>_<subtype>`` (lower case, at most 59 chars)."""
        base = f"mcq_{self.tname}_{self.subtype}".lower().rstrip("_")
        return re.sub(r"[^a-z0-9_]", "_", base)[:59]


def _sql_text(name: str) -> str:
    return resources.files("changeflow.mcq").joinpath("sql", name).read_text()


def _connect(url: str) -> psycopg.Connection[Any]:
    from changeflow.pgconn import connect

    return connect(url, application_name="changeflow-mcq-install", attempts=2,
                   autocommit=False)


def same_database(store: StateStore, source_url: str) -> str | None:
    """The MCQ tables' schema when ``source_url`` is the store's own database, else None."""
    if store.dialect != "postgresql":
        return None
    marker = f"mcq:probe:{uuid.uuid4().hex}"
    c = schema.counters
    with store.begin() as conn:
        mcq_schema = conn.execute(text("SELECT current_schema()")).scalar_one()
        conn.execute(c.insert().values(name=marker, value=1))
    try:
        with _connect(source_url) as pg:
            from psycopg import sql

            found = pg.execute(sql.SQL("SELECT to_regclass({}) IS NOT NULL").format(
                sql.Literal(f"{mcq_schema}.cf_counters"))).fetchone()
            if not found or not found[0]:
                return None
            row = pg.execute(sql.SQL("SELECT 1 FROM {}.cf_counters WHERE name = %s").format(
                sql.Identifier(mcq_schema)), (marker,)).fetchone()
            return str(mcq_schema) if row else None
    finally:
        with store.begin() as conn:
            conn.execute(delete(c).where(c.c.name == marker))


def _table_info(pg: psycopg.Connection[Any], table: str) -> tuple[str, str, dict[str, str],
                                                                   list[str]]:
    row = pg.execute("SELECT c.oid, n.nspname, c.relname FROM pg_class c JOIN pg_namespace n "
                     "ON n.oid = c.relnamespace WHERE c.oid = to_regclass(%s)",
                     (table,)).fetchone()
    if row is None:
        raise McqError(f"install-trigger: source table {table!r} does not exist")
    oid, nsp, rel = row
    cols = dict(pg.execute("SELECT attname, format_type(atttypid, NULL) FROM pg_attribute "
                           "WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped",
                           (oid,)).fetchall())
    pk = [r[0] for r in pg.execute(
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
        "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s AND i.indisprimary "
        "ORDER BY array_position(i.indkey, a.attnum)", (oid,)).fetchall()]
    return nsp, rel, cols, pk


def _check_columns(spec: TriggerSpec, where: str, cols: dict[str, str], pk: list[str]) -> list[str]:
    for key in ("person_id", "pkey_string", "pkey_number", "aux_string"):
        col = getattr(spec, key)
        if col is None:
            continue
        if col not in cols:
            raise McqError(f"install-trigger: {key} column {col!r} is not a column of {where} "
                           f"(columns: {', '.join(sorted(cols))})")
        if key in ("person_id", "pkey_number") and cols[col] not in _INTEGER_TYPES:
            raise McqError(f"install-trigger: {key} must be a whole number, but {where}.{col} "
                           f"is {cols[col]}; map it to pkey_string or aux_string instead")
    rowid = spec.rowid or pk
    for col in [*rowid, *(spec.columns or [])]:
        if col not in cols:
            raise McqError(f"install-trigger: column {col!r} is not a column of {where}")
    if not any((spec.person_id, spec.pkey_string, spec.pkey_number, rowid)):
        raise McqError(f"install-trigger: {where} has no primary key and no key column was "
                       "given; a change must say which object changed")
    bad = set(spec.events) - {"INSERT", "UPDATE", "DELETE"}
    if bad or not spec.events:
        raise McqError(f"install-trigger: events must be among INSERT, UPDATE, DELETE: {bad}")
    return rowid


def _create_triggers(pg: psycopg.Connection[Any], spec: TriggerSpec, nsp: str, rel: str,
                     function: Any, rowid: list[str]) -> list[str]:
    from psycopg import sql

    args = [spec.tname, spec.subtype, spec.person_id or "", spec.pkey_string or "",
            spec.pkey_number or "", spec.aux_string or "", ",".join(rowid),
            "strict" if spec.strict else "warn"]
    call = sql.SQL("{}({})").format(function, sql.SQL(", ").join(sql.Literal(a) for a in args))
    target = sql.Identifier(nsp, rel)
    made = []
    plain = [e for e in spec.events if e != "UPDATE"]
    for suffix in ("", "_upd"):
        pg.execute(sql.SQL("DROP TRIGGER IF EXISTS {} ON {}").format(
            sql.Identifier(spec.name + suffix), target))
    if plain:
        pg.execute(sql.SQL("CREATE TRIGGER {} AFTER {} ON {} FOR EACH ROW EXECUTE FUNCTION {}")
                   .format(sql.Identifier(spec.name), sql.SQL(" OR ").join(map(sql.SQL, plain)),
                           target, call))
        made.append(spec.name)
    if "UPDATE" in spec.events:
        of: Any
        if spec.columns:
            of = sql.SQL(" OF ") + sql.SQL(", ").join(map(sql.Identifier, spec.columns))
            old = sql.SQL(", ").join(sql.SQL("OLD.{}").format(sql.Identifier(c))
                                     for c in spec.columns)
            new = sql.SQL(", ").join(sql.SQL("NEW.{}").format(sql.Identifier(c))
                                     for c in spec.columns)
            when: Any = sql.SQL("(ROW({}) IS DISTINCT FROM ROW({}))").format(old, new)
        else:
            of = sql.Composed([])
            when = sql.SQL("(OLD.* IS DISTINCT FROM NEW.*)")
        pg.execute(sql.SQL("CREATE TRIGGER {} AFTER UPDATE{} ON {} FOR EACH ROW WHEN {} "
                           "EXECUTE FUNCTION {}").format(sql.Identifier(spec.name + "_upd"), of,
                                                         target, when, call))
        made.append(spec.name + "_upd")
    return made


def _require_pair(store: StateStore, spec: TriggerSpec) -> TriggerSpec:
    t, s = pair(spec.tname, spec.subtype)
    with store.read() as conn:
        known = conn.execute(select(tables.c.tname).where(tables.c.tname == t,
                                                          tables.c.subtype == s)).first()
    if known is None:
        raise UnknownTableError(f"install-trigger: table {label(t, s)!r} is not registered in "
                                "the MCQ (changeflow mcq table add); nothing was installed")
    return TriggerSpec(**{**spec.__dict__, "tname": t, "subtype": s})


def install(store: StateStore, source_url: str, spec: TriggerSpec, *, mode: Mode = "auto",
            outbox_schema: str = OUTBOX_SCHEMA) -> dict[str, Any]:
    """Install (or replace) the log trigger of one (table, subtype) on a source table.

    Everything is created in one source transaction: on any error nothing is installed.

    Returns:
        the mode, the trigger names, the function and the row-id columns.

    Raises:
        UnknownTableError: the pair is not registered in the MCQ.
        McqError: the table or a column is missing, or ``direct`` was asked for a source
            that is not the store's database.
    """
    from psycopg import sql

    spec = _require_pair(store, spec)
    mcq_schema = same_database(store, source_url) if mode != "outbox" else None
    if mode == "direct" and mcq_schema is None:
        raise McqError("install-trigger: mode direct needs the source to be the MCQ's own "
                       "PostgreSQL database (the state store); use mode outbox and run "
                       "`changeflow mcq pump`")
    use = "direct" if mcq_schema is not None else "outbox"
    with _connect(source_url) as pg:
        nsp, rel, cols, pk = _table_info(pg, spec.table)
        rowid = _check_columns(spec, f"{nsp}.{rel}", cols, pk)
        if use == "direct":
            schema_id = sql.Identifier(str(mcq_schema)).as_string(pg)
            pg.execute(_sql_text("pg_trigger.sql").replace("@MCQ@", schema_id).encode())
            function = sql.Identifier(str(mcq_schema), "changeflow_mcq_log")
        else:
            schema_id = sql.Identifier(outbox_schema).as_string(pg)
            pg.execute(_sql_text("pg_outbox.sql").replace("@OUTBOX@", schema_id).encode())
            function = sql.Identifier(outbox_schema, "changeflow_mcq_capture")
        made = _create_triggers(pg, spec, nsp, rel, function, rowid)
        pg.commit()
    return {"mode": use, "table": f"{nsp}.{rel}", "pair": label(spec.tname, spec.subtype),
            "triggers": made, "function": function.as_string(None), "rowid": rowid,
            "columns": spec.columns or "all"}


def installed(source_url: str) -> list[dict[str, Any]]:
    """The MCQ triggers of a source database, with their arguments."""
    with _connect(source_url) as pg:
        rows = pg.execute(
            "SELECT t.tgname, n.nspname || '.' || c.relname, p.proname, t.tgargs, t.tgenabled "
            "FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "JOIN pg_proc p ON p.oid = t.tgfoid WHERE p.proname = ANY(%s) AND NOT t.tgisinternal "
            "ORDER BY 2, 1", (list(FUNCTIONS),)).fetchall()
    out = []
    for name, table, fn, args, enabled in rows:
        a = bytes(args).split(b"\x00")[:-1] if args else []
        vals = [x.decode() for x in a] + [""] * 8
        out.append({"trigger": name, "table": table,
                    "mode": "direct" if fn == "changeflow_mcq_log" else "outbox",
                    "pair": label(vals[0], vals[1]), "person_id": vals[2] or None,
                    "pkey_string": vals[3] or None, "pkey_number": vals[4] or None,
                    "aux_string": vals[5] or None, "rowid": vals[6], "enabled": enabled != "D"})
    return out


def uninstall(source_url: str, table: str, tname: str, subtype: str | None = None) -> list[str]:
    """Drop the MCQ triggers of one (table, subtype) from a source table.

    Raises:
        McqError: the table has no such trigger.
    """
    from psycopg import sql

    t, s = pair(tname, subtype)
    name = TriggerSpec(table=table, tname=t, subtype=s).name
    dropped = []
    with _connect(source_url) as pg:
        nsp, rel, _cols, _pk = _table_info(pg, table)
        for trig in (name, name + "_upd"):
            exists = pg.execute("SELECT 1 FROM pg_trigger WHERE tgname = %s AND tgrelid = "
                                "to_regclass(%s)", (trig, f'"{nsp}"."{rel}"')).fetchone()
            if exists:
                pg.execute(sql.SQL("DROP TRIGGER {} ON {}").format(
                    sql.Identifier(trig), sql.Identifier(nsp, rel)))
                dropped.append(trig)
        pg.commit()
    if not dropped:
        raise McqError(f"uninstall-trigger: {table} has no MCQ trigger for {label(t, s)!r}")
    return dropped
