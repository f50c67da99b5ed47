"""Reading and writing queue batches with pyarrow, without a SparkSession.

Log-based captures produce many small batches at a high rate; starting a Spark job
for each would cost more than the work itself. These functions write the same batch
layout Spark does (a directory of ``*.parquet`` files following
:func:`changeflow.lcr.arrow_schema`, which Spark reads back as exactly
:func:`changeflow.lcr.spark_schema`), so every other part of changeflow reads these
batches unchanged. A batch becomes visible only when the caller commits it with
:meth:`changeflow.queues.catalog.QueueCatalog.commit_batch`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from typing import TYPE_CHECKING, Any

from changeflow import lcr, storage
from changeflow.errors import QueueDataError, SchemaMismatchError
from changeflow.queues.catalog import Batch, NewBatch, QueueCatalog

if TYPE_CHECKING:
    import pyarrow as pa


def _filesystem(uri: str) -> tuple[Any, str]:
    """The pyarrow file system of a path or URI, and the path inside it.

    Object stores get the settings Spark's S3A gets (:func:`changeflow.storage.filesystem`).
    """
    return storage.filesystem(uri)


def _failed(exc: BaseException, path: str, action: str) -> Exception | None:
    """The object store's error for a failed request on ``path`` (None: not one)."""
    if storage.is_object_store(path) and storage.is_store_error(exc):
        return storage.error_for(exc, path, action)
    return None


def conform_arrow(table: pa.Table, *, origin: str) -> pa.Table:
    """Reorder and cast a table to the LCR contract's Arrow schema.

    Raises:
        SchemaMismatchError: a contract field is missing, an extra one is present, or a
            field cannot be cast to the contract's type.
    """
    schema = lcr.arrow_schema()
    extra = sorted(set(table.column_names) - set(lcr.FIELD_NAMES))
    if extra:
        raise SchemaMismatchError("field is not part of the LCR contract", path=origin,
                                  field=extra[0])
    columns = []
    for f in schema:
        if f.name not in table.column_names:
            raise SchemaMismatchError("required field is missing", path=origin, field=f.name)
        col = table.column(f.name)
        if col.type != f.type:
            try:
                col = col.cast(f.type)
            except Exception as exc:  # noqa: BLE001  (Arrow raises several kinds)
                raise SchemaMismatchError(
                    f"type is {col.type}, the contract says {f.type}: {exc}", path=origin,
                    field=f.name,
                ) from exc
        columns.append(col)
    import pyarrow as pa

    return pa.Table.from_arrays(columns, schema=schema)


def write_arrow_batch(
    catalog: QueueCatalog,
    queue: str,
    table: pa.Table,
    *,
    producer: str,
    dedup_key: str | None = None,
    row_group_size: int = 65536,
) -> NewBatch | None:
    """Write messages as a new, not yet visible, batch of ``queue``.

    Returns:
        The batch to hand to :meth:`QueueCatalog.commit_batch`, or ``None`` when the
        table is empty (nothing is written then).
    """
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if table.num_rows == 0:
        return None
    table = conform_arrow(table, origin=f"batch for queue {queue}")
    batch_id, path = catalog.new_batch_path(queue)
    fs, inner = _filesystem(path)
    file = f"{inner}/part-00000-{batch_id}.parquet"
    try:
        fs.create_dir(inner, recursive=True)
        # one object, written whole: on an object store nothing is renamed, and the batch
        # becomes visible only by its catalog row
        pq.write_table(table, file, filesystem=fs, compression="snappy",
                       row_group_size=row_group_size)
        n_bytes = fs.get_file_info(file).size
    except OSError as exc:
        if (err := _failed(exc, path, f"writing a batch of queue {queue}")) is not None:
            with contextlib.suppress(Exception):
                fs.delete_dir(inner)
            raise err from exc
        raise
    scn = table.column("commit_scn")
    times = pc.coalesce(table.column("commit_time"), table.column("enq_time"))
    oldest = pc.min(times).as_py()
    return NewBatch(
        batch_id=batch_id,
        path=path,
        n_messages=table.num_rows,
        n_bytes=int(n_bytes or 0),
        producer=producer,
        dedup_key=dedup_key,
        min_commit_scn=pc.min(scn).as_py(),
        max_commit_scn=pc.max(scn).as_py(),
        oldest_time=oldest if isinstance(oldest, dt.datetime) else None,
    )


def delete_batch_files(path: str) -> None:
    """Remove a written batch directory that was not committed."""
    fs, inner = _filesystem(path)
    with contextlib.suppress(FileNotFoundError):
        fs.delete_dir(inner)


def read_arrow_batches(batches: list[Batch]) -> pa.Table:
    """Read committed batches (written by Spark or by pyarrow) as one Arrow table.

    Raises:
        QueueDataError: a batch was purged, or its files are missing or unreadable.
        SchemaMismatchError: a batch does not follow the contract.
    """
    import pyarrow as pa

    tables = []
    for b in batches:
        if not b.path:
            raise QueueDataError(f"batch {b.seq} of queue {b.queue} was purged")
        tables.append(read_arrow_dir(b.path, f"batch {b.seq} of queue {b.queue}"))
    if not tables:
        return lcr.arrow_schema().empty_table()
    return pa.concat_tables(tables)


def read_arrow_dir(path: str, what: str) -> pa.Table:
    """Read one batch directory's Parquet files (``what`` names it in errors).

    Raises:
        QueueDataError: the files are missing or unreadable.
        SchemaMismatchError: the batch does not follow the contract.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    fs, inner = _filesystem(path)
    try:
        infos = fs.get_file_info(_selector(inner))
        files = sorted(i.path for i in infos if i.path.endswith(".parquet"))
        if not files:
            raise QueueDataError(f"{what}: no Parquet files at {path} (missing)")
        part = pq.read_table(files, filesystem=fs)
    except (OSError, pa.ArrowInvalid) as exc:
        if (err := _failed(exc, path, f"reading {what}")) is not None:
            raise err from exc
        raise QueueDataError(f"{what}: cannot read Parquet at {path}: {exc}") from exc
    return conform_arrow(part, origin=path)


def _selector(inner: str) -> Any:
    from pyarrow import fs as pafs

    return pafs.FileSelector(inner, recursive=True, allow_not_found=True)
