"""Building the SparkSession that jobs and tests share."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from changeflow.jvm import (
    DRIVER_GC,
    DRIVER_JIT,
    JIT_OPTIONS,
    SESSION_CONF,
    cds_options,
    default_master,
    is_local_master,
    spark_class_path,
    spark_jars_csv,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


#: Spark's logging for a quiet session: errors only (see :func:`get_session`)
QUIET_LOG4J = Path(__file__).with_name("log4j2-quiet.properties")


def get_session(app_name: str = "changeflow", *, master: str | None = None,
                quiet: bool = False) -> SparkSession:
    """Return the active SparkSession, or build one with changeflow's settings.

    Under ``spark-submit`` the master and resources come from the command line; the
    defaults here only fill what is unset (local mode with few shuffle partitions).

    Args:
        app_name: the application name shown in the Spark UI.
        master: the Spark master; ``None`` keeps what spark-submit set, else local.
        quiet: no console progress bars, and Spark logs errors only (the CLI without
            ``--verbose``). Applies when this call starts Spark's JVM.
    """
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    memory = os.environ.get("CHANGEFLOW_DRIVER_MEMORY", "4g")
    chosen = None
    # What spark-submit (or a session started already) set: kept, and only the rest
    # filled (a job's own properties, the pipeline's `spark` map, stay as given).
    given = _conf()
    if master or not os.environ.get("SPARK_ENV_LOADED") and "spark.master" not in given:
        chosen = master or default_master()
        builder = builder.master(chosen)
    for key, value in {**SESSION_CONF, "spark.driver.memory": memory,
                       "spark.sql.shuffle.partitions":
                           os.environ.get("CHANGEFLOW_SHUFFLE_PARTITIONS", "4")}.items():
        if key not in given:
            builder = builder.config(key, value)
    builder = _with_storage(builder, given)
    builder = _with_jars(builder, given, chosen)
    java_options = given.get("spark.driver.extraJavaOptions")
    # Quiet applies only to a JVM this call starts: a session that already runs (the
    # one a test run shares, or a job's) keeps its settings and its log level.
    quiet = quiet and not _jvm_started()
    # The heap starts at its full size: grown from the JVM's default (1/64 of the
    # machine's memory) it is collected far more often while a job warms up (a Debezium
    # capture's first run: 45 collections, 1.56 s, against 15 and 0.57 s).
    # CHANGEFLOW_JAVA_OPTIONS: more options for a JVM this call starts (after ours).
    options = " ".join(o for o in (JIT_OPTIONS, DRIVER_GC, DRIVER_JIT, f"-Xms{memory}",
                                   cds_options("session"),
                                   os.environ.get("CHANGEFLOW_JAVA_OPTIONS", "")) if o)
    if quiet:
        builder = builder.config("spark.ui.showConsoleProgress", "false")
        if not java_options:
            java_options = f"{options} -Dlog4j2.configurationFile={QUIET_LOG4J.as_uri()}"
            builder = builder.config("spark.driver.extraJavaOptions", java_options)
    elif not java_options:
        builder = builder.config("spark.driver.extraJavaOptions", options)
    if not quiet:
        return builder.getOrCreate()
    with _filtered_stderr():
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def _with_jars(builder: Any, given: dict[str, str], chosen: str | None) -> Any:
    """The Spark jar set: on the driver's class path of a local master's JVM this call
    starts (:func:`changeflow.jvm.spark_class_path`), else as ``spark.jars`` unless the
    JVM has them already (spark-submit's ``--jars`` or ``--driver-class-path``)."""
    if chosen is not None and is_local_master(chosen) and not _jvm_started():
        path = given.get("spark.driver.extraClassPath")
        return builder.config("spark.driver.extraClassPath", os.pathsep.join(
            p for p in (spark_class_path(), path) if p))
    master = chosen or given.get("spark.master", "")
    if "spark.jars" in given or is_local_master(master) and \
            "spark.driver.extraClassPath" in given:
        return builder
    return builder.config("spark.jars", spark_jars_csv())


#: what the JVM prints on start-up whatever its logging says (a quiet session drops it)
_START_NOISE = (b"WARNING: Using incubator modules", b"Setting default log level",
                b"To adjust logging level use sc.setLogLevel")


_T = TypeVar("_T")
_R = TypeVar("_R")


def concurrently(spark: SparkSession, fn: Callable[[_T], _R], items: Sequence[_T],
                 workers: int) -> list[_R]:
    """``[fn(x) for x in items]``, up to ``workers`` at a time in driver threads.

    Each thread submits its own Spark jobs, so the planning, scheduling and commits of
    many small jobs (one table's each) overlap instead of queueing; the threads inherit
    the caller's Spark local properties and the session's tags. The results come in
    ``items``' order. Every call ends before anything is returned or raised; an error is
    the first in order.

    Each call gets its own copy of the properties: a wrapper of
    ``pyspark.inheritable_thread_target`` hands its one copy to every thread that runs
    it, so the threads would share one mutable ``Properties``, and one query's
    ``spark.sql.execution.id`` would be read by another's adaptive plan.
    """
    if workers <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    from pyspark import inheritable_thread_target

    with ThreadPoolExecutor(max_workers=min(workers, len(items)),
                            thread_name_prefix="changeflow-table") as pool:
        futures = [pool.submit(inheritable_thread_target(spark)(fn), x) for x in items]
    return [f.result() for f in futures]


#: words in the names of the logical plan nodes that run Python on the executors (Spark's
#: ``BatchEvalPython`` and ``ArrowEvalPython`` for UDFs, ``MapInArrow``, ``MapInPandas``,
#: ``FlatMapGroupsInPandas`` ...)
PYTHON_NODES = ("Python", "Pandas", "InArrow")
#: the nondeterministic expression that gives the same rows every time: the rule filter
#: computes with it only to keep Spark's optimizer from inlining the rule set twice
#: (:func:`changeflow.rules.ruleset._once`)
SAME_ROWS = "SparkPartitionID"


def worth_caching(df: DataFrame) -> bool:
    """Whether a frame read more than once should be cached rather than computed again:
    computing it runs Python on the executors (a user's function is called once per
    row, as its author expects, and Python costs more than a cache) or something
    nondeterministic (each read would see other values; the partition id, see
    :data:`SAME_ROWS`, is not counted). Otherwise reading the source again is what Spark
    does best (column pruning, no cache to build).
    """
    stack = [df._jdf.queryExecution().optimizedPlan()]  # noqa: SLF001
    while stack:
        node = stack.pop()
        name = str(node.getClass().getSimpleName())
        if any(word in name for word in PYTHON_NODES):
            return True
        if not node.deterministic() and any(
                _nondeterministic(e) for e in _seq(node.expressions())):
            return True
        stack.extend(_seq(node.children()))
    return False


def _nondeterministic(expr: Any) -> bool:
    """Whether a Catalyst expression computes something nondeterministic, other than
    :data:`SAME_ROWS` (the expressions whose children are all deterministic are where
    the nondeterminism is their own: ``rand``, ``uuid``, the partition id)."""
    if expr.deterministic():
        return False
    kids = [k for k in _seq(expr.children()) if not k.deterministic()]
    if not kids:
        return str(expr.getClass().getSimpleName()) != SAME_ROWS
    return any(_nondeterministic(k) for k in kids)


def _seq(seq: Any) -> list[Any]:
    """The items of a Scala ``Seq`` (by its iterator's ``hasNext``)."""
    out, it = [], seq.iterator()
    while it.hasNext():
        out.append(it.next())
    return out


def _jvm_started() -> bool:
    from pyspark import SparkContext

    return SparkContext._gateway is not None


@contextlib.contextmanager
def _filtered_stderr() -> Iterator[None]:
    """Start Spark's JVM with its stderr passed through a filter of start-up noise.

    The JVM inherits file descriptor 2 when it starts: for that moment it is a pipe,
    which a thread copies to the real stderr for the JVM's lifetime, less the lines of
    :data:`_START_NOISE`. Errors the JVM logs later still reach stderr.
    """
    try:
        sys.stderr.flush()
        read_end, write_end = os.pipe()
        real = os.dup(2)
        keep = os.dup(2)
    except OSError:  # no usable stderr: start unfiltered
        yield
        return

    def pump() -> None:
        # Reads until the JVM closes its stderr, whatever happens to the copy: a pump
        # that stopped would let the pipe fill up, and the JVM block on its next write.
        forward = True
        with os.fdopen(read_end, "rb") as src:
            for line in src:
                if forward and not line.startswith(_START_NOISE):
                    forward = _write_all(real, line)

    threading.Thread(target=pump, name="spark-stderr", daemon=True).start()
    os.dup2(write_end, 2)
    os.close(write_end)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(keep, 2)
        os.close(keep)


def _write_all(fd: int, data: bytes) -> bool:
    """Write all of ``data`` to ``fd``; False when ``fd`` can no longer be written."""
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:
        return False
    return True


def _with_storage(builder: SparkSession.Builder, given: dict[str, str]
                  ) -> SparkSession.Builder:
    """The object store's S3A settings (:mod:`changeflow.storage`), unless ``given``
    (the properties set already) holds them."""
    from changeflow import storage

    if not storage.in_use():
        return builder
    for k, v in storage.settings().spark_properties().items():
        if k not in given:
            builder = builder.config(k, v)
    return builder


def _conf() -> dict[str, str]:
    """The Spark properties of the JVM this process talks to: spark-submit's (its
    ``--conf``, ``--jars``, ``--driver-memory``), or those of a session started already;
    none before a JVM runs.

    Under spark-submit the JVM runs before the Python application starts, which finds it
    through ``PYSPARK_GATEWAY_PORT``; until a SparkContext connects to it, a SparkConf
    would be an empty Python one: this connects first.
    """
    from pyspark import SparkConf, SparkContext

    if os.environ.get("PYSPARK_GATEWAY_PORT") and SparkContext._gateway is None:
        SparkContext._ensure_initialized()
    return dict(SparkConf().getAll())
