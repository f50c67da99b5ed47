"""The line of a bad record, found on the driver when a capture reports it.

Spark's JSON reader does not number lines, and numbering them in the job would cost
every run; a run that fails is rare, so the file the error names is read again on the
driver, line by line, and each line is classified in Python as
:func:`.reader.event_kind` classifies it in Spark (:func:`classify`), until the first
record like the reported one. Local files are read directly (gzip too), others through
Hadoop's file system, up to :data:`MAX_LINES` lines.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from changeflow.debezium import envelope as E

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from changeflow.debezium.reader import SurveyGroup

#: How many lines of a remote file are searched (a local file is searched whole).
MAX_LINES = 200_000


def classify(line: str) -> dict[str, Any]:
    """What one line is, as the survey groups records: ``kind`` (as
    :func:`.reader.event_kind` names it), ``owner``, ``table``, ``op``, ``image_keys``,
    ``all_keys``, and the envelope ``e``.

    >>> classify("null")["kind"], classify('{"ts_ms": 1}')["kind"], classify("{x")["kind"]
    ('tombstone', 'heartbeat', 'corrupt')
    """
    try:
        obj = json.loads(line)
    except ValueError:
        return {"kind": "corrupt"}
    if obj is None:
        return {"kind": "tombstone"}
    if not isinstance(obj, dict):
        return {"kind": "corrupt"}
    e = obj["payload"] if isinstance(obj.get("payload"), dict) else obj
    src = e.get("source") if isinstance(e.get("source"), dict) else None
    op = e.get("op")
    bare = op is None and src is None and e.get("before") is None and e.get("after") is None
    if e.get("status") is not None:
        kind = "txmeta"
    elif e.get(E.DELETED) is not None or e.get(E.FLAT_OP) is not None:
        kind = "flattened"
    elif bare:
        kind = "heartbeat" if e.get("ts_ms") is not None and e.get("transaction") is None \
            else "not_event"
    elif op == E.MESSAGE:
        kind = "message"
    elif op is None:
        kind = "no_op"
    elif op not in {o.value for o in E.Op}:
        kind = "bad_op"
    elif src is None or src.get("table") is None:
        kind = "no_table"
    else:
        kind = "event"
    images = {k: e[k] if isinstance(e.get(k), dict) else {} for k in ("before", "after")}
    image = images["before" if op == E.Op.DELETE.value else "after"]
    return {"kind": kind, "owner": (src or {}).get("schema"), "table": (src or {}).get("table"),
            "op": op, "image_keys": sorted(image), "all_keys": sorted({*images["before"],
                                                                       *images["after"]}),
            "e": e}


def lines(spark: SparkSession | None, uri: str) -> Iterator[str]:
    """The lines of a file (local: read directly; else through Hadoop, capped)."""
    if uri.startswith("file:") or "://" not in uri:
        path = unquote(uri.removeprefix("file://").removeprefix("file:"))
        opener: Any = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
            yield from (x.rstrip("\n") for x in fh)
        return
    if spark is None:
        return
    jvm: Any = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
    path = jvm.org.apache.hadoop.fs.Path(uri)
    stream = path.getFileSystem(conf).open(path)
    try:
        codec = jvm.org.apache.hadoop.io.compress.CompressionCodecFactory(conf).getCodec(path)
        if codec is not None:
            stream = codec.createInputStream(stream)
        buffered = jvm.java.io.BufferedReader(jvm.java.io.InputStreamReader(stream, "UTF-8"))
        for _ in range(MAX_LINES):
            line = buffered.readLine()
            if line is None:
                return
            yield str(line)
    finally:
        stream.close()


def first_line(spark: SparkSession | None, uri: str,
               wanted: Callable[[dict[str, Any]], bool]) -> int | None:
    """The number (from 1) of the first line of ``uri`` whose :func:`classify` is
    ``wanted`` (blank lines count, as an editor counts them; Spark skips them)."""
    try:
        for n, line in enumerate(lines(spark, uri), 1):
            if line.strip() and wanted(classify(line)):
                return n
    except OSError:
        return None
    return None


def group_locator(spark: SparkSession | None) -> Callable[[SurveyGroup], int | None]:
    """A :data:`.reader.Locator`: the line of a survey group's first record."""

    def locate(g: SurveyGroup) -> int | None:
        def same(c: dict[str, Any]) -> bool:
            if c["kind"] != g.kind:
                return False
            if g.kind in ("corrupt", "flattened", "not_event", "tombstone", "heartbeat"):
                return True
            return (c["owner"], c["table"], c["op"]) == (g.owner, g.table, g.op) and (
                g.kind != "event" or (c["image_keys"], c["all_keys"])
                == (g.image_keys, g.all_keys))

        return first_line(spark, g.file, same)

    return locate


def value_line(spark: SparkSession | None, uri: str, label: str, value: str) -> int | None:
    """The line of the first event of table ``<owner>.<table>`` (``label`` is
    ``<owner>.<table>.<column>``) whose image holds ``value`` (its first 60 characters,
    as a value error quotes it) in that column."""
    owner, table, column = (label.split(".", 2) + ["", ""])[:3]

    def holds(c: dict[str, Any]) -> bool:
        if c["kind"] != "event" or (c["owner"], c["table"]) != (owner, table):
            return False
        for img in ("after", "before"):
            image = c["e"].get(img)
            if isinstance(image, dict) and column in image and image[column] is not None:
                v = image[column]
                text = v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))
                if text[:60] == value[:60]:
                    return True
        return False

    return first_line(spark, uri, holds)
