"""The expression tree of rule conditions, and the generator back to condition text.

Nodes are frozen dataclasses. ``pos`` (the character offset in the source) is kept
for error messages and ignored by equality, so two parses of equivalent text compare
equal. :func:`to_sql` prints a tree with one method per node type.

>>> from changeflow.rules.parser import parse
>>> to_sql(parse(":dml.get_object_owner()='HR' and :dml.is_null_tag()='Y'"))
":dml.get_object_owner() = 'HR' AND :dml.is_null_tag() = 'Y'"
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

# Static types of value expressions. ANYDATA is what get_value() returns; DYNAMIC is a
# user-message attribute whose type is only known from the message.
VARCHAR2, NUMBER, RAW, DATE, ANYDATA, DYNAMIC, NULL, BOOLEAN = (
    "VARCHAR2", "NUMBER", "RAW", "DATE", "ANYDATA", "DYNAMIC", "NULL", "BOOLEAN",
)  # fmt: skip

LCR_VARIABLES = ("dml", "ddl", "lcr")
MESSAGE_KINDS = {
    "dml": ("ROW",), "ddl": ("DDL",), "lcr": ("ROW", "DDL"), "msg": ("USER",),
    "column": ("ROW",),  # a table column in a subset rule's dml_condition
}  # fmt: skip


@dataclass(frozen=True)
class MemberFunction:
    """An LCR member function without arguments: which LCR column it reads."""

    column: str
    type: str
    kinds: tuple[str, ...]


MEMBER_FUNCTIONS: dict[str, MemberFunction] = {
    "get_object_owner": MemberFunction("object_owner", VARCHAR2, ("ROW", "DDL")),
    "get_object_name": MemberFunction("object_name", VARCHAR2, ("ROW", "DDL")),
    "get_command_type": MemberFunction("command_type", VARCHAR2, ("ROW", "DDL")),
    "get_source_database_name": MemberFunction("source_database_name", VARCHAR2, ("ROW", "DDL")),
    "get_tag": MemberFunction("tag", RAW, ("ROW", "DDL")),
    "is_null_tag": MemberFunction("tag", VARCHAR2, ("ROW", "DDL")),
    "get_transaction_id": MemberFunction("transaction_id", VARCHAR2, ("ROW", "DDL")),
    "get_commit_scn": MemberFunction("commit_scn", NUMBER, ("ROW", "DDL")),
    "get_base_table_owner": MemberFunction("base_table_owner", VARCHAR2, ("DDL",)),
    "get_base_table_name": MemberFunction("base_table_name", VARCHAR2, ("DDL",)),
    "get_object_type": MemberFunction("object_type", VARCHAR2, ("DDL",)),
    "get_logon_user": MemberFunction("logon_user", VARCHAR2, ("DDL",)),
    "get_current_schema": MemberFunction("current_schema", VARCHAR2, ("DDL",)),
    "get_ddl_text": MemberFunction("ddl_text", VARCHAR2, ("DDL",)),
}

# ANYDATA accessors: method name (lower case) -> static result type.
ACCESSORS: dict[str, str] = {
    "accessnumber": NUMBER,
    "accessvarchar2": VARCHAR2,
    "accesschar": VARCHAR2,
    "accessdate": DATE,
    "accesstimestamp": DATE,
    "accessraw": RAW,
}
ACCESSOR_NAMES = {
    "accessnumber": "AccessNumber", "accessvarchar2": "AccessVarchar2",
    "accesschar": "AccessChar", "accessdate": "AccessDate",
    "accesstimestamp": "AccessTimestamp", "accessraw": "AccessRaw",
}  # fmt: skip
SCALAR_FUNCTIONS = ("UPPER", "LOWER")


@dataclass(frozen=True)
class Node:
    """Base of every tree node."""

    def children(self) -> Iterator[Node]:
        """The direct sub-nodes."""
        for value in self.__dict__.values():
            if isinstance(value, Node):
                yield value
            elif isinstance(value, tuple):
                yield from (v for v in value if isinstance(v, Node))

    def walk(self) -> Iterator[Node]:
        """This node and every node under it, depth first."""
        stack: list[Node] = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(list(node.children())))


@dataclass(frozen=True)
class Literal(Node):
    """A constant: VARCHAR2 (str), NUMBER (Decimal), RAW (bytes), DATE (datetime), NULL."""

    value: str | decimal.Decimal | bytes | dt.datetime | None
    type: str
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Member(Node):
    """``:var.member_function()`` for an LCR variable."""

    var: str
    name: str
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class GetValue(Node):
    """``:var.get_value('OLD'|'NEW', '"COLUMN"')``: an ANYDATA column value."""

    var: str
    which: str
    column: str
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Access(Node):
    """``<get_value(...)>.AccessNumber()`` and the other ANYDATA accessors."""

    arg: GetValue
    accessor: str
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class MsgField(Node):
    """``:msg.field`` (or ``:"VAR$_52".field``): an attribute of a user message payload."""

    var: str
    name: str
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Func(Node):
    """A scalar SQL function of one argument (UPPER, LOWER)."""

    name: str
    arg: Node
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Compare(Node):
    """``left op right`` with op one of ``= != < <= > >=``."""

    op: str
    left: Node
    right: Node
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class In(Node):
    """``expr [NOT] IN (items)``."""

    expr: Node
    items: tuple[Node, ...]
    negated: bool = False
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Like(Node):
    """``expr [NOT] LIKE 'pattern'`` (``%`` and ``_`` wildcards)."""

    expr: Node
    pattern: str
    negated: bool = False
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class IsNull(Node):
    """``expr IS [NOT] NULL``."""

    expr: Node
    negated: bool = False
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class And(Node):
    """A conjunction of two or more conditions."""

    items: tuple[Node, ...]
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Or(Node):
    """A disjunction of two or more conditions."""

    items: tuple[Node, ...]
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Not(Node):
    """``NOT condition``."""

    item: Node
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Exists(Node):
    """``EXISTS (SELECT 1 FROM SYS.DUAL WHERE condition)``: TRUE iff the condition is TRUE."""

    cond: Node
    pos: int = field(default=0, compare=False)


def variables(node: Node) -> set[str]:
    """The bind variables a tree uses (``dml``, ``ddl``, ``lcr``, ``msg`` or ``VAR$_n``).

    >>> from changeflow.rules.parser import parse
    >>> sorted(variables(parse(":dml.get_tag() IS NULL")))
    ['dml']
    """
    return {n.var for n in node.walk() if type(n).__name__ in ("Member", "GetValue", "MsgField")}  # type: ignore[attr-defined]


def _q(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _literal(n: Literal) -> str:
    if n.type == NULL:
        return "NULL"
    if n.type == RAW:
        assert isinstance(n.value, bytes)
        return f"HEXTORAW({_q(n.value.hex().upper())})"
    if n.type == DATE:
        assert isinstance(n.value, dt.datetime)
        return f"TIMESTAMP {_q(n.value.isoformat(sep=' '))}"
    if n.type == NUMBER:
        return str(n.value)
    return _q(str(n.value))


def _bind(var: str) -> str:
    if var == "column":
        return ""
    return f':"{var}"' if var not in ("dml", "ddl", "lcr", "msg") else f":{var}"


def _ident(name: str) -> str:
    return '"' + name + '"'


def _field(name: str) -> str:
    return name.lower() if name.isupper() else _ident(name)


def _paren(n: Node) -> str:
    text = to_sql(n)
    return f"({text})" if isinstance(n, (And, Or)) else text


# Keyed by class name so that dispatch survives a module imported twice (doctests).
_GENERATORS: dict[str, Callable[[Any], str]] = {
    "Literal": _literal,
    "Member": lambda n: f"{_bind(n.var)}.{n.name}()",
    "GetValue": lambda n: f"{_bind(n.var)}.get_value({_q(n.which)},{_q(_ident(n.column))})",
    "Access": lambda n: f"{to_sql(n.arg)}.{ACCESSOR_NAMES[n.accessor]}()",
    "MsgField": lambda n: f"{_bind(n.var)}{'.' if n.var != 'column' else ''}{_field(n.name)}",
    "Func": lambda n: f"{n.name}({to_sql(n.arg)})",
    "Compare": lambda n: f"{to_sql(n.left)} {n.op} {to_sql(n.right)}",
    "In": lambda n: f"{to_sql(n.expr)} {'NOT IN' if n.negated else 'IN'} "
    f"({', '.join(to_sql(i) for i in n.items)})",
    "Like": lambda n: f"{to_sql(n.expr)} {'NOT LIKE' if n.negated else 'LIKE'} {_q(n.pattern)}",
    "IsNull": lambda n: f"{to_sql(n.expr)} IS {'NOT NULL' if n.negated else 'NULL'}",
    "And": lambda n: " AND ".join(_paren(i) if isinstance(i, Or) else to_sql(i) for i in n.items),
    "Or": lambda n: " OR ".join(_paren(i) if isinstance(i, And) else to_sql(i) for i in n.items),
    "Not": lambda n: f"NOT ({to_sql(n.item)})",
    "Exists": lambda n: f"EXISTS (SELECT 1 FROM SYS.DUAL WHERE {to_sql(n.cond)})",
}


def to_sql(node: Node) -> str:
    """Print a tree as condition text that parses back to an equal tree."""
    return _GENERATORS[type(node).__name__](node)
