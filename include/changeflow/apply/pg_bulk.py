"""Set-based apply of a group of source transactions to PostgreSQL (see :mod:`.postgres`).

A group of whole source transactions (up to ``group_changes`` changes) is first
*netted* per row key, in commit order, as the statements would have run one by one:
an INSERT then UPDATEs of the same key is one INSERT of the final values; a chain of
UPDATEs is one UPDATE of the merged columns that checks the *first* old values; an
UPDATE then a DELETE is one DELETE checking the first old values. Each later change
of a key is checked against what the group's earlier changes left (its compared old
values must match), so a conflict inside the group is found without the database.

The net changes then run as a few set-based statements per table, with the values
passed as arrays (``unnest``): ``DELETE ... USING``, ``UPDATE ... FROM`` and
``INSERT ... SELECT``, each matching the key *and* the compared old values
(``IS NOT DISTINCT FROM``), and the number of rows each statement touched is checked
(keys netted away, inserted then deleted, are checked absent). The transactions'
done records go in with one statement, in the same target transaction.

Anything the netting cannot prove equal to the one-by-one apply raises
:class:`NotBulk` and the group is applied statement by statement instead (the path
that resolves conflicts and isolates a failing transaction): DDL, DML, DDL or
precommit handlers, import tables, conflict detection off, a key that changes, a
conflict in the group or in the target, a table with triggers, rules or foreign keys
(the order of statements across tables would matter), or a key that is not a unique
index of the table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from changeflow.apply.pg_statements import StatementBuilder, pg_name

if TYPE_CHECKING:
    import psycopg

    from changeflow.apply.pg_txns import SourceTxn

_DML = {"INSERT", "UPDATE", "DELETE"}

#: Done records of a group of transactions, in one statement.
TXNS_SQL = (
    "INSERT INTO changeflow.applied_txns AS a (apply_name, source_database, commit_scn, "
    "transaction_id, commit_time, outcome) SELECT %s, d, s, t, c, 'applied' "
    "FROM unnest(%b::text[], %b::bigint[], %b::text[], %b::timestamptz[]) AS x(d, s, t, c) "
    "ON CONFLICT (apply_name, source_database, commit_scn, transaction_id) DO UPDATE "
    "SET outcome = excluded.outcome, recorded_at = now()"
)


class NotBulk(Exception):
    """The group cannot be applied set-based; the message says why (for the log)."""


@dataclass
class _Row:
    """What a group does to one key: checked against the target, and left behind."""

    base: dict[str, Any] | None  # compared old values (None: the key was absent)
    row: dict[str, Any] | None  # the values the group left (None: no row)
    inserted: bool = False  # ``row`` comes from an INSERT of the group
    cols: dict[str, Any] = field(default_factory=dict)  # columns UPDATEs set


@dataclass
class _Table:
    owner: str
    name: str
    keys: tuple[str, ...]
    rows: dict[tuple[Any, ...], _Row] = field(default_factory=dict)


@dataclass
class _TableInfo:
    ident: Any  # sql.Identifier of the table
    types: dict[str, str]  # PostgreSQL column name -> type (format_type)
    unique: list[frozenset[str]]  # column sets of its immediate unique indexes


def _same(a: Any, b: Any) -> bool:
    """``IS NOT DISTINCT FROM`` for Python values."""
    return a is None and b is None or a is not None and b is not None and a == b


def _step(state: _Row | None, cmd: str, where: dict[str, Any], checked: dict[str, Any],
          new: dict[str, Any]) -> _Row:
    """The key's state after one more change (raises NotBulk on a conflict)."""
    if state is None:
        if cmd == "INSERT":
            return _Row(None, dict(new), inserted=True)
        if cmd == "UPDATE":
            return _Row(dict(checked), {**where, **new}, cols=dict(new))
        return _Row(dict(checked), None)
    if cmd == "INSERT":
        if state.row is not None:
            raise NotBulk("an INSERT of a key the group already has")
        state.row, state.inserted, state.cols = dict(new), True, {}
        return state
    if state.row is None:
        raise NotBulk(f"an {cmd} of a key the group deleted")
    for c, v in checked.items():
        if c in state.row:
            if not _same(state.row[c], v):
                raise NotBulk(f"an {cmd} whose old value of {c} is not the group's")
        elif state.inserted or state.base is None:
            raise NotBulk(f"an {cmd} comparing {c}, which the group's INSERT did not set")
        elif c in state.base and not _same(state.base[c], v):
            raise NotBulk(f"two changes expecting different old values of {c}")
        else:
            state.base[c] = v
    if cmd == "UPDATE":
        state.row.update(new)
        if not state.inserted:
            state.cols.update(new)
    else:
        state.row, state.inserted, state.cols = None, False, {}
    return state


def net(builder: StatementBuilder, txns: list[SourceTxn]) -> dict[tuple[str, str], _Table]:
    """The group's changes netted per table and key, in commit order.

    Raises:
        NotBulk: the group has something only the one-by-one apply handles.
    """
    if not builder.detect:
        raise NotBulk("conflict detection is off")
    tables: dict[tuple[str, str], _Table] = {}
    compared: dict[tuple[Any, ...], list[str]] = {}
    # Key-column lists are shared between the LCRs of a table (pg_txns.repeated):
    # their tuples are made once per list object (alive for the whole loop).
    key_tuples: dict[int, tuple[str, ...]] = {}
    empty: dict[str, Any] = {}  # never changed: _step copies what it keeps
    for txn in txns:
        for kind, cmd, owner, name, key_columns, new, old in txn.changes():
            if kind != "ROW" or cmd not in _DML:
                raise NotBulk(f"a {kind} {cmd} LCR")
            new, old = new or empty, old or empty
            if key_columns:
                keys = key_tuples.get(id(key_columns))
                if keys is None:
                    keys = key_tuples[id(key_columns)] = tuple(key_columns)
            else:
                keys = tuple(old or new)
            where = {k: old[k] if k in old else new.get(k) for k in keys}
            if cmd == "UPDATE" and any(k in new and not _same(new[k], where[k]) for k in keys):
                raise NotBulk("an UPDATE of a key column")
            table = tables.get((owner, name))
            if table is None:
                if f"{owner}.{name}".upper() in builder.import_tables:
                    raise NotBulk("an import table")
                table = tables[(owner, name)] = _Table(owner, name, keys)
            elif table.keys != keys:
                raise NotBulk(f"changes of {owner}.{name} with different key columns")
            shape = (owner, name, *old)
            cols = compared.get(shape)
            if cols is None:
                cols = compared[shape] = [c[1:] for c, _ in
                                          builder.compared(owner, name, old, list(keys))]
            checked = {c: old[c] for c in cols} if cols else {}
            key = tuple(where.values())
            rows = table.rows
            rows[key] = _step(rows.get(key), cmd, where, checked, new)
    return tables


class BulkApplier:
    """Runs netted groups through one connection (table facts cached per table)."""

    def __init__(self, conn: psycopg.Connection[Any], builder: StatementBuilder):
        self.conn, self.builder = conn, builder
        self._info: dict[tuple[str, str], _TableInfo | None] = {}
        Int8Array.register(conn)

    def apply(self, tables: dict[tuple[str, str], _Table], txns: list[SourceTxn],
              apply_name: str) -> None:
        """Run the net changes and the done records (inside the caller's transaction).

        Raises:
            NotBulk: a table that is not eligible, or a check that failed (a conflict,
                or a row the target does not have as the changes expect).
            psycopg.Error: from the statements (the caller falls back, or re-raises a
                lost connection).
        """
        infos = {k: self._eligible(t) for k, t in tables.items()}
        for k, t in tables.items():
            self._table(t, infos[k])
        self.record(txns, apply_name)

    def record(self, txns: list[SourceTxn], apply_name: str) -> None:
        """The group's done records, in one statement (inside the caller's transaction)."""
        self.conn.execute(TXNS_SQL, [apply_name, *_arrays(
            [(t.database, t.commit_scn, t.transaction_id, t.commit_time) for t in txns])])

    # -- tables --------------------------------------------------------------------------
    def eligible(self, t: Any) -> _TableInfo:
        """The table's facts, if the set-based statements may run on it.

        Raises:
            NotBulk: missing, with triggers, rules or foreign keys, or keyed otherwise
                than by one of its unique indexes.
        """
        return self._eligible(t)

    def _eligible(self, t: _Table) -> _TableInfo:
        info = self._lookup(t.owner, t.name)
        if info is None:
            raise NotBulk(f"table {t.owner}.{t.name} is missing or has triggers, rules or "
                          "foreign keys")
        keys = frozenset(pg_name(k) for k in t.keys)
        if keys not in info.unique:
            raise NotBulk(f"the key of {t.owner}.{t.name} is not a unique index")
        return info

    def _lookup(self, owner: str, name: str) -> _TableInfo | None:
        if (owner, name) in self._info:
            return self._info[(owner, name)]
        from psycopg import sql

        schema, table = self.builder.schema_of(owner), pg_name(name)
        row = self.conn.execute("""
            SELECT c.oid,
                   c.relkind IN ('r', 'p') AND NOT c.relhasrules
                   AND NOT EXISTS (SELECT 1 FROM pg_trigger g
                                    WHERE g.tgrelid = c.oid AND NOT g.tgisinternal)
                   AND NOT EXISTS (SELECT 1 FROM pg_constraint f WHERE f.contype = 'f'
                                      AND c.oid IN (f.conrelid, f.confrelid))
              FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = %s AND c.relname = %s""", (schema, table)).fetchone()
        info = None
        if row is not None and row[1]:
            cols = self.conn.execute("""
                SELECT a.attname::text, format_type(a.atttypid, a.atttypmod)
                  FROM pg_attribute a JOIN pg_type y ON y.oid = a.atttypid
                 WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
                   AND y.typcategory <> 'A'""", (row[0],)).fetchall()
            unique = self.conn.execute("""
                SELECT array_agg(a.attname::text) FROM pg_index i
                  JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
                 WHERE i.indrelid = %s AND i.indisunique AND i.indimmediate
                   AND i.indpred IS NULL AND i.indexprs IS NULL
                 GROUP BY i.indexrelid""", (row[0],)).fetchall()
            info = _TableInfo(sql.Identifier(schema, table), dict(cols),
                              [frozenset(u[0]) for u in unique])
        self._info[(owner, name)] = info
        return info

    def forget(self) -> None:
        """Drop the cached table facts (after DDL)."""
        self._info.clear()

    # -- statements ----------------------------------------------------------------------
    def _table(self, t: _Table, info: _TableInfo) -> None:
        deletes: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
        updates: dict[tuple[tuple[str, ...], tuple[str, ...]], list[tuple[Any, ...]]] = {}
        inserts: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
        absent: list[tuple[Any, ...]] = []
        for key, r in t.rows.items():
            if r.base is None and r.row is None:
                absent.append(key)
                continue
            if r.base is not None and (r.row is None or r.inserted):
                deletes.setdefault(tuple(r.base), []).append(key + tuple(r.base.values()))
            elif r.base is not None and r.row is not None:
                shape = (tuple(r.cols), tuple(r.base))
                updates.setdefault(shape, []).append(
                    tuple(r.cols.values()) + key + tuple(r.base.values()))
            if r.row is not None and r.inserted:
                inserts.setdefault(tuple(r.row), []).append(tuple(r.row.values()))
        if absent:
            self._check_absent(t, info, absent)
        for checked, rows in deletes.items():
            self._run(t, info, "delete", (), checked, rows)
        for (cols, checked), rows in updates.items():
            self._run(t, info, "update", cols, checked, rows)
        for cols, rows in inserts.items():
            self._run(t, info, "insert", cols, (), rows)

    def _source(self, info: _TableInfo, columns: list[str]) -> Any:
        """``unnest(%s::type[], ...) AS d(c0, c1, ...)`` for the given LCR columns."""
        from psycopg import sql

        types = []
        for c in columns:
            pg_type = info.types.get(pg_name(c))
            if pg_type is None:
                raise NotBulk(f"column {c} is missing or an array")
            types.append(sql.SQL("%b::{}[]").format(sql.SQL(pg_type)))
        return sql.SQL("unnest({}) AS d({})").format(
            sql.SQL(", ").join(types),
            sql.SQL(", ").join(sql.Identifier(f"c{i}") for i in range(len(columns))))

    def _run(self, t: _Table, info: _TableInfo, op: str, cols: tuple[str, ...],
             checked: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
        self.run_columns(t, info, op, cols, checked, _arrays(rows), len(rows))

    def run_columns(self, t: Any, info: _TableInfo, op: str, cols: tuple[str, ...],
                    checked: tuple[str, ...], params: list[Any], n_rows: int) -> None:
        """One set-based statement of ``n_rows`` rows, given as one array per column
        (:func:`pack`): ``cols`` then, but for an INSERT, the key and ``checked``.

        Raises:
            NotBulk: the statement touched another number of rows (a conflict).
        """
        from psycopg import sql

        ident = info.ident
        columns = list(cols) if op == "insert" else [*cols, *t.keys, *checked]
        src = self._source(info, columns)
        n = len(cols)
        match = _match(t.keys, checked, n)
        if op == "insert":
            text = sql.SQL("INSERT INTO {} ({}) SELECT * FROM {}").format(
                ident, sql.SQL(", ").join(sql.Identifier(pg_name(c)) for c in cols), src)
        elif op == "update":
            text = sql.SQL("UPDATE {} AS t SET {} FROM {} WHERE {}").format(
                ident, sql.SQL(", ").join(
                    sql.SQL("{} = d.{}").format(sql.Identifier(pg_name(c)),
                                                sql.Identifier(f"c{i}"))
                    for i, c in enumerate(cols)), src, match)
        else:
            text = sql.SQL("DELETE FROM {} AS t USING {} WHERE {}").format(ident, src, match)
        cur = self.conn.execute(text, params)
        if cur.rowcount != n_rows:
            raise NotBulk(f"{op} of {t.owner}.{t.name}: {cur.rowcount} of {n_rows} rows "
                          "matched (a conflict)")

    def _check_absent(self, t: _Table, info: _TableInfo, keys: list[tuple[Any, ...]]
                      ) -> None:
        from psycopg import sql

        text = sql.SQL("SELECT count(*) FROM {} AS t, {} WHERE {}").format(
            info.ident, self._source(info, list(t.keys)), _match(t.keys, (), 0))
        row = self.conn.execute(text, _arrays(keys)).fetchone()
        if row is None or row[0]:
            raise NotBulk(f"an INSERT of {t.owner}.{t.name} whose key exists (a conflict)")


def _arrays(rows: list[tuple[Any, ...]]) -> list[Any]:
    """Rows as one array parameter per column, sent in binary.

    A column of NULLs only goes as NULL: binary arrays need an element type, and a
    multi-argument ``unnest`` pads a missing array with NULLs. A column of integers
    without NULLs is encoded at once as a binary ``bigint[]`` (:class:`Int8Array`);
    the statement's cast gives it the column's type, as for any other array.

    >>> _arrays([(1, None, "a"), (2, None, "b")])
    [Int8Array(2 values), None, ['a', 'b']]
    """
    return [pack(column) for column in zip(*rows, strict=True)]


def pack(column: tuple[Any, ...] | list[Any]) -> Any:
    """One column of a set-based statement as its array parameter (see :func:`_arrays`)."""
    if all(v is None for v in column):
        return None
    packed = Int8Array.pack(tuple(column))
    return packed if packed is not None else list(column)


class Int8Array(bytes):
    """A PostgreSQL ``bigint[]`` in binary wire format (``array_send``), built with numpy."""

    def __repr__(self) -> str:
        return f"Int8Array({int.from_bytes(self[12:16], 'big')} values)"

    @classmethod
    def pack(cls, values: tuple[Any, ...]) -> Int8Array | None:
        """The values as one binary array, or None (not all plain integers, or too big).

        >>> import struct
        >>> raw = Int8Array.pack((1, -2))
        >>> struct.unpack(">iiIii" + "iq" * 2, raw)
        (1, 0, 20, 2, 1, 8, 1, 8, -2)
        >>> Int8Array.pack((1, None)) is None, Int8Array.pack((True, 1)) is None
        (True, True)
        """
        import numpy as np

        if any(type(v) is not int for v in values):
            return None
        try:
            ints = np.array(values, dtype=np.int64)
        except OverflowError:
            return None
        body = np.empty(len(values), np.dtype([("n", ">i4"), ("v", ">i8")]))
        body["n"], body["v"] = 8, ints
        head = np.array([1, 0, 20, len(values), 1], dtype=">i4").tobytes()
        return cls(head + body.tobytes())

    @classmethod
    def register(cls, conn: psycopg.Connection[Any]) -> None:
        """Let ``conn`` send :class:`Int8Array` parameters as they are."""
        from psycopg.adapt import Dumper
        from psycopg.pq import Format

        class _Dumper(Dumper):
            format = Format.BINARY
            oid = 1016  # bigint[]

            def dump(self, obj: Any) -> bytes:
                return bytes(obj)

        conn.adapters.register_dumper(cls, _Dumper)


def _match(keys: tuple[str, ...], checked: tuple[str, ...], start: int) -> Any:
    """``t.key = d.cN AND ... AND t.col IS NOT DISTINCT FROM d.cM`` from column ``start``."""
    from psycopg import sql

    parts = []
    for i, c in enumerate(keys + checked, start):
        op = "=" if i - start < len(keys) else "IS NOT DISTINCT FROM"
        parts.append(sql.SQL("t.{} {} d.{}").format(sql.Identifier(pg_name(c)), sql.SQL(op),
                                                    sql.Identifier(f"c{i}")))
    return sql.SQL(" AND ").join(parts)
