"""Reading a peek's wal2json documents with Arrow's JSON reader: the capture's fast path.

:mod:`.pg_decode` and :mod:`.pg_lcr` decode a peek into one Python object per document
and per column entry, then build the LCR table from them: most of a capture's time. Here
Arrow's JSON reader (C++, parallel, without the GIL, so it can run in the read-ahead
thread) reads the documents into columns, and the LCR table is built from those columns.

Arrow needs one JSON type per field, and wal2json writes a column's ``value`` as a JSON
number, string or boolean depending on the column's type. :func:`parse` therefore renames
the ``value`` key by kind before reading: after ``"typeoid":700,`` / ``701,`` (floating
point) it becomes ``fvalue``, after ``1700,`` (numeric) ``nvalue``, after ``16,``
(boolean) ``bvalue``, and a ``value`` holding a JSON string becomes ``svalue``; integers
keep ``value``. These sequences cannot occur inside a JSON string (its quotes are
escaped), so only keys are renamed.

Anything this path cannot prove to give exactly what the object path gives returns
``None``, and the capture uses :mod:`.pg_decode` / :mod:`.pg_lcr` for that batch, which
also raise the errors with their messages: a document Arrow refuses (a logical message, an
unexpected key, a value of another JSON type than its column's), a transaction that is
not whole, an unknown type, a value that does not fit its logical type.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from changeflow.capture import pg_lcr
from changeflow.capture.pg_decode import TYPE_MAP, Peek

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

_INTEGER_OIDS = frozenset(o for o, (t, _) in TYPE_MAP.items() if t == "INTEGER")
_FLOAT_OIDS = frozenset((700, 701))
_NUMBER_OIDS = frozenset((1700,))
_BOOL_OIDS = frozenset((16,))
_STRING_OIDS = frozenset(TYPE_MAP) - _INTEGER_OIDS - _FLOAT_OIDS - _NUMBER_OIDS - _BOOL_OIDS
# Which renamed key holds the values of which type OIDs (and the LCR field it fills).
_VALUE_KEYS = {"value": _INTEGER_OIDS, "fvalue": _FLOAT_OIDS, "nvalue": _NUMBER_OIDS,
               "bvalue": _BOOL_OIDS, "svalue": _STRING_OIDS}
_RENAMES = [*((f',"typeoid":{o},"value":', f',"typeoid":{o},{k}:')
              for o, k in ((700, '"fvalue"'), (701, '"fvalue"'), (1700, '"nvalue"'),
                           (16, '"bvalue"'))),
            ('"value":"', '"svalue":"'), ('},{"action"', '}\n{"action"')]
_ACTIONS = frozenset(("B", "C", "I", "U", "D", "T"))
_schema: Any = None


def doc_schema() -> pa.Schema:
    """The Arrow schema of a renamed wal2json document (keys outside it are refused)."""
    global _schema
    if _schema is None:
        import pyarrow as pa

        from changeflow import lcr

        dec = pa.decimal128(lcr.DECIMAL_PRECISION, lcr.DECIMAL_SCALE)
        entry = pa.list_(pa.struct([
            ("name", pa.string()), ("typeoid", pa.int64()), ("value", pa.int64()),
            ("svalue", pa.string()), ("fvalue", pa.float64()), ("nvalue", dec),
            ("bvalue", pa.bool_())]))
        _schema = pa.schema([
            ("action", pa.string()), ("xid", pa.int64()), ("timestamp", pa.string()),
            ("origin", pa.int64()), ("schema", pa.string()), ("table", pa.string()),
            ("columns", entry), ("identity", entry)])
    return _schema


def parse(text: str | bytes) -> pa.Table | None:
    """A peek's documents (joined by commas) as one Arrow row each; None if Arrow refuses.

    >>> t = parse('{"action":"B","xid":7},{"action":"I","schema":"s","table":"t",'
    ...           '"columns":[{"name":"a","typeoid":25,"value":"x,\\\\"value\\\\":1"}]}')
    >>> t.column("columns").to_pylist()[1][0]["svalue"]
    'x,"value":1'
    >>> parse('{"action":"M","prefix":"p","content":"c"}') is None
    True
    """
    import pyarrow as pa
    import pyarrow.json as pj

    if not text:
        return None
    if isinstance(text, str):
        for old, new in _RENAMES:
            text = text.replace(old, new)
        data = text.encode()
    else:
        data = text
        for old, new in _RENAMES:
            data = data.replace(old.encode(), new.encode())
    try:
        # One thread (the read-ahead thread already runs beside the capture) and one
        # block: the table comes in one chunk, which the build reads without copying.
        return pj.read_json(io.BytesIO(data), read_options=pj.ReadOptions(
                                block_size=max(len(data) + 1, 1 << 20), use_threads=False),
                            parse_options=pj.ParseOptions(
                                explicit_schema=doc_schema(), newlines_in_values=False,
                                unexpected_field_behavior="error"))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None


class Batch(NamedTuple):
    """What :func:`build` made of a peek."""

    table: pa.Table  # the LCRs of the transactions kept
    last: int  # end LSN of the last transaction past ``done`` (``done`` when none)
    transactions: int  # transactions kept
    tagged_skipped: int  # transactions past ``done`` left out for their tag


class Source(NamedTuple):
    """What :func:`build` asks of the capture's source (see :class:`SlotReader`)."""

    database: str
    key_columns: Callable[[str, str], list[str]]
    tag: Callable[[int], bytes | None]
    origin_source: Callable[[int], str | None]
    include_tagged: bool


def build(peek: Peek, docs: pa.Table | None, source: Source, done: int) -> Batch | None:
    """The LCRs of the peek's transactions past ``done``, or None to take the object path.

    Transactions at or below ``done`` (enqueued before) are left out, and so are tagged
    ones (an apply's) unless ``source.include_tagged``, as :mod:`.postgres` does with
    the decoded transactions.
    """
    import numpy as np
    import pyarrow as pa

    if docs is None or docs.num_rows != peek.rows or peek.rows == 0:
        return None
    docs = docs.combine_chunks()
    database = source.database.upper()
    shape = _transactions(docs, peek.commit_lsns)
    if shape is None:
        return None
    begins, commits, txn_of, changes = shape
    first = docs.select(["xid", "origin"]).take(pa.array(begins))
    end_lsn = np.asarray(peek.commit_lsns[:len(begins)], dtype=np.int64)
    origins = first.column("origin").fill_null(0).to_numpy()
    past = end_lsn > done
    last = int(end_lsn[past][-1]) if past.any() else done
    keep, dbs = past.copy(), [database] * len(begins)
    tags: list[bytes | None] = [None] * len(begins)
    tagged = 0
    for origin in np.unique(origins[past]).tolist():
        tag = source.tag(origin) if origin else None
        if tag is None:
            continue
        at = np.flatnonzero(past & (origins == origin))
        if not source.include_tagged:
            keep[at] = False
            tagged += len(at)
            continue
        db = source.origin_source(origin) or database
        for i in at.tolist():
            tags[i], dbs[i] = tag, db
    rows = changes[keep[txn_of[changes]]]
    kept = np.flatnonzero(keep)
    if len(rows) == 0:
        empty = pg_lcr.LcrBuilder(source.database, source.key_columns).to_arrow()
        return Batch(empty, last, len(kept), tagged)
    timestamps = docs.column("timestamp").take(pa.array(commits[kept]))
    if timestamps.null_count:
        return None
    txn = pg_lcr.TxnColumns(
        end_lsn=end_lsn[kept],
        xid=first.column("xid").fill_null(0).take(pa.array(kept)).combine_chunks(),
        tag=[tags[i] for i in kept.tolist()], database=[dbs[i] for i in kept.tolist()],
        commit_text=timestamps)
    taken = pa.array(rows)
    action, owner, name = (_array(docs, c).take(taken) for c in ("action", "schema", "table"))
    index = np.searchsorted(kept, txn_of[rows])  # each row's kept transaction
    position = rows - begins[kept][index]
    cols = {**pg_lcr.transaction_columns(database, txn, index, position),
            **pg_lcr.change_columns(action, owner, name, source.key_columns)}
    maps = {}
    for field, attr, actions in (("new_values", "columns", ("I", "U")),
                                 ("old_values", "identity", ("U", "D"))):
        mapped = _values(_rows_of(_array(docs, attr), rows), action, actions)
        if mapped is None:
            return None
        maps[field] = mapped
    return Batch(pg_lcr.assemble(len(rows), cols, maps), last, len(kept), tagged)


def _transactions(docs: pa.Table, lsns: list[int]
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """``(begin rows, commit rows, transaction of each row, change rows)``, or None
    unless every document is a begin, a commit or a change inside whole transactions."""
    import numpy as np
    import pyarrow.compute as pc

    action = pc.dictionary_encode(docs.column("action")).combine_chunks()
    names = action.dictionary.to_pylist()
    if action.null_count or not set(names) <= _ACTIONS:
        return None
    codes = action.indices.to_numpy()
    is_b = codes == names.index("B") if "B" in names else np.zeros(len(codes), bool)
    is_c = codes == names.index("C") if "C" in names else np.zeros(len(codes), bool)
    marks = np.flatnonzero(is_b | is_c)
    if len(marks) % 2 or not is_b[marks[0::2]].all() or not is_c[marks[1::2]].all():
        return None  # not B, C, B, C, ...: a partial or malformed transaction
    begins, commits = marks[0::2], marks[1::2]
    if len(begins) > len(lsns):
        return None
    opened = np.cumsum(is_b)
    inside = opened - np.cumsum(is_c) == 1
    changes = np.flatnonzero(~(is_b | is_c))
    if not inside[changes].all():
        return None
    return begins, commits, opened - 1, changes


def _array(docs: pa.Table, name: str) -> pa.Array:
    column = docs.column(name)
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _rows_of(lists: pa.ListArray, rows: np.ndarray) -> pa.ListArray:
    """``lists.take(rows)``, without copying the entries when the rows left out have
    none (begins and commits never do; nor skipped transactions, mostly)."""
    import numpy as np
    import pyarrow as pa

    offsets = lists.offsets.to_numpy()
    starts, ends = offsets[rows], offsets[rows + 1]
    if len(rows) and np.array_equal(starts[1:], ends[:-1]):
        mask = None
        if lists.null_count:
            mask = pa.array(~lists.is_valid().to_numpy(zero_copy_only=False)[rows])
        return pa.ListArray.from_arrays(pa.array(np.append(starts, ends[-1])),
                                        lists.values, mask=mask)
    return lists.take(pa.array(rows))


def _values(lists: pa.ListArray, action: pa.Array, actions: tuple[str, ...]
            ) -> pa.Array | None:
    """A value-map column from each change's parsed ``columns`` or ``identity``."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    wanted = pc.is_in(action, pa.array(actions))
    present = lists.is_valid()
    if pc.any(pc.and_(present, pc.invert(wanted))).as_py():
        return None  # entries the object path would drop: not worth the special case
    mask = pc.invert(pc.and_(present, wanted))
    offsets = lists.offsets
    entries = lists.values.slice(offsets[0].as_py(), offsets[-1].as_py() - offsets[0].as_py())
    offsets = pc.subtract(offsets, offsets[0])
    oids = entries.field("typeoid")
    if oids.null_count:
        return None
    distinct = np.unique(oids.to_numpy()).tolist()
    if any(o not in TYPE_MAP for o in distinct):
        return None
    for key, allowed in _VALUE_KEYS.items():
        values = entries.field(key)
        if values.null_count < len(values) and pc.any(pc.and_(
                values.is_valid(), pc.invert(pc.is_in(oids, pa.array(sorted(allowed)))))
        ).as_py():
            return None  # a value in another JSON type than its column's
    names = pc.dictionary_encode(entries.field("name"))
    keys = pa.array([pg_lcr.canonical(x) for x in names.dictionary.to_pylist()],
                    pa.string()).take(names.indices)
    items = _items(entries, oids, distinct)
    if items is None:
        return None
    from changeflow import lcr

    map_type = lcr.arrow_schema().field("new_values").type
    return pa.MapArray.from_arrays(offsets, keys, items, type=map_type, mask=mask)


def _items(entries: pa.StructArray, oids: pa.Array, distinct: list[int]
           ) -> pa.StructArray | None:
    """The value structs (logical type, value in its field), as the object path makes them."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from changeflow import lcr

    struct_type = lcr.arrow_schema().field("new_values").type.item_type
    ltype_of = {o: TYPE_MAP[o][0] for o in distinct}
    types = pc.take(pa.array([ltype_of[o] for o in distinct], pa.string()),
                    pc.index_in(oids, pa.array(distinct, pa.int64())))
    n = len(entries)
    children = [types]
    for f in list(struct_type)[1:]:
        ltype = pg_lcr.FIELD_OF[f.name]
        oid_set = [o for o in distinct if ltype_of[o] == ltype]
        if not oid_set:
            children.append(pa.nulls(n, f.type))
            continue
        mine = pc.is_in(oids, pa.array(oid_set, pa.int64()))
        if ltype == "VARCHAR2":
            part = pc.if_else(mine, entries.field("svalue"), pa.scalar(None, pa.string()))
        elif ltype == "INTEGER":
            part = entries.field("value")
        elif ltype == "BINARY_DOUBLE":
            part = entries.field("fvalue")
        elif ltype == "BOOLEAN":
            part = entries.field("bvalue")
        elif ltype == "NUMBER":
            part = entries.field("nvalue")
            limit = pa.scalar(pg_lcr.MAX_NUMBER, part.type)
            if pc.any(pc.greater(pc.abs(part), limit)).as_py():
                return None
        else:
            part = _converted(entries.field("svalue"), mine, oids, f.type)
            if part is None:
                return None
        children.append(part)
    return pa.StructArray.from_arrays(children, fields=list(struct_type))


def _converted(texts: pa.Array, mine: pa.Array, oids: pa.Array, arrow_type: pa.DataType
               ) -> pa.Array | None:
    """Dates, timestamps and bytea converted value by value, as the object path does."""
    import numpy as np
    import pyarrow as pa

    at = np.flatnonzero(mine.to_numpy(zero_copy_only=False))
    out: list[Any] = [None] * len(texts)
    try:
        for i, text, oid in zip(at.tolist(), texts.take(pa.array(at)).to_pylist(),
                                oids.take(pa.array(at)).to_pylist(), strict=True):
            if text is not None:
                out[i] = TYPE_MAP[oid][1](text)
        return pa.array(out, arrow_type)
    except (ValueError, TypeError, ArithmeticError, pa.ArrowInvalid, pa.ArrowTypeError):
        return None
