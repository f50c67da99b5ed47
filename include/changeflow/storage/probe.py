"""Probing a root on an object store (or a local disk): the bucket, and a round trip.

``changeflow doctor`` and the propagation's destination check use these: a bucket that
does not exist or credentials the store refuses fail at once with an error naming the
site and the URI; a store that errors or lists slowly is reported with the time each
step took.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from dataclasses import dataclass, field

from changeflow import storage


@dataclass
class Probe:
    """What a round trip under a root took, in seconds per step."""

    uri: str
    steps: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return sum(self.steps.values())

    def summary(self) -> str:
        """``write 12 ms, list 4 ms, read 3 ms, delete 5 ms``."""
        return ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in self.steps.items())


def check_bucket(uri: str) -> None:
    """Check that an object-store URI's bucket exists and the credentials are taken.

    Raises:
        StorageAccessError: credentials missing or refused, or no such bucket.
        StorageUnavailableError: the store cannot answer (down, 5xx, too slow).
    """
    from pyarrow import fs as pafs

    fs, inner = storage.filesystem(uri)
    bucket = inner.split("/", 1)[0]
    try:
        info = fs.get_file_info(bucket)
    except OSError as exc:
        raise storage.error_for(exc, uri, f"looking up bucket {bucket!r}") from exc
    if info.type == pafs.FileType.NotFound:
        raise storage.StorageAccessError(
            f"{storage.where(uri)}: bucket {bucket!r} does not exist (create it, or fix the "
            "root's URI)")


def round_trip(uri: str, *, payload: int = 1024) -> Probe:
    """Write, list, read and delete one small object under ``uri``; time each step.

    Raises:
        StorageAccessError, StorageUnavailableError: as :func:`check_bucket`; on a local
            path, the OSError.
    """
    from pyarrow import fs as pafs

    if storage.is_object_store(uri):
        check_bucket(uri)
    fs, inner = storage.filesystem(uri)
    probe = Probe(uri)
    name = f"{inner.rstrip('/')}/_changeflow_probe/{uuid.uuid4().hex}"
    step = "write"
    try:
        t = time.perf_counter()
        if not storage.is_object_store(uri):
            fs.create_dir(name.rsplit("/", 1)[0], recursive=True)
        with fs.open_output_stream(name) as out:
            out.write(b"x" * payload)
        probe.steps["write"] = time.perf_counter() - t
        step, t = "list", time.perf_counter()
        found = fs.get_file_info(pafs.FileSelector(name.rsplit("/", 1)[0], recursive=True))
        probe.steps["list"] = time.perf_counter() - t
        if not any(f.path.rstrip("/") == name for f in found):
            raise storage.StorageUnavailableError(
                f"{storage.where(uri)}: an object just written is not listed (the store "
                "is not consistent)")
        step, t = "read", time.perf_counter()
        with fs.open_input_stream(name) as src:
            data = src.read()
        probe.steps["read"] = time.perf_counter() - t
        if len(data) != payload:
            raise storage.StorageUnavailableError(
                f"{storage.where(uri)}: read {len(data)} bytes of {payload} written")
        step, t = "delete", time.perf_counter()
        fs.delete_file(name)
        probe.steps["delete"] = time.perf_counter() - t
        if not storage.is_object_store(uri):  # a disk keeps the directory: leave none behind
            with contextlib.suppress(OSError):  # another probe's object is still in it
                os.rmdir(name.rsplit("/", 1)[0])
    except OSError as exc:
        if storage.is_object_store(uri):
            raise storage.error_for(exc, uri, f"{step} of a probe object") from exc
        raise
    finally:
        if step in ("list", "read"):  # failed after the write: leave no probe behind
            with contextlib.suppress(OSError):
                fs.delete_file(name)
    return probe
