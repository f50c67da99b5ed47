"""One JSON pass over the files when their first events describe them all.

The survey (:func:`.reader.survey`) reads every event to learn the tables' types before
pass 2 reads every event again. Most runs do not need it: a Kafka Connect sink writes
a topic's events with one schema until the table changes. So a run first reads the
first line of (up to :data:`HEAD_FILES`) files on the driver and surveys just those
lines (:func:`guess`); pass 2 then runs at once, with :func:`observed` counting, in the
same Spark job, every event the guess does not describe exactly: a record that is not
a well-formed event, an event of another table, schema or key, a column the table does
not have, a key column missing from its image. Any such event (a *miss*), a value
that does not decode, or a commit position at or below the captured one, and the
capture drops the written batch (never committed) and runs the two passes; they then
capture the files or report the problem exactly as if no guess had been made.
"""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from changeflow.debezium import envelope as E
from changeflow.debezium import reader
from changeflow.debezium.config import DebeziumSource
from changeflow.errors import TerminalError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Observation, SparkSession

#: How many files' first lines a guess reads (the first file of each directory first).
HEAD_FILES = 64


@dataclass
class Guess:
    """The tables the files' first events describe, and what every event must match."""

    tables: dict[str, reader.TableTypes]
    schemas: dict[str, set[str]] = field(default_factory=dict)  # table -> schema texts
    key_texts: dict[str, str | None] = field(default_factory=dict)  # undeclared keys
    by_txn: bool = False  # some event takes its position or time from its transaction


def heads(uris: list[str], limit: int = HEAD_FILES) -> list[str]:
    """The files whose first line a guess reads: each directory's first, then the rest.

    >>> heads(["a/1", "a/2", "b/1"], limit=2)
    ['a/1', 'b/1']
    """
    seen: set[str] = set()
    first: list[str] = []
    rest: list[str] = []
    for uri in uris:
        d = uri.rsplit("/", 1)[0]
        (rest if d in seen else first).append(uri)
        seen.add(d)
    return (first + rest)[:limit]


def first_lines(spark: SparkSession, uris: list[str]) -> list[tuple[str, str]]:
    """``(uri, first line)`` of each file (compressed ones through their Hadoop codec)."""
    jvm: Any = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
    codecs = jvm.org.apache.hadoop.io.compress.CompressionCodecFactory(conf)
    out = []
    for uri in uris:
        path = jvm.org.apache.hadoop.fs.Path(uri)
        stream = path.getFileSystem(conf).open(path)
        try:
            codec = codecs.getCodec(path)
            if codec is not None:
                stream = codec.createInputStream(stream)
            line = jvm.java.io.BufferedReader(
                jvm.java.io.InputStreamReader(stream, "UTF-8")).readLine()
        finally:
            stream.close()
        if line:
            out.append((uri, str(line)))
    return out


def head_groups(lines: list[tuple[str, str]]) -> list[reader.SurveyGroup]:
    """The change events among ``(uri, first line)`` as survey groups, read in Python.

    A line that is not a change event (not JSON, metadata, a tombstone, no op) is left
    out: the one pass counts such records and falls back. A ``schema`` block is kept as
    compact JSON text, as Spark's reader writes it; where the two texts differ (say, a
    float default written another way) the events are a miss, never misread.
    """
    out = []
    for uri, line in lines:
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if not isinstance(obj, dict):
            continue
        e: dict[str, Any] = obj["payload"] if isinstance(obj.get("payload"), dict) else obj
        src = e.get("source")
        if not isinstance(src, dict) or e.get("op") not in {o.value for o in E.Op} \
                or "status" in e or not all(isinstance(src.get(k), str) for k in (
                    "schema", "table")) or not isinstance(src.get("cf_key_columns"),
                                                          (str, type(None))):
            continue
        texts = _schema_texts(line, obj)
        text = texts[0] if texts else None
        op = e["op"]
        images: dict[str, dict[str, Any]] = {
            k: e[k] if isinstance(e.get(k), dict) else {} for k in ("before", "after")}
        image = images["before" if op == E.Op.DELETE.value else "after"]
        out.append(reader.SurveyGroup(
            "event", src.get("connector"), src.get("schema"), src["table"], op,
            reader.after_fields(text), sorted(image), sorted({*images["before"],
                                                               *images["after"]}),
            src.get("cf_key_columns"), 1, uri, op, None, text, _needs_transaction(src)))
        if len(texts) > 1:
            out.append(dataclasses.replace(out[-1], schema_text=texts[1]))
    return out


def _needs_transaction(src: dict[str, Any]) -> bool:
    """:func:`.reader.needs_transaction`, in Python, for one event's ``source`` block."""
    seq = src.get("sequence")
    unknown = src.get("connector") == "postgresql" and isinstance(seq, str) \
        and re.match(r"^\[\s*null\s*,", seq) is not None
    snap = src.get("snapshot")
    return unknown or (snap is not None and str(snap).lower() not in ("false", ""))


def _schema_texts(line: str, obj: dict[str, Any]) -> list[str]:
    """The top-level ``schema`` value of a line as compact JSON text and as it is
    written in the line (Spark's reader gives one or the other)."""
    if obj.get("schema") is None:
        return []
    out = [json.dumps(obj["schema"], separators=(",", ":"), ensure_ascii=False)]
    try:
        raw = _raw_schema(line)
    except (ValueError, IndexError):
        raw = None
    return out + [raw] if raw is not None and raw not in out else out


def _raw_schema(line: str) -> str | None:
    dec = json.JSONDecoder()
    ws = " \t\r\n"
    i = len(line) - len(line.lstrip(ws)) + 1  # past "{"
    while i < len(line):
        i += len(line[i:]) - len(line[i:].lstrip(ws))
        key, i = json.decoder.scanstring(line, i + 1)  # type: ignore[attr-defined]
        i = line.index(":", i) + 1
        i += len(line[i:]) - len(line[i:].lstrip(ws))
        _, end = dec.raw_decode(line, i)
        if key == "schema":
            return line[i:end]
        i = line.index(",", end) + 1 if "," in line[end:end + 64] else len(line)
    return None


def guess(spark: SparkSession, uris: list[str], source: DebeziumSource) -> Guess | None:
    """The captured tables as the files' first events describe them (None: no guess).

    The first lines are surveyed (:func:`head_groups`, no Spark job) and checked like
    the files; anything the survey would refuse gives no guess, and the two passes
    then report it.
    """
    return guess_from(head_groups(first_lines(spark, heads(uris))), source)


def guess_from(groups: list[reader.SurveyGroup], source: DebeziumSource) -> Guess | None:
    """:func:`guess` from the first lines' groups."""
    try:
        reader.check_records(groups)
        tables = reader.column_types(groups, source)
    except TerminalError:
        return None
    if not tables or any(not tt.key for tt in tables.values()):
        return None
    out = Guess(tables, by_txn=any(g.txn_fix for g in groups))
    for g in groups:
        label = f"{g.owner}.{g.table}"
        if label not in tables:
            continue
        if g.schema_text is not None:
            out.schemas.setdefault(label, set()).add(g.schema_text)
        declared = source.table(str(g.owner), str(g.table))
        if declared is None or not declared.key:
            if label in out.key_texts and out.key_texts[label] != g.key_columns:
                return None
            out.key_texts[label] = g.key_columns
    return out


def _only_columns(image: Column, tt: reader.TableTypes) -> Column:
    """A row image (a map, or NULL) holds no column but the table's.

    Counted, not compared as arrays: the keys of a map are distinct, so the image holds
    only the table's columns exactly when as many of them are in it as it has entries.
    (``array_except`` of the keys built two arrays and a hash set for every event; this
    is a few key lookups, and the job spends some 15% less CPU.)
    """
    from pyspark.sql import functions as F

    present = F.lit(0)
    for c in tt.columns:
        present = present + F.map_contains_key(image, F.lit(c)).cast("int")
    return image.isNull() | (F.size(image) == present)


def _table_ok(g: Guess, label: str) -> Column:
    """An event of table ``label`` is one the guess describes exactly."""
    from pyspark.sql import functions as F

    tt = g.tables[label]
    e = F.col("e")
    schema = F.col("schema")
    ok = schema.isNull()
    if g.schemas.get(label):
        ok = ok | schema.isin(*sorted(g.schemas[label]))
    ok = ok & _only_columns(e["before"], tt) & _only_columns(e["after"], tt)
    image = F.when(e["op"] == "d", e["before"]).otherwise(e["after"])
    has_key = F.lit(True)
    for k in tt.key:
        has_key = has_key & F.coalesce(F.map_contains_key(image, F.lit(k)), F.lit(False))
    ok = ok & ((e["op"] == E.Op.TRUNCATE.value) | has_key)
    if label in g.key_texts:
        ok = ok & e["source"]["cf_key_columns"].eqNullSafe(F.lit(g.key_texts[label]))
    return ok


def observed(df: DataFrame, g: Guess, source: DebeziumSource
             ) -> tuple[DataFrame, Observation]:
    """``df`` (:func:`.reader.read_events` with schemas) with its events' checks observed.

    The observation's ``misses`` counts the records the guess does not describe (and
    events that need their transaction's position or time when the guess did not plan
    for it), ``events`` the change events, ``min_scn`` their lowest commit position,
    ``skipped_<kind>`` the records of each kind a capture skips.
    """
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    e, src = F.col("e"), F.col("e")["source"]
    kind = reader.event_kind()
    table: Column | None = None
    for label, tt in g.tables.items():
        cond = (src["schema"] == tt.owner) & (src["table"] == tt.table)
        table = (F.when(cond, _table_ok(g, label)) if table is None
                 else table.when(cond, _table_ok(g, label)))
    assert table is not None
    declared = F.lit(False)
    for t in source.tables:
        owner, name = t.name.split(".", 1)
        declared = declared | ((F.lower(src["schema"]) == owner.lower())
                               & (F.lower(src["table"]) == name.lower()))
    # an event of a table the capture leaves out is fine; of one it captures but the
    # guess does not know, a miss
    other = ~declared if source.tables else F.lit(False)
    event_ok = src["connector"].isin(*E.CONNECTORS) & table.otherwise(other)
    if not g.by_txn:
        event_ok = event_ok & ~reader.needs_transaction(e)
    ok = F.when(kind.isin(*E.SKIPPED), True) \
        .when(kind == "event", F.coalesce(event_ok, F.lit(False))).otherwise(False)
    obs = Observation(f"dbz_{uuid.uuid4().hex}")
    is_event = kind == "event"
    return df.observe(obs, F.sum(F.when(ok, 0).otherwise(1)).alias("misses"),
                      F.sum(F.when(is_event, 1).otherwise(0)).alias("events"),
                      F.min(F.when(is_event, reader.native_position(e))).alias("min_scn"),
                      *[F.sum((kind == k).cast("int")).alias(f"skipped_{k}")
                        for k in E.SKIPPED]), obs
