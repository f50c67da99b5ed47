"""The JVM libraries changeflow's Spark jobs are started with.

``make setup`` copies them from Maven Central (pinned in ``jvm/<set>/pom.xml``) into
``jars/<set>/`` under the project directory, so nothing is downloaded when a job runs
and no ``~/.m2`` or Ivy cache is needed. Sets:

* ``spark``: every Spark job and session: the Apache Iceberg runtime (the apply's target
  tables) and the JDBC drivers of Iceberg's catalog in the state store;

``CHANGEFLOW_JARS`` overrides the folder that holds the sets (a cluster deployment that
ships the jars elsewhere).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from changeflow.errors import ConfigError

#: Apache Iceberg's Spark SQL (MERGE INTO, CALL of its procedures, branches)
ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
#: the project directory (``include/changeflow/jvm.py`` -> the checkout's root)
PROJECT = Path(__file__).resolve().parents[2]


def jars_root() -> Path:
    """The folder holding the jar sets (``jars/`` of the project by default)."""
    override = os.environ.get("CHANGEFLOW_JARS")
    if override:
        return Path(override)
    home = os.environ.get("CHANGEFLOW_HOME")
    return (Path(home) if home else PROJECT) / "jars"


def jars(kind: str = "spark") -> list[str]:
    """The jars of one set, sorted (absolute paths).

    Raises:
        ConfigError: the set's folder is missing or empty (``make setup`` not run).
    """
    folder = jars_root() / kind
    found = sorted(str(p) for p in folder.glob("*.jar")) if folder.is_dir() else []
    if not found:
        raise ConfigError(
            f"the {kind} jars are missing from {folder}: run `make setup` (it copies them "
            f"from Maven Central, as pinned in jvm/{kind}/pom.xml), or set CHANGEFLOW_JARS")
    return found


def spark_jars_csv() -> str:
    """The Spark set as ``spark.jars`` / ``--jars`` takes it (comma-separated): for a
    cluster's master, whose executors fetch them from the driver."""
    return ",".join(jars("spark"))


def spark_class_path() -> str:
    """The Spark set as the driver's class path (``spark.driver.extraClassPath``), for a
    local master: driver and executors are one JVM, which loads them from the disk.

    Given as ``spark.jars`` instead, even as ``local:`` URIs, the executor copies every
    jar (687 MB with the S3 SDK) into the application's temporary folder
    (``/tmp/spark-*/userFiles-*``) before its first task, and a JVM that does not end
    cleanly (a killed job, a stopped task) leaves the copy behind: a day of tests and
    benchmarks left some 30 GB, and CI's disk filled. A session starts no slower this
    way (4.77 s against 4.94 s as ``local:`` URIs, each with its class archive).
    """
    return os.pathsep.join(jars("spark"))


def default_master() -> str:
    """The Spark master of a session no one gave one (``CHANGEFLOW_SPARK_MASTER``, else
    two local cores)."""
    return os.environ.get("CHANGEFLOW_SPARK_MASTER", "local[2]")


def local_cores(master: str) -> int | None:
    """The cores a local master runs tasks on (``local[*]``: this machine's); None for a
    cluster's master.

    >>> [local_cores(m) for m in ("local[2]", "local[3,4]", "local", "spark://h:7077")]
    [2, 3, 1, None]
    """
    if master == "local":
        return 1
    if not master.startswith("local["):
        return None
    n = master[len("local["):].split(",")[0].rstrip("]")
    if n == "*":
        return os.cpu_count() or 1
    return int(n) if n.isdigit() else None


def is_local_master(master: str) -> bool:
    """Whether a Spark master runs everything in this JVM.

    >>> [is_local_master(m) for m in ("local[2]", "local", "spark://h:7077")]
    [True, True, False]
    """
    return master == "local" or master.startswith("local[")


#: the kinds of driver JVM with a class archive (``scripts/cds_train.py``): ``session``
#: started by :func:`changeflow.spark.get_session`, ``submit`` by spark-submit with the
#: jars on the driver's class path (the DAGs' tasks)
CDS_KINDS = ("session", "submit")
#: beside ``-XX:SharedArchiveFile``: use the archive when it fits, silently
CDS_FLAGS = "-Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"

# Whole-stage generated code for a large rule set can exceed 8,000 bytes of bytecode per
# method, which HotSpot otherwise never compiles: it would run in the interpreter.
JIT_OPTIONS = "-XX:-DontCompileHugeMethods"
#: the driver's collector: the parallel one, not G1. A driver is a batch job on few
#: cores (in local mode its tasks run in it too): G1's concurrent work competes with
#: them. A fresh process's first apply pass: 15.6 s against 19.7 s, its survey step
#: 7.2-8.4 s against 12.2-15.4 s; warm passes alike (docs/architecture.md).
DRIVER_GC = "-XX:+UseParallelGC"
#: the driver's JIT: HotSpot's optimising compiler (C2) takes a method three times later
#: than by default (its four tier-4 thresholds), the quick one (C1) as before. On two
#: cores C2's compiler threads compete with the tasks while a fresh driver runs code once
#: or twice; the hot loops still reach C2. Ten times later made a fresh process applying
#: the benchmark's 100,000 changes 27.9 s against 31.2 s (medians of four alternating),
#: but code deoptimised by other work in the JVM (a table's load, a MERGE INTO) then took
#: ten times as long to reach C2 again: the next three passes' survey 1.17 s against
#: 0.60 s. Three times later keeps most of the fresh process's gain (23.3 s against
#: 22.4-22.8 s; HotSpot's thresholds 24.3-25.9 s) and those passes (3.49-3.93 s against
#: 4.27-5.03 s; docs/benchmarks.md). C1 alone
#: (``-XX:TieredStopAtLevel=1``) made the fresh process 24.7 s but every warm pass 9-13 s.
DRIVER_JIT = ("-XX:Tier4InvocationThreshold=15000 -XX:Tier4MinInvocationThreshold=1800 "
              "-XX:Tier4CompileThreshold=45000 -XX:Tier4BackEdgeThreshold=120000")

#: The Spark SQL settings of every changeflow session, whether ``get_session`` starts it
#: (tests, benchmarks, the CLI) or a spark-submit job's ``--conf`` does (the DAGs' tasks,
#: changeflow.airflow.submit): one list, so the two cannot drift apart.
SESSION_CONF: dict[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.enabled": "false",
    "spark.sql.sources.partitionOverwriteMode": "dynamic",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    # Row migration overlays old values with new ones with a plain map_concat, which
    # stays in generated code (see rules.migration.merged_values).
    "spark.sql.mapKeyDedupPolicy": "LAST_WIN",
    # PySpark's DataFrame debugging records the Python call site of every DataFrame and
    # Column call: three JVM round trips and a stack walk each, about a third of the
    # time a job spends building a plan of a few hundred expressions. The call sites are
    # changeflow's own code, which its error messages name already.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    "spark.sql.extensions": ICEBERG_EXTENSIONS,
    # Constraint propagation re-derives every constraint of a plan at each optimizer
    # pass; on the rule-set filter's join (a CASE per rule over a union of per-table
    # snapshot diffs) Spark 4.1 canonicalises Or-chains until the driver's heap is gone
    # (a 20-row demo capture: OutOfMemoryError after 70 s). It only adds inferred
    # IS NOT NULL filters, which the plans here do not need.
    "spark.sql.constraintPropagation.enabled": "false",
    # A job's cached frames (an apply pass's batch, effects and looked-up rows) live for
    # one pass: compressing their columns as they are cached costs more than it saves (a
    # warm 100,000-change apply: 4.44 s against 4.89 s, medians of seven and six
    # alternating applies in one process); they take more memory, and spill to disk past
    # it (MEMORY_AND_DISK).
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
}


def cds_archive(kind: str, jars_dir: str | Path | None = None) -> Path:
    """Where the class archive of a kind of driver JVM lives (``jars/cds/<kind>.jsa``).

    >>> cds_archive("submit", "/opt/cf/jars/spark").as_posix()
    '/opt/cf/jars/cds/submit.jsa'
    """
    base = Path(jars_dir).parent if jars_dir is not None else jars_root()
    return base / "cds" / f"{kind}.jsa"


def cds_options(kind: str, jars_dir: str | Path | None = None) -> str:
    """The JVM options that start a driver from its class archive (AppCDS).

    A Spark JVM loads and verifies some 20,000 classes as it starts and runs its first
    queries; from an archive made by ``make setup`` (``scripts/cds_train.py``) they are
    mapped instead: a one-shot job's session starts in about 3.8 s instead of 5.3 s, and
    its first pass runs about 1 s faster (docs/benchmarks.md). A missing archive, or one
    made for other jars or another JDK, is skipped silently (``-Xshare:auto``, CDS
    logging off): the JVM starts as it would without. ``CHANGEFLOW_CDS=off`` leaves the
    options out.

    >>> cds_options("submit", "/opt/cf/jars/spark").split()[0]
    '-XX:SharedArchiveFile=/opt/cf/jars/cds/submit.jsa'
    """
    if os.environ.get("CHANGEFLOW_CDS", "").lower() in ("off", "0", "false", "no"):
        return ""
    return f"-XX:SharedArchiveFile={cds_archive(kind, jars_dir)} {CDS_FLAGS}"


#: per gateway: one Jackson ``ObjectMapper`` (thread-safe; Spark's own Jackson)
_MAPPERS: dict[int, Any] = {}


def java_each(iterable: Any) -> Iterator[Any]:
    """The items of a Java ``Iterable`` (a ``List``, a ``Set``, Iceberg's scan tasks).

    A Python ``for`` over a py4j collection ends when Java's iterator throws
    ``NoSuchElementException``: the exception, its stack trace and a Python traceback
    cross the gateway, some 14 ms each time (an apply iterated the delete files of
    every data file it changes so: 0.2-0.3 s a pass). Here ``hasNext`` ends the loop.
    """
    it = iterable.iterator()
    while it.hasNext():
        yield it.next()


def java_class(exc: BaseException) -> str | None:
    """The Java class of an exception raised through py4j (``Py4JJavaError``), else None."""
    java = getattr(exc, "java_exception", None)
    return None if java is None else str(java.getClass().getName())


def java_dict(jmap: Any) -> dict[str, str]:
    """A Java ``Map<String, String>`` (an Iceberg snapshot summary, table properties) as
    a dict, in one call to the JVM.

    ``dict(jmap)`` through py4j costs about three calls per entry (an Iceberg snapshot
    summary has some 30 entries, a table's properties about 15), and an apply reads
    such maps a few dozen times a pass; here the map crosses once, as JSON written by
    the Jackson ``ObjectMapper`` Spark ships.
    """
    client = jmap._gateway_client  # noqa: SLF001  (py4j's own handle on its gateway)
    mapper = _MAPPERS.get(id(client))
    if mapper is None:
        from py4j.java_gateway import JavaClass

        mapper = JavaClass("com.fasterxml.jackson.databind.ObjectMapper", client)()
        _MAPPERS[id(client)] = mapper
    return json.loads(mapper.writeValueAsString(jmap))
