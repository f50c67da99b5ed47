"""A target table's own Parquet files (delete files, added data files) on the driver:
by Arrow where it reaches their location (a local path, the object store), else
through the table's Iceberg ``FileIO`` (Java)."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from changeflow import storage

if TYPE_CHECKING:
    import pyarrow as pa


def reachable(location: str) -> bool:
    """Whether Arrow reaches a file of the table itself.

    >>> reachable("file:/w/t/data/x.parquet"), reachable("hdfs://nn/w/x.parquet")
    (True, False)
    """
    return location.startswith(("/", "file:")) or storage.is_object_store(location)


def store(fio: Any, location: str, blob: bytes) -> None:
    """Write a new file of the table."""
    if reachable(location):
        fs, path = storage.filesystem(location)
        if not storage.is_object_store(location):
            fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        with fs.open_output_stream(path) as out:
            out.write(blob)
        return
    out = fio.newOutputFile(location).create()
    try:
        out.write(bytearray(blob))
    finally:
        out.close()


def read(fio: Any, locations: list[str], columns: list[str]) -> pa.Table:
    """Columns of the table's Parquet files."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not locations:
        raise ValueError("no files to read")
    if all(reachable(loc) for loc in locations):
        fs, _ = storage.filesystem(locations[0])
        return pq.read_table([storage.filesystem(loc)[1] for loc in locations],
                             filesystem=fs, columns=columns)
    parts = []
    for loc in locations:
        stream = fio.newInputFile(loc).newStream()
        try:
            blob = bytes(stream.readAllBytes())
        finally:
            stream.close()
        parts.append(pq.read_table(io.BytesIO(blob), columns=columns))
    return pa.concat_tables(parts)


def positions(fio: Any, locations: list[str]) -> pa.Array:
    """The positions file-scoped position delete files delete (every row names the same
    data file), as one array."""
    return read(fio, locations, ["pos"]).column("pos").combine_chunks()
