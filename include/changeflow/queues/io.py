"""Reading and writing queue batches with Spark.

Writes go to a fresh batch directory; the batch becomes visible only when the caller
commits it in the catalog (see :mod:`changeflow.queues.catalog`). Statistics are
gathered with ``DataFrame.observe`` during the write itself, so an enqueue reads its
data once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from changeflow import fs, lcr, storage
from changeflow.errors import DestinationUnavailableError, QueueDataError, SchemaMismatchError
from changeflow.queues.catalog import Batch, NewBatch, QueueCatalog

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType


#: What a write with ``warm_quality`` starts beside it (queues know nothing of what checks
#: their batches: :mod:`changeflow.quality` appends its warm-up when it is imported).
WARM_UPS: list[Callable[[], None]] = []


def conform(df: DataFrame, *, origin: str | None = None) -> DataFrame:
    """Select the contract's columns in order, checking the schema first.

    Args:
        df: messages that should already follow the LCR contract.
        origin: what produced them, named in a schema error.

    Raises:
        SchemaMismatchError: naming the first field that differs.
    """
    lcr.check_schema(df.schema, path=origin)
    return df.select(*lcr.FIELD_NAMES)


def write_batch(
    spark: SparkSession,
    catalog: QueueCatalog,
    queue: str,
    df: DataFrame,
    *,
    producer: str,
    dedup_key: str | None = None,
    source_last_seq: int | None = None,
    source_first_seq: int | None = None,
    warm_quality: bool = False,
) -> NewBatch | None:
    """Write messages as a new, not yet visible, batch of ``queue``.

    ``warm_quality``: the stage checks the batch next; the checks warm up beside the
    write (:data:`WARM_UPS`: Great Expectations' import, which :mod:`changeflow.quality`
    registers).

    Returns:
        The batch to hand to :meth:`QueueCatalog.commit_batch`, or ``None`` when
        ``df`` is empty (nothing is left on disk then).
    """
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    df = conform(df, origin=f"batch for queue {queue}")
    batch_id, path = catalog.new_batch_path(queue)
    fs.configure_hadoop(spark)  # S3A's settings, on a session started without them
    obs = Observation(f"enqueue_{batch_id}")
    observed = df.observe(
        obs,
        F.count(F.lit(1)).alias("n"),
        F.min("commit_scn").alias("min_scn"),
        F.max("commit_scn").alias("max_scn"),
        F.min(F.coalesce("commit_time", "enq_time")).alias("oldest"),
    )
    if warm_quality:
        for warm_up in WARM_UPS:
            warm_up()
    try:
        observed.write.mode("errorifexists").parquet(path)
    except BaseException:
        fs.delete(spark, path)  # a failed write leaves no batch directory behind
        raise
    stats = obs.get
    if not stats.get("n"):
        fs.delete(spark, path)
        return None
    n_bytes = sum(size for _, size in fs.data_files(spark, path))
    return NewBatch(
        batch_id=batch_id,
        path=path,
        n_messages=int(stats["n"]),
        n_bytes=n_bytes,
        producer=producer,
        dedup_key=dedup_key,
        source_last_seq=source_last_seq,
        source_first_seq=source_first_seq,
        min_commit_scn=stats.get("min_scn"),
        max_commit_scn=stats.get("max_scn"),
        oldest_time=stats.get("oldest"),
    )


def enqueue(
    spark: SparkSession,
    catalog: QueueCatalog,
    queue: str,
    df: DataFrame,
    *,
    producer: str,
    dedup_key: str | None = None,
) -> int | None:
    """Write and commit a batch in one call. Returns its sequence number.

    Returns ``None`` when ``df`` is empty or ``dedup_key`` was committed before (the
    freshly written files are removed then).
    """
    if dedup_key and catalog.find_dedup(queue, dedup_key) is not None:
        return None
    batch = write_batch(spark, catalog, queue, df, producer=producer, dedup_key=dedup_key)
    if batch is None:
        return None
    seq = catalog.commit_batch(queue, batch)
    if seq is None:
        fs.delete(spark, batch.path)
    return seq


def read_batches(spark: SparkSession, batches: list[Batch]) -> DataFrame:
    """Read committed batches as one DataFrame of messages.

    Every batch is checked before anything is read: its directory must exist and its
    Parquet schema must be the contract's. The checks read one footer per batch with
    pyarrow, in parallel and without a Spark job (a pass over 1,000 small batches would
    otherwise start 1,000 jobs); file systems pyarrow cannot reach are checked through
    Spark. Data-page corruption surfaces later, in the action; wrap that action in
    :func:`guard` to get an error naming the batch.

    Raises:
        QueueDataError: a batch directory is missing or unreadable.
        SchemaMismatchError: a batch does not follow the contract.
    """
    schema = lcr.spark_schema()
    if not batches:
        return spark.createDataFrame([], schema)
    fs.configure_hadoop(spark)
    for b in batches:
        if not b.path:
            raise QueueDataError(f"batch {b.seq} of queue {b.queue} was purged")
    files = _check_with_arrow(batches)
    if files is None:
        for b in batches:
            _check_with_spark(spark, b)
        return spark.read.schema(schema).parquet(*[b.path for b in batches])
    return spark.read.schema(schema).parquet(*files)


def _check_with_spark(spark: SparkSession, b: Batch) -> None:
    if not fs.data_files(spark, b.path):
        raise QueueDataError(
            f"batch {b.seq} of queue {b.queue}: no Parquet files at {b.path} (missing)")
    try:
        found = spark.read.parquet(b.path).schema
    except Exception as exc:  # noqa: BLE001  (Spark raises many kinds)
        raise QueueDataError(
            f"batch {b.seq} of queue {b.queue}: cannot read Parquet at {b.path}: "
            f"{_first_line(exc)}") from exc
    lcr.check_schema(_readable(found), path=b.path)


def _readable(found: StructType) -> StructType:
    """A batch's schema as the contract reads it (:func:`as_nullable_as`)."""
    widened = as_nullable_as(found, lcr.spark_schema())
    assert isinstance(widened, type(found))
    return widened


def as_nullable_as(found: DataType, contract: DataType) -> DataType:
    """``found`` with the nullability of ``contract`` wherever the contract allows NULL.

    A batch whose list elements, map values or struct fields are written non-nullable
    (Spark drops a cast that only makes an array's elements nullable, so a column of
    literal arrays, ``key_columns``, is written ``required``) holds values the contract
    allows, and Spark reads it with the contract's schema: it is not refused. Types are
    not changed, and a field the contract requires stays as the file has it.
    """
    from pyspark.sql import types as T

    if isinstance(found, T.ArrayType) and isinstance(contract, T.ArrayType):
        return T.ArrayType(as_nullable_as(found.elementType, contract.elementType),
                           found.containsNull or contract.containsNull)
    if isinstance(found, T.MapType) and isinstance(contract, T.MapType):
        return T.MapType(as_nullable_as(found.keyType, contract.keyType),
                         as_nullable_as(found.valueType, contract.valueType),
                         found.valueContainsNull or contract.valueContainsNull)
    if isinstance(found, T.StructType) and isinstance(contract, T.StructType):
        want = {f.name: f for f in contract.fields}
        return T.StructType([
            T.StructField(f.name, as_nullable_as(f.dataType, want[f.name].dataType),
                          f.nullable or want[f.name].nullable, f.metadata)
            if f.name in want else f for f in found.fields])
    return found


def _check_with_arrow(batches: list[Batch]) -> list[str] | None:
    """Check every batch with pyarrow; return their data files, or None to use Spark."""
    from concurrent.futures import ThreadPoolExecutor

    from changeflow.queues.arrow_io import _filesystem

    try:
        handles = [_filesystem(b.path) for b in batches]
    except storage.StorageAccessError:
        raise
    except Exception:  # noqa: BLE001  (a scheme pyarrow does not know: Spark checks)
        return None
    with ThreadPoolExecutor(max_workers=8) as pool:
        found = list(pool.map(_check_one, batches, handles))
    return [f for files in found for f in files]


def _check_one(b: Batch, handle: tuple[object, str]) -> list[str]:
    import pyarrow.parquet as pq
    from pyarrow import fs as pafs
    from pyspark.sql.pandas.types import from_arrow_schema

    filesystem, inner = handle
    try:
        infos = filesystem.get_file_info(  # type: ignore[attr-defined]
            pafs.FileSelector(inner, recursive=True, allow_not_found=True))
    except OSError as exc:
        if storage.is_object_store(b.path) and storage.is_store_error(exc):  # not the batch's
            raise storage.error_for(exc, b.path, f"listing batch {b.seq} of queue {b.queue}"
                                    ) from exc
        raise QueueDataError(f"batch {b.seq} of queue {b.queue}: cannot list {b.path}: "
                             f"{_first_line(exc)}") from exc
    data = sorted(i.path for i in infos if i.type == pafs.FileType.File
                  and i.base_name.endswith(".parquet") and not i.base_name.startswith(("_", ".")))
    if not data:
        raise QueueDataError(
            f"batch {b.seq} of queue {b.queue}: no Parquet files at {b.path} (missing)")
    try:
        arrow = pq.read_schema(data[0], filesystem=filesystem)
    except Exception as exc:  # noqa: BLE001  (pyarrow raises several kinds for bad footers)
        if storage.is_object_store(b.path) and storage.is_store_error(exc):
            raise storage.error_for(exc, b.path, f"reading batch {b.seq} of queue {b.queue}"
                                    ) from exc
        raise QueueDataError(
            f"batch {b.seq} of queue {b.queue}: cannot read Parquet at {b.path}: "
            f"{_first_line(exc)}") from exc
    found = from_arrow_schema(arrow, prefer_timestamp_ntz=True)
    lcr.check_schema(_readable(found), path=b.path)
    prefix = b.path[: len(b.path) - len(inner)] if b.path.endswith(inner) else ""
    return [prefix + p if prefix else p for p in data]


@contextmanager
def guard(batches: list[Batch], *, destination: str | None = None) -> Iterator[None]:
    """Name the site of a Spark failure while reading ``batches`` (and writing a batch).

    A failure that names one of the batches' files is a :class:`QueueDataError`
    (terminal: the batch must be set aside). Any other I/O failure of a stage writing
    into ``destination`` is the destination's: a
    :class:`~changeflow.errors.DestinationUnavailableError` (transient) naming it.
    """
    try:
        yield
    except (QueueDataError, SchemaMismatchError):
        raise
    except Exception as exc:
        text = str(exc)
        on_store = next((b.path for b in batches if b.path and storage.is_object_store(b.path)),
                        None)
        if on_store is not None and (err := storage.jvm_error_for(
                text, on_store, f"reading batches {[b.seq for b in batches]} of queue "
                f"{batches[0].queue}" + (f" into {destination}" if destination else ""))):
            raise err from exc  # the store's trouble: no batch is set aside for it
        culprit = next((b for b in batches if b.path and b.path in text), None)
        if culprit is not None:
            raise QueueDataError(
                f"batch {culprit.seq} of queue {culprit.queue} at {culprit.path} is corrupt or "
                f"missing: {_first_line(exc)}") from exc
        if destination is not None and _io_failure(text):
            raise DestinationUnavailableError(
                f"destination queue {destination} cannot be written: {_first_line(exc)}"
            ) from exc
        if "parquet" not in text.lower() and "FileNotFound" not in text:
            raise
        raise QueueDataError(
            f"one of batches {[b.seq for b in batches]} of queue {batches[0].queue} is corrupt "
            f"or missing: {_first_line(exc)}") from exc


def _io_failure(text: str) -> bool:
    markers = ("Mkdirs failed", "Permission denied", "AccessDenied", "No space left",
               "Read-only file system", "IOException", "FileAlreadyExists", "Unable to create",
               "Failed to rename", "ConnectException", "UnknownHost")
    return any(m in text for m in markers)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:400]
