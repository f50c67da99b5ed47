"""``changeflow doctor``: is every place a pipeline needs reachable, and how fast?

One line per check, for each configured site: its staging root (a probe object written,
listed, read and deleted, each step timed), its target catalog (the Iceberg tables in
its state store, a table's metadata read from the warehouse, the warehouse written),
its state store (connected, schema version); the Spark master the jobs are submitted
to; and the local scratch space Spark's driver writes to (its free space, and the folders
of Spark JVMs that did not end cleanly). Nothing a pipeline keeps is changed: the probe
object is deleted, the state store and catalog are only read.

A failure names the site and the URI and says what is wrong: credentials missing or
refused, a bucket that does not exist, a store that cannot answer (a transient failure
is tried again with backoff before it is reported), a listing slower than
``--slow-after`` seconds (reported ``slow``, not failed).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlparse

from changeflow.config import PipelineConfig, Site
from changeflow.errors import ChangeflowError, TerminalError, is_transient
from changeflow.jvm import default_master
from changeflow.units import human_bytes


@dataclass
class Check:
    """One line of the report."""

    what: str
    uri: str
    status: str  # ok | slow | FAILED
    detail: str
    transient: bool = False

    def line(self) -> str:
        return f"{self.status:<6} {self.what:<28} {self.uri}  {self.detail}"


def _retrying(fn: Callable[[], str], retries: int, backoff: float) -> str:
    """Run ``fn``; a transient failure is tried again ``retries`` times, backoff doubling."""
    for attempt in range(retries + 1):
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001  (classified, re-raised when final)
            if attempt == retries or not is_transient(exc):
                raise
            time.sleep(backoff * 2 ** attempt)
    raise AssertionError("unreachable")


def _check(what: str, uri: str, fn: Callable[[], str], *, retries: int, backoff: float,
           slow: Callable[[str], bool] = lambda _: False) -> Check:
    try:
        detail = _retrying(fn, retries, backoff)
    except Exception as exc:  # noqa: BLE001  (reported on the line)
        text = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        return Check(what, uri, "FAILED", text, is_transient(exc))
    return Check(what, uri, "slow" if slow(detail) else "ok", detail)


def staging(name: str, site: Site, *, slow_after: float) -> Callable[[], str]:
    """The staging root's check: a probe object's round trip."""
    from changeflow.storage.probe import round_trip

    def run() -> str:
        probe = round_trip(site.staging_root)
        note = f" (listing slower than {slow_after:g} s)" if probe.steps["list"] > slow_after \
            else ""
        return probe.summary() + note

    return run


def state_store(site: Site) -> Callable[[], str]:
    """The state store's check: connect, and read the schema version (nothing written)."""

    def run() -> str:
        from sqlalchemy import create_engine, inspect, text

        if _no_sqlite_file(site.state_url):
            return "no database file yet (the first run creates it)"
        engine = create_engine(site.state_url)
        try:
            with engine.connect() as c:
                t = time.perf_counter()
                c.execute(text("SELECT 1"))
                ms = (time.perf_counter() - t) * 1000
                if not inspect(c).has_table("cf_schema_versions"):
                    return f"reachable ({ms:.0f} ms), not set up yet (the first run does)"
                n = c.execute(text("SELECT count(*) FROM cf_schema_versions")).scalar()
        finally:
            engine.dispose()
        return f"reachable ({ms:.0f} ms), {n} migration steps applied"

    return run


def target_catalog(name: str, site: Site) -> Callable[[], str]:
    """The target catalog's check: its tables, one table's metadata, the warehouse."""

    def run() -> str:
        from sqlalchemy import create_engine, inspect, text

        from changeflow.storage.probe import round_trip

        catalog = f"cf_{name}".replace("-", "_").lower()  # as IcebergTargets names it
        tables: list[str] = []
        if not _no_sqlite_file(site.state_url):  # connecting would create the file
            engine = create_engine(site.state_url)
            try:
                with engine.connect() as c:
                    if inspect(c).has_table("iceberg_tables"):
                        tables = [f"{r[0]}.{r[1]}" for r in c.execute(text(
                            "SELECT table_namespace, table_name FROM iceberg_tables "
                            "WHERE catalog_name = :c ORDER BY 1, 2"), {"c": catalog})]
            finally:
                engine.dispose()
        read = ""
        if tables:
            from pyiceberg.catalog.sql import SqlCatalog

            from changeflow import storage

            props = storage.settings().pyiceberg_properties() if storage.in_use() else {}
            t = time.perf_counter()
            meta = SqlCatalog(catalog, uri=site.state_url, warehouse=site.target_root,
                              **props).load_table(tables[0]).metadata
            read = (f", {tables[0]} at snapshot {meta.current_snapshot_id} read in "
                    f"{(time.perf_counter() - t) * 1000:.0f} ms")
        probe = round_trip(site.target_root)
        return (f"catalog {catalog}: {len(tables)} tables{read}; warehouse writable "
                f"({probe.summary()})")

    return run


def spark_master_of(explicit: str | None = None) -> str:
    """The master jobs go to: ``explicit``, the ``spark_default`` connection, or local."""
    if explicit:
        return explicit
    conn = os.environ.get("AIRFLOW_CONN_SPARK_DEFAULT")
    if conn:
        try:
            data = json.loads(conn)
            host, port = data.get("host", ""), data.get("port")
            return f"{host}:{port}" if port and "://" in host else host
        except ValueError:
            parsed = urlparse(conn)
            return parsed.hostname or conn
    return default_master()


def _connect(host: str, port: int, timeout: float = 5.0) -> float:
    t = time.perf_counter()
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return (time.perf_counter() - t) * 1000
    except OSError as exc:  # refused or unreachable: a retry may find it up
        raise ConnectionError(f"{host}:{port} does not answer: {exc}") from exc


def _no_sqlite_file(url_text: str) -> bool:
    """Whether a state URL is a SQLite file that does not exist yet."""
    from sqlalchemy.engine import make_url

    url = make_url(url_text)
    return url.get_backend_name() == "sqlite" and bool(url.database) and \
        url.database != ":memory:" and not os.path.exists(url.database or "")


def spark_master(master: str) -> Callable[[], str]:
    """The master's check: local mode, or its hosts answering on their ports."""

    def run() -> str:
        if master.startswith("local"):
            return "local mode: jobs run in the driver's JVM"
        if master == "yarn":
            conf = os.environ.get("YARN_CONF_DIR") or os.environ.get("HADOOP_CONF_DIR")
            if not conf or not os.path.exists(os.path.join(conf, "yarn-site.xml")):
                raise ChangeflowError("master yarn: set HADOOP_CONF_DIR (or YARN_CONF_DIR) "
                                      "to the directory holding yarn-site.xml")
            return f"yarn, configured by {conf}/yarn-site.xml"
        if master.startswith("spark://"):
            hosts = master[len("spark://"):].split(",")
            times = []
            for hp in hosts:
                host, _, port_text = hp.partition(":")
                ms = _connect(host, int(port_text or 7077))
                times.append(f"{hp} answers ({ms:.0f} ms)")
            return "; ".join(times)
        if master.startswith("k8s://"):
            u = urlparse(master[len("k8s://"):])
            api_port = u.port or (443 if u.scheme == "https" else 80)
            return f"Kubernetes API {u.hostname}:{api_port} answers " \
                   f"({_connect(u.hostname or '', api_port):.0f} ms)"
        raise ChangeflowError(f"master {master!r}: not local[…], yarn, spark:// or k8s://")

    return run


#: the free space of the scratch space below which its check fails (``--min-free-gb``)
MIN_FREE_GB = 2.0
#: the folders a Spark JVM makes in its scratch space (its files, its block manager's)
SPARK_FOLDERS = ("spark-", "blockmgr-")


def scratch_dirs() -> list[str]:
    """Where the Spark driver (and a local master's executor) writes its scratch files:
    ``SPARK_LOCAL_DIRS``, else the JVM's temporary folder (``/tmp``: Java ignores
    ``TMPDIR``)."""
    given = os.environ.get("SPARK_LOCAL_DIRS", "")
    return [d for d in given.split(",") if d] or ["/tmp"]


def _size(path: str) -> int:
    """Bytes of the files under a folder (links not followed)."""
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):  # removed while walked
                total += os.lstat(os.path.join(root, f)).st_size
    return total


def scratch(folder: str, min_free_gb: float) -> Callable[[], str]:
    """The scratch space's check: free space, and the Spark folders in it (a JVM removes
    its own as it ends; one killed leaves them, with whatever it had copied or spilled)."""

    def run() -> str:
        if not os.path.isdir(folder):
            raise TerminalError(f"{folder} is not a folder (SPARK_LOCAL_DIRS names where "
                                "Spark writes its scratch files)")
        usage = shutil.disk_usage(folder)
        text = f"{human_bytes(usage.free)} free of {human_bytes(usage.total)}"
        with os.scandir(folder) as it:
            left = [e.path for e in it if e.name.startswith(SPARK_FOLDERS)
                    and e.is_dir(follow_symlinks=False)]
        if left:
            text += (f"; {len(left)} Spark folders hold {human_bytes(sum(map(_size, left)))} "
                     "(a JVM that did not end cleanly leaves its own: remove those of no "
                     "running job)")
        if usage.free < min_free_gb * 2**30:
            raise TerminalError(f"{text}: less than {min_free_gb:g} GiB free, which a job's "
                                "shuffle and spilled files can fill (free some, or point "
                                "SPARK_LOCAL_DIRS at a larger disk)")
        return text

    return run


def run_checks(cfg: PipelineConfig, *, master: str | None = None, retries: int = 2,
               backoff: float = 1.0, slow_after: float = 2.0,
               min_free_gb: float = MIN_FREE_GB) -> list[Check]:
    """Every check of a pipeline, in order: per site staging, catalog, state; the master;
    the scratch space."""
    out = []

    def check(what: str, uri: str, fn: Callable[[], str]) -> None:
        out.append(_check(what, uri, fn, retries=retries, backoff=backoff,
                          slow=lambda d: "slower than" in d))

    for name, site in cfg.sites.items():
        check(f"site {name} staging root", site.staging_root,
              staging(name, site, slow_after=slow_after))
        check(f"site {name} target catalog", site.target_root, target_catalog(name, site))
        check(f"site {name} state store", _safe(site.state_url), state_store(site))
    m = spark_master_of(master)
    check("spark master", m, spark_master(m))
    for folder in scratch_dirs():
        check("scratch space", folder, scratch(folder, min_free_gb))
    return out


def _safe(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)
