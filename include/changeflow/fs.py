"""File-system operations on any URI Spark can write, through Hadoop's FileSystem API.

Local paths, ``file://``, ``hdfs://``, ``s3a://`` and the rest all go through the
JVM of the running SparkSession, so whatever Spark can write, changeflow can list,
measure and delete. Object-store URIs get the S3A settings of the environment
(:func:`configure_hadoop`), and :func:`ensure_dir` checks them with pyarrow first, so a
missing bucket or refused credentials fail with an error naming the site and the URI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def local_path(uri: str) -> str | None:
    """The local filesystem path of a URI, or None for a remote one.

    >>> local_path("/data/staging"), local_path("file:///data/s"), local_path("s3a://b/s")
    ('/data/staging', '/data/s', None)
    """
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return parsed.path if parsed.scheme else uri
    return None


_applied: dict[int, tuple[object, set[str]]] = {}


def configure_hadoop(spark: SparkSession) -> None:
    """Give the session's Hadoop configuration the object-store settings of the environment.

    A session started by :func:`changeflow.spark.get_session` has them already (as
    ``spark.hadoop.fs.s3a.*``); one started otherwise gets them here, before its first
    S3A file system is made. Keys the session had before are kept; when the settings
    change (another endpoint), the keys set here follow them.
    """
    from changeflow import storage

    if not storage.in_use():
        return
    cfg = storage.settings()
    key = id(spark.sparkContext)
    before, ours = _applied.get(key, (None, set()))
    if before == cfg:
        return
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
    for k, v in cfg.spark_properties().items():
        if k.startswith("spark.hadoop."):
            name = k[len("spark.hadoop."):]
            if name in ours or conf.get(name) is None:
                conf.set(name, v)
                ours.add(name)
        elif k in ours or spark.conf.get(k, None) is None:
            spark.conf.set(k, v)
            ours.add(k)
    _applied[key] = (cfg, ours)


def _path(spark: SparkSession, uri: str) -> tuple[Any, Any]:
    jvm: Any = spark.sparkContext._jvm
    configure_hadoop(spark)
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
    p = jvm.org.apache.hadoop.fs.Path(uri)
    return p.getFileSystem(conf), p


def exists(spark: SparkSession, uri: str) -> bool:
    """Whether a file or directory exists."""
    fs, p = _path(spark, uri)
    return bool(fs.exists(p))


def delete(spark: SparkSession, uri: str) -> None:
    """Delete a file or a directory tree; a missing one is not an error."""
    fs, p = _path(spark, uri)
    if fs.exists(p):
        fs.delete(p, True)


def data_files(spark: SparkSession, uri: str) -> list[tuple[str, int]]:
    """The Parquet data files under a directory, with their sizes in bytes."""
    fs, p = _path(spark, uri)
    if not fs.exists(p):
        return []
    out: list[tuple[str, int]] = []
    it = fs.listFiles(p, True)
    while it.hasNext():
        st = it.next()
        name = st.getPath().getName()
        if name.endswith(".parquet"):
            out.append((str(st.getPath().toString()), int(st.getLen())))
    return out


def join(root: str, *parts: str) -> str:
    """Join URI parts with single slashes.

    >>> join("s3a://bucket/root/", "hr", "queue")
    's3a://bucket/root/hr/queue'
    """
    return "/".join([root.rstrip("/"), *(p.strip("/") for p in parts)])


def list_dirs(spark: SparkSession, uri: str) -> list[str]:
    """Names of the sub-directories of a directory (empty when it does not exist)."""
    fs, p = _path(spark, uri)
    if not fs.exists(p):
        return []
    return sorted(str(st.getPath().getName()) for st in fs.listStatus(p) if st.isDirectory())


def ensure_dir(spark: SparkSession, uri: str) -> str | None:
    """Make sure a directory exists and can hold new files.

    Returns:
        ``None`` when it can, else why not (a file in its place, mkdirs refused, I/O error).

    Raises:
        StorageAccessError: an object store refuses the credentials, or the bucket does
            not exist (terminal: no retry fixes it).
    """
    from changeflow import storage

    if storage.is_object_store(uri):
        from changeflow.storage.probe import check_bucket

        try:
            check_bucket(uri)  # an object store has no directories to make
        except storage.StorageUnavailableError as exc:
            return str(exc)
        return None
    try:
        fs, p = _path(spark, uri)
        if fs.exists(p):
            return None if fs.getFileStatus(p).isDirectory() else "a file is in its place"
        return None if fs.mkdirs(p) else "the file system refused to create it"
    except Exception as exc:  # noqa: BLE001  (a JVM I/O error of any kind)
        return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
