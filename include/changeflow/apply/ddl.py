"""DDL LCRs: which statements an apply executes itself, parsed into operations.

Supported (PostgreSQL and Oracle spellings):

* ``CREATE TABLE t (c type [NOT NULL] [PRIMARY KEY], ..., [PRIMARY KEY (a, b)])``
* ``DROP TABLE [IF EXISTS] t [CASCADE]``, ``TRUNCATE TABLE t``
* ``ALTER TABLE t ADD [COLUMN] [IF NOT EXISTS] c type ...`` and Oracle's
  ``ADD (c type, d type)``
* ``ALTER TABLE t DROP [COLUMN] [IF EXISTS] c``, ``ALTER TABLE t RENAME COLUMN a TO b``

PostgreSQL targets execute all of them (re-rendered with quoted identifiers, the
target schema mapped, types translated). Parquet targets create, drop and truncate
tables and add columns (old files read the new column as NULL); any other statement
goes to the apply's DDL handler, or else its transaction goes to the error queue
with a message saying why.

>>> op = parse("ALTER TABLE hr.employees ADD (email2 VARCHAR2(50), bonus NUMBER(8,2))")
>>> op.op, op.table, [(c.name, c.logical_type) for c in op.columns]
('add_column', 'EMPLOYEES', [('email2', 'VARCHAR2'), ('bonus', 'NUMBER')])
>>> parse('CREATE TABLE "T1" (id int PRIMARY KEY, v text NOT NULL)').primary_key
['id']
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from changeflow.errors import TerminalError


class DdlError(TerminalError):
    """A DDL statement the apply cannot execute (unsupported or malformed)."""


@dataclass(frozen=True)
class ColumnDef:
    """One column of a CREATE TABLE or ADD COLUMN."""

    name: str
    sql_type: str
    logical_type: str
    not_null: bool = False


@dataclass(frozen=True)
class DdlOp:
    """One parsed statement."""

    op: str  # create_table, drop_table, truncate, add_column, drop_column, rename_column
    owner: str | None
    table: str
    columns: list[ColumnDef] = field(default_factory=list)
    primary_key: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)  # drop: [col]; rename: [old, new]
    if_exists: bool = False


_TOKEN = re.compile(r'\s*(?:("(?:[^"]|"")*")|([A-Za-z_][A-Za-z0-9_$#]*)|(\d+)|(.))', re.S)

_TYPES: tuple[tuple[str, str, str], ...] = (
    # (SQL type regex, logical type, PostgreSQL type)
    (r"(small|big)?int(eger)?|int[248]|(small|big)?serial", "INTEGER", "bigint"),
    (r"numeric|decimal|number", "NUMBER", "numeric"),
    (r"real|float[48]?|double( precision)?|binary_(double|float)", "BINARY_DOUBLE",
     "double precision"),
    (r"(n?var)?char(acter)?( varying)?|varchar2|nvarchar2|text|clob|nclob|uuid|jsonb?|"
     r"long", "VARCHAR2", "text"),
    (r"bool(ean)?", "BOOLEAN", "boolean"),
    (r"date", "DATE", "date"),
    (r"timestamp( without time zone)?", "TIMESTAMP", "timestamp"),
    (r"timestamptz|timestamp with (local )?time zone", "TIMESTAMP WITH TIME ZONE",
     "timestamptz"),
    (r"bytea|raw|blob|long raw", "RAW", "bytea"),
)


_PG_INTEGERS = {"smallint": "smallint", "int2": "smallint", "smallserial": "smallint",
                "int": "integer", "integer": "integer", "int4": "integer", "serial": "integer"}


def logical_type(sql_type: str) -> tuple[str, str]:
    """The LCR logical type and the PostgreSQL type of a SQL column type.

    >>> logical_type("VARCHAR2(50)"), logical_type("timestamp with time zone")
    (('VARCHAR2', 'varchar(50)'), ('TIMESTAMP WITH TIME ZONE', 'timestamptz'))
    >>> logical_type("int"), logical_type("BIGINT")
    (('INTEGER', 'integer'), ('INTEGER', 'bigint'))
    >>> logical_type("NUMBER(4)"), logical_type("number(8,2)")
    (('INTEGER', 'numeric(4)'), ('NUMBER', 'numeric(8,2)'))

    Raises:
        DdlError: a type changeflow does not map.
    """
    text = " ".join(sql_type.lower().split())
    m = re.match(r"^([a-z_ 0-9]+?)\s*(\((\d+)(\s*,\s*(\d+))?\))?$", text)
    if not m:
        raise DdlError(f"column type {sql_type!r} is not supported")
    base, args = m.group(1).strip(), m.group(2)
    for pattern, ltype, pg in _TYPES:
        if re.fullmatch(pattern, base):
            if args and ltype == "VARCHAR2" and base not in ("text", "clob", "nclob", "uuid",
                                                              "json", "jsonb", "long"):
                pg = f"varchar({m.group(3)})"
            elif ltype == "INTEGER":
                pg = _PG_INTEGERS.get(base, "bigint")
            elif args and ltype == "NUMBER":
                pg = f"numeric({m.group(3)}{',' + m.group(5) if m.group(5) else ''})"
                if int(m.group(5) or 0) == 0 and int(m.group(3)) <= 18:
                    ltype = "INTEGER"  # NUMBER(4): whole numbers, as captures send them
            return ltype, pg
    raise DdlError(f"column type {sql_type!r} is not supported (no LCR logical type for it)")


class _Tokens:
    def __init__(self, text: str):
        self.toks: list[tuple[str, str]] = []  # (kind, value): id, qid, num, sym
        pos = 0
        text = text.strip().rstrip(";")
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if not m or m.end() == pos:
                break
            pos = m.end()
            if m.group(1):
                self.toks.append(("qid", m.group(1)[1:-1].replace('""', '"')))
            elif m.group(2):
                self.toks.append(("id", m.group(2)))
            elif m.group(3):
                self.toks.append(("num", m.group(3)))
            elif m.group(4) and not m.group(4).isspace():
                self.toks.append(("sym", m.group(4)))
        self.i = 0

    def peek(self, *words: str) -> bool:
        if self.i + len(words) > len(self.toks):
            return False
        return all(self.toks[self.i + j][0] == "id" and self.toks[self.i + j][1].upper() == w
                   for j, w in enumerate(words))

    def take(self, *words: str) -> bool:
        if self.peek(*words):
            self.i += len(words)
            return True
        return False

    def sym(self, s: str) -> bool:
        if self.i < len(self.toks) and self.toks[self.i] == ("sym", s):
            self.i += 1
            return True
        return False

    def ident(self) -> str:
        if self.i >= len(self.toks) or self.toks[self.i][0] not in ("id", "qid"):
            raise DdlError("an identifier was expected")
        kind, value = self.toks[self.i]
        self.i += 1
        return value if kind == "qid" else value.lower()

    def name(self) -> tuple[str | None, str]:
        first = self.ident()
        if self.sym("."):
            return first, self.ident()
        return None, first

    def until_comma(self) -> list[tuple[str, str]]:
        """Tokens up to a top-level comma or closing parenthesis (not consumed)."""
        out, depth = [], 0
        while self.i < len(self.toks):
            t = self.toks[self.i]
            if t == ("sym", "(") :
                depth += 1
            elif t == ("sym", ")"):
                if depth == 0:
                    break
                depth -= 1
            elif t == ("sym", ",") and depth == 0:
                break
            out.append(t)
            self.i += 1
        return out

    def done(self) -> bool:
        return self.i >= len(self.toks)


def _canon(owner: str | None, table: str) -> tuple[str | None, str]:
    from changeflow.lcr import canonical_identifier

    return (canonical_identifier(owner) if owner else None), canonical_identifier(table)


def _column(parts: list[tuple[str, str]]) -> tuple[ColumnDef, bool]:
    """A column definition from its tokens; returns it and whether it is a PRIMARY KEY."""
    if not parts or parts[0][0] not in ("id", "qid"):
        raise DdlError("a column definition was expected")
    name = parts[0][1] if parts[0][0] == "qid" else parts[0][1].lower()
    words, i = [], 1
    stop = {"NOT", "NULL", "PRIMARY", "DEFAULT", "CONSTRAINT", "REFERENCES", "UNIQUE",
            "CHECK", "COLLATE", "GENERATED"}
    while i < len(parts) and not (parts[i][0] == "id" and parts[i][1].upper() in stop):
        words.append(parts[i][1])
        i += 1
    sql_type = " ".join(words).replace("( ", "(").replace(" )", ")").replace(" ,", ",")
    sql_type = re.sub(r"\s*\(\s*", "(", sql_type)
    rest = " ".join(p[1].upper() for p in parts[i:])
    ltype, _ = logical_type(sql_type)
    return ColumnDef(name, sql_type, ltype, "NOT NULL" in rest or "PRIMARY KEY" in rest), \
        "PRIMARY KEY" in rest


def parse(ddl_text: str) -> DdlOp:
    """Parse one supported statement.

    Raises:
        DdlError: the statement is not one the apply executes, or is malformed.
    """
    t = _Tokens(ddl_text or "")
    try:
        op = _statement(t)
    except DdlError as exc:
        raise DdlError(f"{exc} in DDL {ddl_text[:200]!r}") from None
    return op


def _statement(t: _Tokens) -> DdlOp:
    if t.take("CREATE", "TABLE"):
        t.take("IF", "NOT", "EXISTS")
        owner, table = _canon(*t.name())
        if not t.sym("("):
            raise DdlError("CREATE TABLE needs a column list")
        cols, pk = [], []
        while True:
            if t.take("PRIMARY", "KEY") or (t.take("CONSTRAINT") and t.ident() and
                                            t.take("PRIMARY", "KEY")):
                t.sym("(")
                pk = [t.ident()]
                while t.sym(","):
                    pk.append(t.ident())
                t.sym(")")
            else:
                col, is_pk = _column(t.until_comma())
                cols.append(col)
                if is_pk:
                    pk.append(col.name)
            if t.sym(","):
                continue
            if t.sym(")"):
                break
            raise DdlError("the column list is not closed")
        return DdlOp("create_table", owner, table, columns=cols, primary_key=pk)
    if t.take("DROP", "TABLE"):
        exists = t.take("IF", "EXISTS")
        owner, table = _canon(*t.name())
        return DdlOp("drop_table", owner, table, if_exists=exists)
    if t.take("TRUNCATE"):
        t.take("TABLE")
        owner, table = _canon(*t.name())
        return DdlOp("truncate", owner, table)
    if t.take("ALTER", "TABLE"):
        t.take("ONLY")
        owner, table = _canon(*t.name())
        return _alter(t, owner, table)
    raise DdlError("the statement is not one an apply executes (CREATE/DROP/TRUNCATE TABLE, "
                   "ALTER TABLE ADD/DROP/RENAME COLUMN)")


def _alter(t: _Tokens, owner: str | None, table: str) -> DdlOp:
    if t.take("ADD"):
        t.take("COLUMN")
        exists = t.take("IF", "NOT", "EXISTS")
        cols = []
        if t.sym("("):
            while True:
                cols.append(_column(t.until_comma())[0])
                if t.sym(")"):
                    break
                if not t.sym(","):
                    raise DdlError("the column list is not closed")
        else:
            cols.append(_column(t.until_comma())[0])
        if not t.done():
            raise DdlError("only one ADD per statement is supported")
        return DdlOp("add_column", owner, table, columns=cols, if_exists=exists)
    if t.take("DROP"):
        t.take("COLUMN")
        exists = t.take("IF", "EXISTS")
        name = t.ident()
        t.take("CASCADE")
        if not t.done():
            raise DdlError("only one DROP COLUMN per statement is supported")
        return DdlOp("drop_column", owner, table, names=[name], if_exists=exists)
    if t.take("RENAME", "COLUMN"):
        old = t.ident()
        if not t.take("TO"):
            raise DdlError("RENAME COLUMN needs TO")
        return DdlOp("rename_column", owner, table, names=[old, t.ident()])
    raise DdlError("only ALTER TABLE ADD, DROP COLUMN and RENAME COLUMN are executed")
