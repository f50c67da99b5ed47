"""Quarantine: where a batch that failed a blocking check is kept, with its result.

A quarantined LCR batch is moved (a rename, atomic on HDFS and local disks) from its
queue directory to ``<staging_root>/_quarantine/<owner>/<queue>/batch-<id>/``; delta
files written by an apply go to ``<target_root>/_quarantine/<table>/<delta dir>/``.
The validation result is written beside the data as ``_validation.json`` (Spark and
Parquet readers ignore files starting with ``_``, so the directory stays readable as a
batch). Nothing in the catalog references a quarantined directory, so no reader ever
sees it; an operator inspects it, fixes the source, and re-runs the stage.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from changeflow import fs

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

RESULT_FILE = "_validation.json"


def _fs(spark: SparkSession, uri: str) -> tuple[Any, Any]:
    jvm: Any = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
    path = jvm.org.apache.hadoop.fs.Path(uri)
    return path.getFileSystem(conf), path


def move(spark: SparkSession, src: str, dest: str) -> str:
    """Move a directory to ``dest`` (parents created). Returns ``dest``.

    Raises:
        OSError: the file system refused the rename.
    """
    hfs, s = _fs(spark, src)
    _, d = _fs(spark, dest)
    hfs.mkdirs(d.getParent())
    if hfs.exists(s) and not hfs.rename(s, d):
        raise OSError(f"cannot move {src} to {dest}")
    return dest


def write_result(spark: SparkSession, directory: str, result: dict[str, Any]) -> str:
    """Write a validation result as ``_validation.json`` inside a directory."""
    hfs, p = _fs(spark, fs.join(directory, RESULT_FILE))
    out = hfs.create(p, True)
    try:
        out.write(bytearray(json.dumps(result, indent=2, default=str).encode()))
    finally:
        out.close()
    return str(p.toString())


def batch_location(staging_root: str, queue: str, batch_path: str) -> str:
    """Where a queue batch is quarantined.

    >>> batch_location("/s", "hr.q", "/s/hr/q/batch-ab12")
    '/s/_quarantine/hr/q/batch-ab12'
    """
    owner, name = queue.split(".", 1)
    leaf = batch_path.rstrip("/").rsplit("/", 1)[-1]
    return fs.join(staging_root, "_quarantine", owner, name, leaf)


def target_location(target_root: str, table: str, delta_dir: str) -> str:
    """Where an apply's delta directory for a target table is quarantined.

    >>> target_location("/t", "hr.regions", "/t/hr.regions/delta-v3-abc")
    '/t/_quarantine/hr.regions/delta-v3-abc'
    """
    return fs.join(target_root, "_quarantine", table, delta_dir.rstrip("/").rsplit("/", 1)[-1])


def quarantine(spark: SparkSession, src: str, dest: str, result: dict[str, Any]) -> str:
    """Move ``src`` to ``dest`` and write the validation result beside the data."""
    move(spark, src, dest)
    write_result(spark, dest, result)
    return dest
