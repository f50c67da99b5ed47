"""Spark's bucket of a key (:func:`changeflow.apply.target.bucket_expr`) computed with numpy.

A target row's bucket is ``pmod(xxhash64(key columns), buckets)``: Spark's XXH64 with
seed 42, each column hashed with the previous column's hash as its seed, NULLs
skipped. For the fixed-width types a key column usually has (``bigint``, ``int``,
``date``, ``timestamp``, ``timestamp_ntz``, ``boolean``) Spark hashes the value as one
4- or 8-byte word (``XXH64.hashInt`` / ``hashLong``), which is a few vectorised integer
operations per row here. Other key types (strings, decimals, binary) return None: the
caller asks Spark.

>>> import pyarrow as pa
>>> buckets(pa.table({"id": pa.array([0, 1, 2], pa.int64())}), ["id"], 16).tolist()
[12, 2, 13]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5
SEED = 42


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    import numpy as np

    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def _fmix(h: np.ndarray) -> np.ndarray:
    import numpy as np

    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(_P2)
    h = h ^ (h >> np.uint64(29))
    h = h * np.uint64(_P3)
    return h ^ (h >> np.uint64(32))


def hash_long(values: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """``XXH64.hashLong`` of uint64 words with per-row uint64 seeds."""
    import numpy as np

    with np.errstate(over="ignore"):
        h = seed + np.uint64((_P5 + 8) & 0xFFFFFFFFFFFFFFFF)
        k = _rotl(values * np.uint64(_P2), 31) * np.uint64(_P1)
        h = h ^ k
        h = _rotl(h, 27) * np.uint64(_P1) + np.uint64(_P4)
        return _fmix(h)


def hash_int(values: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """``XXH64.hashInt`` of 32-bit words (as uint64, high bits zero) with per-row seeds."""
    import numpy as np

    with np.errstate(over="ignore"):
        h = seed + np.uint64((_P5 + 4) & 0xFFFFFFFFFFFFFFFF)
        h = h ^ (values * np.uint64(_P1))
        h = _rotl(h, 23) * np.uint64(_P2) + np.uint64(_P3)
        return _fmix(h)


def _words(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray, bool] | None:
    """A column as (uint64 words, validity, whether Spark hashes 4 bytes), or None."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    t = col.type
    valid = pc.is_valid(col).to_numpy(zero_copy_only=False)
    if pa.types.is_int64(t) or pa.types.is_timestamp(t) and t.unit == "us":
        raw = pc.fill_null(col.cast(pa.int64()), 0).to_numpy(zero_copy_only=False)
        return raw.astype(np.int64).view(np.uint64), valid, False
    if pa.types.is_int32(t) or pa.types.is_date32(t) or pa.types.is_boolean(t):
        raw = pc.fill_null(col.cast(pa.int32()), 0).to_numpy(zero_copy_only=False).astype(np.int64)
        return (raw & 0xFFFFFFFF).astype(np.uint64), valid, True
    return None


def hashes(table: pa.Table, key_columns: list[str]) -> np.ndarray | None:
    """Spark's ``xxhash64(key columns)`` per row (int64), or None for another key type."""
    import numpy as np

    seed = np.full(table.num_rows, SEED, dtype=np.uint64)
    for k in key_columns:
        got = _words(table.column(k))
        if got is None:
            return None
        words, valid, short = got
        h = hash_int(words, seed) if short else hash_long(words, seed)
        seed = np.where(valid, h, seed)
    return seed.view(np.int64)


def buckets(table: pa.Table, key_columns: list[str], n: int) -> np.ndarray | None:
    """Spark's ``pmod(xxhash64(keys), n)`` per row, or None (see :func:`hashes`)."""
    import numpy as np

    h = hashes(table, key_columns)
    return None if h is None else np.mod(h, np.int64(n)).astype(np.int32)
