"""A site's Iceberg catalog, kept in the site's state store, and target table headers.

The catalog is Iceberg's JDBC catalog: two tables (``iceberg_tables``,
``iceberg_namespace_properties``) in the site's state store (SQLite by default,
PostgreSQL when configured), holding each table's current metadata file. Spark reaches
it as the catalog ``cf_<site>`` (``org.apache.iceberg.spark.SparkCatalog`` with
``type=jdbc``); PyIceberg's ``SqlCatalog`` reads the same tables (:mod:`.read`). A
table ``hr.employees`` is ``cf_site2.hr.employees``, stored under
``<target_root>/hr/employees``.

A target table's columns are the source table's, typed as the LCR contract types them,
plus four bookkeeping columns a reader may ignore: ``_cf_src`` (the source database of
the change that wrote the row), ``_cf_scn`` and ``_cf_pos`` (its commit position and
position in the transaction: a source's own commit order always wins) and ``_cf_tag``
(the tag of the apply that wrote it, so a capture can tell apply changes from local
ones). The key columns are the table's identifier fields, in the order of the table
property ``changeflow.key-columns``; rows are partitioned by ``bucket(N, first key)``.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, select
from sqlalchemy.engine import Connection, make_url

from changeflow import lcr
from changeflow.errors import ConfigError, TargetError
from changeflow.jvm import java_class, java_dict, java_each
from changeflow.state import StateStore, utcnow
from changeflow.state.schema_apply import dropped_tables, target_stats

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

#: the bookkeeping columns every target table has, with their Spark types
META: dict[str, str] = {"_cf_src": "string", "_cf_scn": "bigint", "_cf_pos": "bigint",
                        "_cf_tag": "binary"}
KEY_PROPERTY = "changeflow.key-columns"
#: logical type of each Spark type a target column may have (the LCR contract's)
_LOGICAL = {lcr.spark_type(t.spark_type).simpleString(): t.name
            for t in lcr.LOGICAL_TYPES.values()}
_lock = threading.Lock()
#: per Spark session (its JVM object id) and catalog name: the options it was set up with
_registered: dict[tuple[int, str], dict[str, str]] = {}
#: the Java tables loaded (per Spark session, catalog options and table), the most
#: recently used last: a table asked for again is refreshed (:meth:`IcebergTargets
#: .java_table`), not loaded anew
_tables: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
#: how many loaded tables are kept
TABLES_KEPT = 64
D = dropped_tables
S = target_stats


@dataclass(frozen=True)
class TargetTable:
    """A target table's header, as of one snapshot.

    Attributes:
        name: ``owner.table``, lower case.
        key_columns: the key, in order.
        columns: ``(column, logical type)`` of the data columns, in table order.
        buckets: the number of hash buckets of the partition spec.
        snapshot: the snapshot the header was read at (None: no data yet).
        exists: whether the table exists in the catalog (False: to be created).
    """

    name: str
    key_columns: list[str]
    columns: list[tuple[str, str]]
    buckets: int
    snapshot: int | None = None
    exists: bool = True

    @property
    def column_names(self) -> list[str]:
        """The data columns, in table order."""
        return [c for c, _ in self.columns]

    def spark_schema(self, *, with_meta: bool = True) -> StructType:
        """The table's Spark schema, optionally with the bookkeeping columns."""
        from pyspark.sql import types as T

        fields = [T.StructField(c, lcr.spark_type(lcr.LOGICAL_TYPES[t].spark_type),
                                c not in self.key_columns) for c, t in self.columns]
        if with_meta:
            fields += [T.StructField(m, lcr.spark_type(t)) for m, t in META.items()]
        return T.StructType(fields)

    def with_columns(self, added: list[tuple[str, str]]) -> TargetTable:
        """The header with columns appended (schema evolution)."""
        return replace(self, columns=self.columns + added)


def jdbc_of(state_url: str) -> tuple[str, dict[str, str]]:
    """The JDBC URL and connection properties of a state store's SQLAlchemy URL.

    >>> jdbc_of("sqlite:////work/s2/state.db")[0]
    'jdbc:sqlite:/work/s2/state.db'
    >>> jdbc_of("postgresql+psycopg://cf:pw@db.example:5433/state")
    ('jdbc:postgresql://db.example:5433/state', {'user': 'cf', 'password': 'pw'})
    >>> jdbc_of("postgresql://postgres@/state?host=/tmp/pg/sock&port=6000")[0]
    'jdbc:postgresql://localhost:6000/state'

    A libpq Unix-socket host (a directory) becomes ``localhost`` on the same port: the
    JDBC driver speaks TCP.

    Raises:
        ConfigError: the store is in memory or of a kind Iceberg has no driver for here.
    """
    url = make_url(state_url)
    if url.get_backend_name() == "sqlite":
        if not url.database or url.database == ":memory:":
            raise ConfigError(f"state store {state_url!r} is in memory: an Iceberg catalog "
                              "needs a file or a server")
        return f"jdbc:sqlite:{url.database}", {"busy_timeout": "60000"}
    if url.get_backend_name() == "postgresql":
        query = {k: v if isinstance(v, str) else v[0] for k, v in url.query.items()}
        host = url.host or query.get("host") or "localhost"
        host = "localhost" if host.startswith("/") else host
        port = url.port or query.get("port")
        port = f":{port}" if port else ""
        props = {k: v for k, v in (("user", url.username), ("password", url.password)) if v}
        return f"jdbc:postgresql://{host}{port}/{url.database}", props
    raise ConfigError(f"state store {url.render_as_string(hide_password=True)!r}: Iceberg "
                      "catalogs are kept in SQLite or PostgreSQL state stores")


class IcebergTargets:
    """The target tables of one site.

    Args:
        site: the site's name (the catalog is ``cf_<site>``).
        store: the site's state store (it holds the catalog).
        target_root: the warehouse: tables live under ``<target_root>/<owner>/<table>``.
        format_version: the Iceberg format version of tables created here (2 or 3).
    """

    def __init__(self, site: str, store: StateStore, target_root: str, *,
                 format_version: int = 2):
        self.site, self.store, self.target_root = site, store, target_root
        self.format_version = format_version
        self.name = f"cf_{site}".replace("-", "_").lower()

    # -- the catalog in Spark ---------------------------------------------------------------
    def options(self) -> dict[str, str]:
        """The Spark catalog's options (``spark.sql.catalog.<name>.*``)."""
        url, props = jdbc_of(self.store.url)
        out = {"type": "jdbc", "uri": url, "warehouse": self.target_root,
               "jdbc.schema-version": "V1", "cache-enabled": "false"}
        out.update({f"jdbc.{k}": v for k, v in props.items()})
        from changeflow import storage

        if storage.is_object_store(self.target_root):  # the warehouse through S3A
            out.update({f"hadoop.{k[len('spark.hadoop.'):]}": v for k, v in
                        storage.settings().spark_properties().items()
                        if k.startswith("spark.hadoop.fs.s3a.") and "committer" not in k})
        return out

    def register(self, spark: SparkSession) -> None:
        """Make the catalog known to the session (again, if its options changed).

        Spark keeps a catalog it has loaded; when the same name must now reach another
        store (another pipeline with the same site name in this process), the session's
        catalogs are reset so that the new options take effect.
        """
        opts = self.options()
        key = (id(spark._jsparkSession), self.name)  # noqa: SLF001
        with _lock:
            if _registered.get(key) == opts:
                return
            prefix = f"spark.sql.catalog.{self.name}"
            spark.conf.set(prefix, "org.apache.iceberg.spark.SparkCatalog")
            for k, v in opts.items():
                spark.conf.set(f"{prefix}.{k}", v)
            if key in _registered:
                spark._jsparkSession.sessionState().catalogManager().reset()  # noqa: SLF001
            _registered[key] = opts

    def ident(self, table: str, *, branch: str | None = None) -> str:
        """The quoted Spark identifier of a table (or of one of its branches)."""
        owner, name = split(table)
        tail = f".`branch_{branch}`" if branch else ""
        return f"`{self.name}`.`{owner}`.`{name}`{tail}"

    def java_catalog(self, spark: SparkSession) -> Any:
        """Iceberg's Java catalog behind the Spark catalog."""
        self.register(spark)
        manager = spark._jsparkSession.sessionState().catalogManager()  # noqa: SLF001
        return manager.catalog(self.name).icebergCatalog()

    def java_table(self, spark: SparkSession, table: str) -> Any | None:
        """Iceberg's Java ``Table`` (fresh metadata), or None when it does not exist.

        A table loaded before in this session is refreshed instead: one query of the
        catalog, and its metadata file is read again only where a commit has replaced
        it. A pass asks for its table a dozen times, and the metadata file lists every
        snapshot the table keeps: with 10,000 of them (a week of applies every minute,
        9 MB) the loads cost 0.55-0.75 s an apply, refreshes next to nothing. A table
        dropped since is None; one created again under the name (refresh refuses its
        new identity) or a refresh that fails otherwise is loaded anew.
        """
        key = (id(spark._jsparkSession), tuple(sorted(self.options().items())),  # noqa: SLF001
               tuple(split(table)))
        with _lock:
            jt = _tables.get(key)
        if jt is not None:
            try:
                jt.refresh()
            except Exception as exc:  # noqa: BLE001  (py4j's error; the Java class is checked)
                with _lock:
                    _tables.pop(key, None)
                if java_class(exc) == "org.apache.iceberg.exceptions.NoSuchTableException":
                    return None
            else:
                with _lock:
                    _tables.move_to_end(key)
                return jt
        jt = self._load(spark, table)
        if jt is not None:
            with _lock:
                _tables[key] = jt
                while len(_tables) > TABLES_KEPT:
                    _tables.popitem(last=False)
        return jt

    def _load(self, spark: SparkSession, table: str) -> Any | None:
        jvm = spark.sparkContext._jvm  # noqa: SLF001
        assert jvm is not None
        ident = jvm.org.apache.iceberg.catalog.TableIdentifier.parse(".".join(split(table)))
        # one load (``tableExists`` is a load too, and each reads the table's metadata)
        try:
            return self.java_catalog(spark).loadTable(ident)
        except Exception as exc:  # noqa: BLE001  (py4j's error; the Java class is checked)
            if java_class(exc) == "org.apache.iceberg.exceptions.NoSuchTableException":
                return None
            raise

    # -- headers ----------------------------------------------------------------------------
    def get(self, spark: SparkSession, table: str) -> TargetTable | None:
        """A table's header at its current snapshot, or None when it does not exist.

        Raises:
            TargetError: a column has a type the LCR contract does not know (the table
                was changed outside changeflow).
        """
        jt = self.java_table(spark, table)
        return None if jt is None else header_of(spark, table, jt)

    def names(self, spark: SparkSession) -> list[str]:
        """Every table of the catalog, ``owner.table``, sorted."""
        cat = self.java_catalog(spark)
        jvm = spark.sparkContext._jvm  # noqa: SLF001
        assert jvm is not None
        out = []
        for ns in java_each(cat.listNamespaces()):
            for ident in java_each(cat.listTables(ns)):
                out.append(f"{'.'.join(ns.levels())}.{ident.name()}".lower())
        return sorted(out)

    def row_count(self, spark: SparkSession, table: str, snapshot: int | None = None) -> int:
        """Live rows at a snapshot (the current one by default): from its summary."""
        jt = self.java_table(spark, table)
        if jt is None:
            return 0
        snap = jt.currentSnapshot() if snapshot is None else jt.snapshot(snapshot)
        return 0 if snap is None else rows_of(java_dict(snap.summary()))

    # -- tables dropped by DDL (kept in the state store) -----------------------------------
    def dropped(self, table: str) -> dict[str, Any] | None:
        """The DROP TABLE that removed a table (source, commit position, time), if any."""
        with self.store.read() as c:
            row = c.execute(select(D).where(D.c.table_name == table)).first()
        return dict(row._mapping) if row else None

    def mark_dropped(self, conn: Connection, table: str, *, source: str | None,
                     commit_scn: int | None) -> None:
        """Remember that DDL dropped a table (later changes to it fail clearly)."""
        conn.execute(delete(D).where(D.c.table_name == table))
        conn.execute(D.insert().values(table_name=table, source_database=source,
                                       commit_scn=commit_scn, dropped_at=utcnow()))

    def unmark_dropped(self, conn: Connection, table: str) -> None:
        """Forget a table's drop (it was created again)."""
        conn.execute(delete(D).where(D.c.table_name == table))

    # -- what the apply published (kept in the state store) --------------------------------
    def note_published(self, conn: Connection, table: str, rows: int,
                       snapshot: int | None) -> None:
        """Record the snapshot an apply published to a table and its row count."""
        vals = {"row_count": rows, "version": snapshot or 0, "updated_at": utcnow()}
        if conn.execute(S.update().where(S.c.table_name == table).values(**vals)).rowcount == 0:
            conn.execute(S.insert().values(table_name=table, **vals))

    def last_published(self, table: str) -> dict[str, Any] | None:
        """The last snapshot an apply published to a table (None: never)."""
        with self.store.read() as c:
            row = c.execute(select(S).where(S.c.table_name == table)).first()
        return dict(row._mapping) if row else None

    def forget(self, table: str) -> bool:
        """Forget what the apply published to a table (after it was dropped outside
        changeflow: the apply may create it again). Returns whether it was known."""
        with self.store.begin() as conn:
            n = conn.execute(delete(S).where(S.c.table_name == table)).rowcount or 0
            conn.execute(delete(D).where(D.c.table_name == table))
        return bool(n)


def split(table: str) -> tuple[str, str]:
    """``owner.table`` as its two parts (lower case).

    Raises:
        TargetError: the name has no owner.
    """
    owner, dot, name = table.lower().partition(".")
    if not dot or not name or "." in name:
        raise TargetError(f"target table {table!r} must be named owner.table")
    return owner, name


def rows_of(summary: dict[str, str]) -> int:
    """Live rows of a snapshot, from its summary (records less deleted positions)."""
    return int(summary.get("total-records", 0)) - int(
        summary.get("total-position-deletes", 0)) - int(summary.get("total-equality-deletes", 0))


def header_of(spark: SparkSession, table: str, jt: Any) -> TargetTable:
    """The header of a loaded Java table at its current snapshot."""
    from pyspark.sql.types import StructType

    jvm = spark.sparkContext._jvm  # noqa: SLF001
    assert jvm is not None
    schema = StructType.fromJson(json.loads(
        jvm.org.apache.iceberg.spark.SparkSchemaUtil.convert(jt.schema()).json()))
    cols: list[tuple[str, str]] = []
    for f in schema.fields:
        if f.name in META:
            continue
        ltype = _LOGICAL.get(f.dataType.simpleString())
        if ltype is None:
            raise TargetError(f"target table {table}: column {f.name!r} is "
                              f"{f.dataType.simpleString()}, not a type of the LCR contract")
        cols.append((f.name, ltype))
    props = java_dict(jt.properties())
    keys = [k for k in props.get(KEY_PROPERTY, "").split(",") if k]
    if not keys:
        keys = sorted(jt.schema().identifierFieldNames())
    # the spec in one call: "[\n  1000: id_bucket: bucket[16](1)\n]"
    found = re.findall(r": bucket\[(\d+)\]\(", str(jt.spec().toString()))
    buckets = int(found[-1]) if found else 1
    snap = jt.currentSnapshot()
    return TargetTable(table, keys, cols, buckets, None if snap is None else snap.snapshotId())
