"""Apply into PostgreSQL and from PostgreSQL captures: the error queue keeps whole
transactions, conflicts and handlers, DDL, complete row images (TOAST), forwarding."""

from __future__ import annotations

import random
import string
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from changeflow.apply import errorq, views
from changeflow.apply.config import ConflictHandlerSpec
from changeflow.apply.conflicts import set_handler
from changeflow.apply.engine import apply_once, targets_of
from changeflow.apply.errorq import ErrorNotFoundError
from changeflow.apply.postgres import apply_pg_once
from changeflow.apply.reexec import execute_errors
from changeflow.capture.postgres import run_pg_capture
from changeflow.config import load_config
from changeflow.errors import ConfigError
from changeflow.queues import arrow_io
from changeflow.sites import open_pipeline, queue_site
from changeflow.targets.read import read_table
from changeflow.testing.pg_cluster import PG_BIN, PgCluster

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def pg() -> Iterator[PgCluster]:
    if not (PG_BIN / "initdb").exists():
        pytest.fail(f"PostgreSQL 15 is not installed at {PG_BIN}; run make setup")
    cluster = PgCluster().start()
    try:
        yield cluster
    finally:
        cluster.stop()


def _setup(pg: PgCluster, tmp_path: Path, monkeypatch: Any, *, tables: str = "[public.t]",
           applies: str = "", captures: str = "", tail: str = "",
           tag: str | None = None) -> tuple[Any, str, str]:
    tag = tag or uuid.uuid4().hex[:8]
    src, dst = f"a_src_{tag}", f"a_dst_{tag}"
    monkeypatch.setenv(f"CF_ASRC_{tag}", pg.createdb(src))
    monkeypatch.setenv(f"CF_ADST_{tag}", pg.createdb(dst))
    body = textwrap.dedent(f"""
        version: 1
        sites:
          s1: {{staging_root: s1/staging, target_root: s1/targets,
               state_url: "sqlite:///s1/state.db", database: PG1.EXAMPLE.COM}}
        queues:
          - {{name: strm.q1, site: s1}}
          - {{name: strm.q2, site: s1}}
        captures:
          - name: cap
            queue: strm.q1@s1
            source: {{type: postgres, database: PG1.EXAMPLE.COM, url_env: CF_ASRC_{tag},
                      slot: aslot_{tag}, tables: {tables}}}
        applies:
          - name: topg
            queue: strm.q1@s1
            target: {{type: postgres, url_env: CF_ADST_{tag}}}
    """) + _items(applies) + textwrap.dedent(tail)
    body = body.replace("captures:\n", "captures:\n" + _items(captures), 1)
    (tmp_path / "p.yaml").write_text(body)
    cfg = load_config(tmp_path / "p.yaml")
    open_pipeline(cfg)
    return cfg, src, dst


def _items(text: str) -> str:
    """More list items of a section whose items are indented by two spaces."""
    text = textwrap.dedent(text).strip("\n")
    return textwrap.indent(text, "  ") + "\n" if text else ""


def _rows(pg: PgCluster, db: str, sql: str = "SELECT * FROM t ORDER BY 1") -> list[tuple]:
    with pg.connect(db) as c:
        return c.execute(sql).fetchall()


def test_failed_transaction_is_kept_whole_and_reexecuted(pg, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    cfg, src, dst = _setup(pg, tmp_path, monkeypatch)
    pg.sql(src, "CREATE TABLE t (id int PRIMARY KEY, v int)")
    pg.sql(dst, "CREATE TABLE t (id int PRIMARY KEY, v int CONSTRAINT small CHECK (v < 100))")
    run_pg_capture(None, cfg, "cap")
    pg.sql(src, """
        INSERT INTO t VALUES (1, 1);
        BEGIN; INSERT INTO t VALUES (2, 2); INSERT INTO t VALUES (3, 500);
               INSERT INTO t VALUES (4, 4); COMMIT;
        UPDATE t SET v = 10 WHERE id = 1;
    """)
    run_pg_capture(None, cfg, "cap")
    res = apply_pg_once(None, cfg, "topg")
    assert (res.transactions, res.errors) == (2, 1)
    assert _rows(pg, dst) == [(1, 10)]
    rt, q = queue_site(cfg, "strm.q1@s1")
    assert rt.catalog.info(q).depth == 0  # the batch was purged ...
    [e] = views.list_errors(cfg, "topg")  # ... the transaction was not
    assert (e["n_messages"], e["error_kind"], e["failing_position"]) == (3, "target", 2)
    assert "small" in e["error_message"]
    lcrs = views.error_lcrs(cfg, "topg", e["id"])["lcrs"]
    assert [r["new_values"] for r in lcrs] == [{"ID": 2, "V": 2}, {"ID": 3, "V": 500},
                                               {"ID": 4, "V": 4}]
    with pytest.raises(ErrorNotFoundError):
        execute_errors(cfg, "topg", [e["id"] + 100])
    assert execute_errors(cfg, "topg", [e["id"]]).failed  # still violates: stays, new attempt
    assert errorq.entries(rt.store, "topg")[0].attempts == 2
    pg.sql(dst, "ALTER TABLE t DROP CONSTRAINT small")
    assert execute_errors(cfg, "topg").applied == [e["id"]]
    assert _rows(pg, dst) == [(1, 10), (2, 2), (3, 500), (4, 4)]
    assert views.list_errors(cfg, "topg") == []


def test_conflicts_resolve_with_handlers_and_dropped_table(pg, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    cfg, src, dst = _setup(pg, tmp_path, monkeypatch)
    pg.sql(src, "CREATE TABLE t (id int PRIMARY KEY, v int, w text); "
                "ALTER TABLE t REPLICA IDENTITY FULL")
    pg.sql(dst, "CREATE TABLE t (id int PRIMARY KEY, v int, w text)")
    run_pg_capture(None, cfg, "cap")
    pg.sql(src, "INSERT INTO t VALUES (1, 10, 'a'), (2, 20, 'b')")
    run_pg_capture(None, cfg, "cap")
    apply_pg_once(None, cfg, "topg")
    pg.sql(dst, "UPDATE t SET v = 99 WHERE id = 1; INSERT INTO t VALUES (3, 30, 'local')")
    pg.sql(src, "UPDATE t SET v = 11, w = 'a2' WHERE id = 1; INSERT INTO t VALUES (3, 33, 'c')")
    run_pg_capture(None, cfg, "cap")
    res = apply_pg_once(None, cfg, "topg")
    assert res.errors == 2  # an update conflict and a uniqueness conflict, unresolved
    rt, _ = queue_site(cfg, "strm.q1@s1")
    with pytest.raises(ConfigError, match="'nope' is not a column"):
        set_handler(rt.store, "topg", ConflictHandlerSpec(
            table="public.t", columns=["nope"], method="OVERWRITE"), ["id", "v", "w"])
    set_handler(rt.store, "topg", ConflictHandlerSpec(
        table="public.t", columns=["v"], method="MAXIMUM", resolution_column="v"), None)
    set_handler(rt.store, "topg", ConflictHandlerSpec(
        table="public.t", conflict="uniqueness", method="OVERWRITE"), None)
    res = execute_errors(cfg, "topg")
    assert len(res.applied) == 2 and not res.failed
    # v: MAXIMUM keeps the target's 99 over the LCR's 11; w takes the LCR's value
    assert _rows(pg, dst) == [(1, 99, "a2"), (2, 20, "b"), (3, 33, "c")]
    # an error whose target table was dropped stays in the queue, with a clear error
    pg.sql(src, "UPDATE t SET v = 21 WHERE id = 2")
    pg.sql(dst, "UPDATE t SET v = -1 WHERE id = 2")
    run_pg_capture(None, cfg, "cap")
    assert apply_pg_once(None, cfg, "topg").errors == 0  # resolved by MAXIMUM: 21 > -1
    pg.sql(src, "DELETE FROM t WHERE id = 2")
    pg.sql(dst, "DELETE FROM t WHERE id = 2")
    run_pg_capture(None, cfg, "cap")
    assert apply_pg_once(None, cfg, "topg").errors == 1  # row missing, no delete handler
    pg.sql(dst, "DROP TABLE t")
    res = execute_errors(cfg, "topg")
    [(eid, message)] = res.failed.items()
    assert 'relation "public.t" does not exist' in message
    assert errorq.entries(rt.store, "topg")[0].error_message == message


def test_ddl_lcrs_on_postgres(pg, tmp_path, monkeypatch, spark) -> None:  # type: ignore[no-untyped-def]
    from changeflow import lcr
    from changeflow.queues import io as qio

    cfg, _, dst = _setup(pg, tmp_path, monkeypatch)
    msgs = []
    for i, (cmd, text) in enumerate([
        ("CREATE TABLE", "CREATE TABLE public.t (id int PRIMARY KEY, v varchar2(10))"),
        ("ALTER TABLE", "ALTER TABLE public.t ADD (n number(8,2))"),
        ("ALTER TABLE", "ALTER TABLE public.t RENAME COLUMN v TO label"),
        ("ALTER TABLE", "ALTER TABLE public.t DROP COLUMN n"),
        ("CREATE INDEX", "CREATE INDEX ti ON public.t (label)"),
    ]):
        m = {f: None for f in lcr.FIELD_NAMES}
        m.update(schema_version=1, msg_id=f"ddl{i}", kind="DDL", origin="CAPTURED",
                 source_database_name="PG1.EXAMPLE.COM", command_type=cmd, object_type="TABLE",
                 object_owner="PUBLIC", object_name="T", ddl_text=text, transaction_id=f"d{i}",
                 commit_scn=100 + i, commit_time=None, position=1)
        msgs.append(m)
    rt, q = queue_site(cfg, "strm.q1@s1")
    df = spark.createDataFrame([tuple(m[f] for f in lcr.FIELD_NAMES) for m in msgs],
                               lcr.spark_schema())
    qio.enqueue(spark, rt.catalog, q, df, producer="test")
    res = apply_pg_once(None, cfg, "topg")
    assert (res.ddl, res.errors) == (4, 1)
    cols = _rows(pg, dst, "SELECT column_name, data_type FROM information_schema.columns "
                          "WHERE table_name = 't' ORDER BY ordinal_position")
    assert cols == [("id", "integer"), ("label", "character varying")]
    [e] = errorq.entries(rt.store, "topg")
    assert e.error_kind == "ddl" and "not one an apply executes" in e.error_message


def _big() -> str:
    rng = random.Random(7)
    return "".join(rng.choice(string.ascii_letters) for _ in range(100_000))


def test_toasted_column_survives_an_update_into_parquet_and_postgres(
        pg, tmp_path, monkeypatch, spark) -> None:  # type: ignore[no-untyped-def]
    cfg, src, dst = _setup(pg, tmp_path, monkeypatch, applies="""
          - {name: toparquet, queue: strm.q2@s1, buckets: 2}
    """, tail="""
        propagations:
          - {name: fan, source_queue: strm.q1@s1, destination_queue: strm.q2@s1}
    """)
    big = _big()
    pg.sql(src, "CREATE TABLE t (id int PRIMARY KEY, small int, big text)")
    pg.sql(dst, "CREATE TABLE t (id int PRIMARY KEY, small int, big text)")
    run_pg_capture(None, cfg, "cap")
    with pg.connect(src) as c:
        c.execute("INSERT INTO t VALUES (1, 1, %s)", (big,))
        c.commit()
    toast = pg.sql(src, "SELECT reltoastrelid::regclass FROM pg_class WHERE relname = 't'")
    assert int(pg.sql(src, f"SELECT count(*) FROM {toast.strip()}").strip()) > 0  # out of line
    run_pg_capture(None, cfg, "cap")
    pg.sql(src, "UPDATE t SET small = 2")
    run_pg_capture(None, cfg, "cap")
    rt, q = queue_site(cfg, "strm.q1@s1")
    update = [m for m in arrow_io.read_arrow_batches(rt.catalog.pending(q, "apply:topg"))
              .to_pylist() if m["command_type"] == "UPDATE"]
    assert [k for k, _ in update[0]["new_values"]] == ["ID", "SMALL"]  # TOAST not resent
    from changeflow.propagation import propagate_once

    propagate_once(spark, cfg, "fan")
    apply_pg_once(None, cfg, "topg")
    apply_once(spark, cfg, "toparquet")
    assert _rows(pg, dst) == [(1, 2, big)]
    got = read_table(spark, targets_of(cfg, cfg.applies[1]), "public.t").collect()
    assert [(r.id, r.small, r.big == big) for r in got] == [(1, 2, True)]


def test_apply_forwarding_keeps_the_source_database(pg, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """pg1 -> apply -> pg2, where two captures read pg2: one takes tagged changes."""
    tag = uuid.uuid4().hex[:8]
    cfg, src, dst = _setup(pg, tmp_path, monkeypatch, tag=tag, captures=f"""
          - name: mid_all
            queue: strm.q2@s1
            source: {{type: postgres, database: PG2.EXAMPLE.COM, url_env: CF_ADST_{tag},
                      slot: mid_all_{tag}, tables: [public.t], include_tagged_lcr: true}}
          - name: mid_local
            queue: strm.q2@s1
            source: {{type: postgres, database: PG2.EXAMPLE.COM, url_env: CF_ADST_{tag},
                      slot: mid_local_{tag}, tables: [public.t]}}
    """)
    pg.sql(src, "CREATE TABLE t (id int PRIMARY KEY, v text)")
    pg.sql(dst, "CREATE TABLE t (id int PRIMARY KEY, v text)")
    for name in ("cap", "mid_all", "mid_local"):
        run_pg_capture(None, cfg, name)
    pg.sql(src, "INSERT INTO t VALUES (1, 'from pg1')")
    run_pg_capture(None, cfg, "cap")
    apply_pg_once(None, cfg, "topg")
    local = run_pg_capture(None, cfg, "mid_local")
    assert (local.messages, local.tagged_skipped) == (0, 1)  # ignored by default
    assert run_pg_capture(None, cfg, "mid_all").messages == 1
    rt, q = queue_site(cfg, "strm.q2@s1")
    rt.catalog.add_consumer(q, "probe")
    [m] = arrow_io.read_arrow_batches(rt.catalog.pending(q, "probe")).to_pylist()
    assert (m["source_database_name"], m["tag"]) == ("PG1.EXAMPLE.COM", b"\x00")
