"""Target files written directly (every type, bookkeeping columns set by hand)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

from changeflow.apply.target import FileEntry, TargetTable, write_files

COLUMNS = [("id", "INTEGER"), ("name", "VARCHAR2"), ("sal", "NUMBER"), ("born", "DATE"),
           ("seen", "TIMESTAMP WITH TIME ZONE"), ("local", "TIMESTAMP"), ("raw", "RAW"),
           ("flag", "BOOLEAN"), ("score", "BINARY_DOUBLE")]
DATA = [c for c, _ in COLUMNS if c != "id"]
T0 = dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=dt.UTC)


def image(i: int, seq: int, *, name: str | None = None, deleted: bool = False,
          absent: list[str] | None = None, key: dict[str, Any] | None = None
          ) -> dict[str, Any]:
    """One image of key ``i`` written at table version ``seq`` (a tombstone: deleted)."""
    data: dict[str, Any] = {
        "name": name if name is not None else f"n{i}-{seq}", "sal": Decimal(f"{i}.25"),
        "born": dt.date(1990, 1, 1) + dt.timedelta(days=i), "seen": T0 + dt.timedelta(days=i),
        "local": dt.datetime(2024, 1, 1, 12) + dt.timedelta(minutes=i),
        "raw": bytes([i, seq]), "flag": i % 2 == 0,
        "score": i / 3}
    if deleted:
        data = dict.fromkeys(data)
    for c in absent or []:
        data[c] = None
    return {**(key or {"id": i}), **data, "_cf_seq": seq, "_cf_scn": 100 * seq + i,
            "_cf_pos": i, "_cf_deleted": deleted, "_cf_src": "DBS1.EXAMPLE.COM",
            "_cf_tag": b"\x0a" if seq > 1 else None, "_cf_absent": absent}


def write(spark: Any, table: TargetTable, rows: list[dict[str, Any]], kind: str,
          tag: str) -> list[FileEntry]:
    """Write images as a table's files of a kind (base, delta, pdelta)."""
    schema = table.spark_schema()
    df = spark.createDataFrame([tuple(r.get(f.name) for f in schema.fields) for r in rows],
                               schema)
    files, _ = write_files(spark, table, df, kind, tag)
    return files


def new_table(root: Path, key: list[str], columns: list[tuple[str, str]]) -> TargetTable:
    """A table header (two buckets) under ``root``."""
    return TargetTable("hr.t", str(root / "hr.t"), key, columns, 2, 0)
