"""Apply handlers: user Python callables registered by dotted path (SPEC §7).

How they run on Spark:

* **DML handlers** run on the executors. The row LCRs of the tables that have one are
  repartitioned by table and sorted by run order (commit position, source,
  transaction, position) within each partition, so each handler sees its table's
  LCRs in commit order; ``mapInArrow`` turns each into a :class:`RowLCR`, calls the
  handler, and emits what the handler executed (:meth:`RowLCR.execute`). The rest of
  the apply (conflicts, images) takes the emitted LCRs in place of the originals.
* **DDL handler** and **precommit handler** run on the driver: DDL LCRs are few, and
  a precommit handler sees one call per source transaction (commit order).
* **Message handler** runs on the executors for the user messages of the apply's
  queue, in enqueue order within each partition (each message is its own
  transaction, as in a non-transactional queue).

A handler that raises fails its transaction (or message), which goes to the error
queue whole with the exception; the other transactions go on. A handler path that
does not import fails the run before anything is applied.

Handler modules must be importable where the handler runs: installed, or on
``PYTHONPATH``. A top-level module loaded from a ``.py`` file is shipped to the
executors automatically (``SparkContext.addPyFile``); ship packages with
``spark-submit --py-files``.
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from changeflow import lcr as contract
from changeflow.apply.config import HandlerConfig
from changeflow.apply.records import HandlerError, RowLCR, UserMessage

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)
ERROR_COLUMN = "_cf_error"
_shipped: set[str] = set()


def load(path: str, what: str) -> Callable[..., Any]:
    """Import a handler by ``module:function`` (or ``module.function``).

    Raises:
        HandlerError: the module does not import, or has no such callable.
    """
    module, sep, attr = path.partition(":")
    if not sep:
        module, _, attr = path.rpartition(".")
    try:
        mod = importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001  (any import failure is the user's to see)
        raise HandlerError(
            f"{what} handler {path!r}: module {module!r} cannot be imported: "
            f"{type(exc).__name__}: {exc}") from exc
    fn = getattr(mod, attr, None)
    if not callable(fn):
        raise HandlerError(f"{what} handler {path!r}: module {module!r} has no callable "
                           f"{attr!r}")
    return fn  # type: ignore[no-any-return]


def ship(spark: SparkSession | None, path: str) -> None:
    """Make a handler's module importable on the executors (a top-level ``.py`` file)."""
    module = path.partition(":")[0] if ":" in path else path.rpartition(".")[0]
    mod = sys.modules.get(module)
    file = getattr(mod, "__file__", None)
    if spark is None or "." in module or not file or not file.endswith(".py"):
        return
    if "site-packages" in file or file in _shipped:
        return
    spark.sparkContext.addPyFile(file)
    _shipped.add(file)


@dataclass
class Handlers:
    """An apply's handlers, imported (so a bad path fails before anything is applied)."""

    dml: dict[tuple[str, str], str] = field(default_factory=dict)  # (table, op) -> path
    ddl: Callable[..., Any] | None = None
    message: str | None = None
    precommit: Callable[..., Any] | None = None
    ddl_path: str | None = None
    precommit_path: str | None = None

    @classmethod
    def from_config(cls, config: HandlerConfig, spark: SparkSession | None = None) -> Handlers:
        """Import every handler of an apply's configuration.

        Raises:
            HandlerError: a path does not import or names no callable.
        """
        out = cls()
        for h in config.dml:
            load(h.handler, f"DML ({h.table} {h.operation})")
            ship(spark, h.handler)
            out.dml[(h.table, h.operation)] = h.handler
        if config.ddl:
            out.ddl, out.ddl_path = load(config.ddl, "DDL"), config.ddl
        if config.message:
            load(config.message, "message")
            ship(spark, config.message)
            out.message = config.message
        if config.precommit:
            out.precommit = load(config.precommit, "precommit")
            out.precommit_path = config.precommit
        return out

    def dml_tables(self) -> set[str]:
        """Tables with at least one DML handler."""
        return {t for t, _ in self.dml}


def _as_items(v: Any) -> Any:
    if isinstance(v, dict):
        return list(v.items())
    return v


def _out_row(row: dict[str, Any]) -> dict[str, Any]:
    out = {n: row.get(n) for n in contract.FIELD_NAMES}
    for m in ("old_values", "new_values", "payload"):
        out[m] = _as_items(out[m])
    out[ERROR_COLUMN] = None
    return out


def _error_row(row: dict[str, Any], text: str) -> dict[str, Any]:
    out = _out_row(row)
    out[ERROR_COLUMN] = text[:4000]
    return out


def out_schema() -> pa.Schema:
    """The contract's Arrow schema plus the error column."""
    import pyarrow as pa

    return contract.arrow_schema().append(pa.field(ERROR_COLUMN, pa.string()))


def run_dml_partition(batches: Iterator[pa.RecordBatch], paths: dict[tuple[str, str], str],
                      ) -> Iterator[pa.RecordBatch]:
    """The DML handlers over one partition's row LCRs (sorted in run order)."""
    import pyarrow as pa

    schema = out_schema()
    cache: dict[str, Callable[..., Any]] = {}
    failed: set[tuple[Any, ...]] = set()
    out: list[dict[str, Any]] = []
    for rb in batches:
        for row in rb.to_pylist():
            txn = (row["source_database_name"], row["commit_scn"], row["transaction_id"])
            if txn in failed:
                continue
            table = f"{row['object_owner']}.{row['object_name']}".lower()
            path = paths.get((table, row["command_type"])) or paths.get((table, "DEFAULT"))
            if path is None:
                out.append(_out_row(row))
                continue
            try:
                fn = cache.get(path) or cache.setdefault(path, load(path, "DML"))
                rec = RowLCR(row)
                fn(rec)
            except Exception as exc:  # noqa: BLE001  (a handler error fails its transaction)
                failed.add(txn)
                out.append(_error_row(row, f"DML handler {path} raised on {table} "
                                           f"{row['command_type']}: {type(exc).__name__}: {exc}"))
                continue
            out.extend(_out_row(r) for r in rec.executed)
            if len(out) >= 10_000:
                yield pa.RecordBatch.from_pylist(out, schema=schema)
                out = []
    if out:
        yield pa.RecordBatch.from_pylist(out, schema=schema)


def run_dml(spark: SparkSession, rows: DataFrame, handlers: Handlers) -> DataFrame:
    """Run the DML handlers over the row LCRs of their tables (see the module docstring).

    Returns:
        The LCRs the handlers executed plus one error row per failed transaction
        (``_cf_error`` set), with the contract's columns.
    """
    from pyspark.sql import functions as F

    from changeflow.queues.arrow_io import _filesystem  # noqa: F401  (keeps pyarrow imported)

    paths = dict(handlers.dml)
    schema = _spark_out_schema()
    ordered = rows.repartition(F.lower(F.concat_ws(".", "object_owner", "object_name"))) \
        .sortWithinPartitions("object_owner", "object_name", "commit_scn",
                              "source_database_name", "transaction_id", "position")
    return ordered.mapInArrow(lambda it: run_dml_partition(it, paths), schema)


def _spark_out_schema() -> Any:
    from pyspark.sql import types as T

    return T.StructType(list(contract.spark_schema().fields) + [
        T.StructField(ERROR_COLUMN, T.StringType())])


def run_message_partition(batches: Iterator[pa.RecordBatch], path: str | None,
                          apply: str) -> Iterator[pa.RecordBatch]:
    """The message handler over one partition's user messages: emits one row per failure."""
    import pyarrow as pa

    schema = out_schema()
    out: list[dict[str, Any]] = []
    fn = load(path, "message") if path else None
    for rb in batches:
        for row in rb.to_pylist():
            if fn is None:
                out.append(_error_row(row, f"apply {apply} has no message handler for user "
                                           f"message type {row.get('msg_type_name')!r}"))
                continue
            try:
                fn(UserMessage(row))
            except Exception as exc:  # noqa: BLE001  (a handler error fails that message)
                out.append(_error_row(row, f"message handler {path} raised: "
                                           f"{type(exc).__name__}: {exc}"))
    if out:
        yield pa.RecordBatch.from_pylist(out, schema=schema)


def run_messages(messages: DataFrame, handlers: Handlers, apply: str) -> DataFrame:
    """Call the message handler on every user message; the failures, as error rows."""
    path = handlers.message
    ordered = messages.sortWithinPartitions("enq_time", "msg_id")
    return ordered.mapInArrow(lambda it: run_message_partition(it, path, apply),
                              _spark_out_schema())
