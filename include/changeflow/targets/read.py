"""Reading target tables: the current state, an earlier snapshot, what each apply wrote.

Any Iceberg reader reads a target table without changeflow; these helpers only name
the catalog for it. From Spark, a table is ``cf_<site>.<owner>.<table>`` once the
catalog is registered (:meth:`IcebergTargets.register`); from Python, PyIceberg's
``SqlCatalog`` on the site's state store (:func:`pyiceberg_catalog`)::

    from pyiceberg.catalog.sql import SqlCatalog
    cat = SqlCatalog("cf_site2", uri="sqlite:///work/demo/site2/state.db")
    cat.load_table("hr.employees").scan().to_arrow()

From DuckDB, its own Iceberg reader over the table's metadata file
(:func:`duckdb_connection`, :func:`duckdb_scan`)::

    con.sql("SELECT count(*) FROM iceberg_scan('work/demo/site2/targets/hr/employees/"
            "metadata/00012-….metadata.json')")

Every snapshot an apply wrote carries, in its summary, the pass that wrote it
(``changeflow.pass-id``), the apply, the queue and batch range, and the newest commit
position per source database it applied (``changeflow.positions``):
:func:`snapshots` lists them.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Any

from changeflow.errors import TargetError
from changeflow.jvm import java_dict, java_each
from changeflow.targets.catalog import META, IcebergTargets, rows_of
from changeflow.targets.rowdelta import SCRATCH
from changeflow.targets.tables import ancestors

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession


def read_table(spark: SparkSession, targets: IcebergTargets, name: str, *,
               snapshot: int | None = None, with_meta: bool = False) -> DataFrame:
    """The rows of a target table (at a snapshot, by default the current one).

    Args:
        with_meta: keep the bookkeeping columns (``_cf_src``, ``_cf_scn``, ``_cf_pos``,
            ``_cf_tag``).

    Raises:
        TargetError: the table does not exist.
    """
    if targets.java_table(spark, name) is None:
        raise TargetError(f"target table {name!r} does not exist in catalog {targets.name}")
    at = f" VERSION AS OF {int(snapshot)}" if snapshot is not None else ""
    df = spark.sql(f"SELECT * FROM {targets.ident(name)}{at}")
    return df if with_meta else df.drop(*META)


def snapshots(spark: SparkSession, targets: IcebergTargets, name: str) -> list[dict[str, Any]]:
    """The snapshots of a table, oldest first, with what wrote each (apply, pass, batches,
    positions) and the table's live rows after it.

    Raises:
        TargetError: the table does not exist.
    """
    jt = targets.java_table(spark, name)
    if jt is None:
        raise TargetError(f"target table {name!r} does not exist in catalog {targets.name}")
    main = jt.currentSnapshot()
    on_main = {s.snapshotId() for s in
               ancestors(spark, jt, main.snapshotId() if main is not None else None)}
    out = []
    for s in sorted(java_each(jt.snapshots()), key=lambda s: s.sequenceNumber()):
        summary = java_dict(s.summary())
        if summary.get(SCRATCH):  # a pass's data files before its one RowDelta
            continue
        out.append({
            "table": name, "snapshot": s.snapshotId(),
            "committed_at": dt.datetime.fromtimestamp(s.timestampMillis() / 1000, dt.UTC),
            "operation": s.operation(), "on_main": s.snapshotId() in on_main,
            "apply": summary.get("changeflow.apply"),
            "pass_id": summary.get("changeflow.pass-id"),
            "batches": summary.get("changeflow.batches"),
            "positions": summary.get("changeflow.positions"),
            "rows": rows_of(summary),
        })
    return out


def pyiceberg_catalog(targets: IcebergTargets) -> Any:
    """PyIceberg's ``SqlCatalog`` on the site's state store (the same catalog Spark uses)."""
    from pyiceberg.catalog.sql import SqlCatalog

    from changeflow import storage

    props = storage.settings().pyiceberg_properties() if storage.in_use() else {}
    for attempt in range(3):
        try:
            return SqlCatalog(targets.name, uri=targets.store.url,
                              warehouse=targets.target_root, **props)
        except Exception as exc:  # noqa: BLE001  (SQLAlchemy's, from any dialect)
            # On a store no catalog has used yet, SqlCatalog creates its tables; two
            # readers at once (a view and a DAG task) race, and the loser finds them made.
            if attempt == 2 or "already exists" not in str(exc):
                raise
    raise AssertionError("unreachable")


def read_arrow(targets: IcebergTargets, name: str, *, snapshot: int | None = None) -> pa.Table:
    """A target table's rows as Arrow, read by PyIceberg (no Spark).

    Raises:
        TargetError: the table does not exist.
    """
    from pyiceberg.exceptions import NoSuchTableError

    try:
        table = pyiceberg_catalog(targets).load_table(name)
    except NoSuchTableError as exc:
        raise TargetError(f"target table {name!r} does not exist in catalog "
                          f"{targets.name}") from exc
    return table.scan(snapshot_id=snapshot).to_arrow()


#: the extensions DuckDB reads Iceberg tables with
DUCKDB_EXTENSIONS = ("avro", "iceberg")


def duckdb_connection() -> Any:
    """A DuckDB connection with its Iceberg extension loaded.

    The extensions come from the ``duckdb-ext-iceberg`` and ``duckdb-ext-avro`` wheels
    when they are installed for this DuckDB (requirements.txt pins them: DuckDB's own
    extension site may be out of reach, as it is on machines that reach only PyPI), else
    from DuckDB's ``INSTALL``.
    """
    import duckdb

    con = duckdb.connect()
    spec = importlib.util.find_spec("duckdb_ext")
    roots = list(spec.submodule_search_locations or []) if spec else []
    platform = con.execute("PRAGMA platform").fetchone()
    folder = Path("extensions", f"v{duckdb.__version__}", platform[0] if platform else "")
    for ext in DUCKDB_EXTENSIONS:
        wheel = next((f for r in roots if (f := Path(r) / folder / f"{ext}.duckdb_extension")
                      .is_file()), None)
        if wheel is not None:
            con.execute(f"LOAD '{wheel}'")
        else:
            con.execute(f"INSTALL {ext}")
            con.execute(f"LOAD {ext}")
    return con


def duckdb_scan(targets: IcebergTargets, name: str, *, snapshot: int | None = None) -> str:
    """DuckDB's table function reading a target table as of its current snapshot (or
    ``snapshot``): ``iceberg_scan`` of its metadata file, found in the catalog now. It
    reads the table without changeflow and without a catalog: delete files applied, as
    Spark and PyIceberg read it. A warehouse on an object store needs DuckDB's
    ``httpfs`` extension and a secret; this names local warehouses only.

    Raises:
        TargetError: the table does not exist, or its warehouse is not local.
    """
    from pyiceberg.exceptions import NoSuchTableError

    try:
        location = pyiceberg_catalog(targets).load_table(name).metadata_location
    except NoSuchTableError as exc:
        raise TargetError(f"target table {name!r} does not exist in catalog "
                          f"{targets.name}") from exc
    if location.startswith("file:"):
        location = "/" + location.removeprefix("file:").lstrip("/")
    elif not location.startswith("/"):
        raise TargetError(f"target table {name!r} is at {location}: DuckDB reads it with "
                          "its httpfs extension and a secret for the store (CREATE SECRET), "
                          "then iceberg_scan of that metadata file")
    quoted = location.replace("'", "''")
    at = f", snapshot_from_id => {int(snapshot)}" if snapshot is not None else ""
    return f"iceberg_scan('{quoted}'{at})"
