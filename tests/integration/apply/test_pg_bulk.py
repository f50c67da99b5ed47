"""The set-based apply of groups of transactions into PostgreSQL (changeflow.apply.pg_bulk):
the same target as one by one, conflicts isolated to their transaction, exactly once
across a kill -9 inside the group's target transaction."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from changeflow.apply import views
from changeflow.apply.postgres import apply_pg_once
from changeflow.capture.postgres import run_pg_capture
from changeflow.config import load_config
from changeflow.faults import EXIT_CRASHED
from changeflow.sites import open_pipeline
from changeflow.testing.pg_cluster import PG_BIN, PgCluster

pytestmark = pytest.mark.postgres

COLUMNS = ("id int PRIMARY KEY, v int, w text, n numeric(10,2), ts timestamptz, d date, "
           "b bytea, f boolean, x double precision")


@pytest.fixture(scope="module")
def pg() -> Iterator[PgCluster]:
    if not (PG_BIN / "initdb").exists():
        pytest.fail(f"PostgreSQL 15 is not installed at {PG_BIN}; run make setup")
    cluster = PgCluster().start()
    try:
        yield cluster
    finally:
        cluster.stop()


def _setup(pg: PgCluster, tmp_path: Path, monkeypatch: Any, tables: str) -> tuple[Any, str, str]:
    tag = uuid.uuid4().hex[:8]
    src, dst = f"b_src_{tag}", f"b_dst_{tag}"
    monkeypatch.setenv(f"CF_BSRC_{tag}", pg.createdb(src))
    monkeypatch.setenv(f"CF_BDST_{tag}", pg.createdb(dst))
    (tmp_path / "p.yaml").write_text(textwrap.dedent(f"""
        version: 1
        sites:
          s1: {{staging_root: s1/staging, target_root: s1/targets,
               state_url: "sqlite:///s1/state.db", database: PG1.EXAMPLE.COM}}
        queues:
          - {{name: strm.q1, site: s1}}
        captures:
          - name: cap
            queue: strm.q1@s1
            source: {{type: postgres, database: PG1.EXAMPLE.COM, url_env: CF_BSRC_{tag},
                      slot: bslot_{tag}, tables: {tables}}}
        applies:
          - name: topg
            queue: strm.q1@s1
            target: {{type: postgres, url_env: CF_BDST_{tag}}}
    """))
    cfg = load_config(tmp_path / "p.yaml")
    open_pipeline(cfg)
    return cfg, src, dst


def _rows(pg: PgCluster, db: str, table: str = "t") -> list[tuple]:
    with pg.connect(db) as c:
        return c.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()


def _workload(seed: int, n_txns: int) -> str:
    """Random transactions inserting, updating, deleting and re-inserting a few keys."""
    rnd = random.Random(seed)
    live: set[int] = set()
    out = []
    for _ in range(n_txns):
        out.append("BEGIN;")
        for _ in range(rnd.randint(1, 4)):
            k = rnd.randint(1, 12)
            v = rnd.randint(0, 10**6)
            if k not in live:
                out.append(f"INSERT INTO t VALUES ({k}, {v}, 'w{v}', {v / 7:.2f}, "
                           f"'2026-01-01 10:00+00'::timestamptz + interval '{v} s', "
                           f"date '2026-01-01' + {v % 300}, '\\x{v:08x}'::bytea, {v % 2 == 0}, "
                           f"{v / 3});")
                live.add(k)
            elif rnd.random() < 0.25:
                out.append(f"DELETE FROM t WHERE id = {k};")
                live.discard(k)
            elif rnd.random() < 0.5:
                out.append(f"UPDATE t SET v = {v}, w = NULL WHERE id = {k};")
            else:
                out.append(f"UPDATE t SET n = n + 1, ts = NULL, f = NOT f WHERE id = {k};")
        out.append("COMMIT;")
    return "\n".join(out)


@pytest.mark.parametrize("identity", ["DEFAULT", "FULL"])
def test_groups_apply_set_based_to_the_same_rows_as_the_source(
        pg, tmp_path, monkeypatch, identity) -> None:  # type: ignore[no-untyped-def]
    cfg, src, dst = _setup(pg, tmp_path, monkeypatch, "[public.t]")
    pg.sql(src, f"CREATE TABLE t ({COLUMNS}); ALTER TABLE t REPLICA IDENTITY {identity}")
    pg.sql(dst, f"CREATE TABLE t ({COLUMNS})")
    run_pg_capture(None, cfg, "cap")
    pg.sql(src, _workload(7, 80))
    run_pg_capture(None, cfg, "cap")
    res = apply_pg_once(None, cfg, "topg")
    assert (res.transactions, res.set_based, res.errors) == (80, 80, 0)
    assert _rows(pg, dst) == _rows(pg, src)
    with pg.connect(dst) as c:
        done = c.execute("SELECT count(*) FROM changeflow.applied_txns WHERE "
                         "outcome = 'applied'").fetchone()
    assert done == (80,)


def test_a_conflicting_transaction_alone_goes_to_the_error_queue(
        pg, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    cfg, src, dst = _setup(pg, tmp_path, monkeypatch, "[public.t]")
    pg.sql(src, "CREATE TABLE t (id int PRIMARY KEY, v int); ALTER TABLE t REPLICA IDENTITY FULL")
    pg.sql(dst, "CREATE TABLE t (id int PRIMARY KEY, v int)")
    run_pg_capture(None, cfg, "cap")
    pg.sql(src, "INSERT INTO t SELECT g, g FROM generate_series(1, 5) g")
    run_pg_capture(None, cfg, "cap")
    assert apply_pg_once(None, cfg, "topg").set_based == 1
    pg.sql(dst, "UPDATE t SET v = 99 WHERE id = 3")  # a local change: the source's 3 conflicts
    pg.sql(src, """
        UPDATE t SET v = 10 WHERE id = 1;
        BEGIN; UPDATE t SET v = 20 WHERE id = 2; UPDATE t SET v = 30 WHERE id = 3; COMMIT;
        UPDATE t SET v = 11 WHERE id = 1;
        INSERT INTO t VALUES (6, 6);
    """)
    run_pg_capture(None, cfg, "cap")
    res = apply_pg_once(None, cfg, "topg")
    assert (res.transactions, res.errors, res.set_based) == (3, 1, 0)
    # the later update of 1 expects the earlier one's value: order was kept
    assert _rows(pg, dst) == [(1, 11), (2, 2), (3, 99), (4, 4), (5, 5), (6, 6)]
    [e] = views.list_errors(cfg, "topg")
    assert (e["n_messages"], e["error_kind"]) == (2, "conflict")
    pg.sql(src, "UPDATE t SET v = 12 WHERE id = 1")  # the next group is set-based again
    run_pg_capture(None, cfg, "cap")
    assert apply_pg_once(None, cfg, "topg").set_based == 1
    assert _rows(pg, dst)[0] == (1, 12)


def test_a_table_with_a_trigger_goes_statement_by_statement(
        pg, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    cfg, src, dst = _setup(pg, tmp_path, monkeypatch, "[public.t]")
    pg.sql(src, "CREATE TABLE t (id int PRIMARY KEY, v int)")
    pg.sql(dst, """
        CREATE TABLE t (id int PRIMARY KEY, v int);
        CREATE TABLE seen (n serial, id int, v int);
        CREATE FUNCTION note() RETURNS trigger LANGUAGE plpgsql AS
            $$ BEGIN INSERT INTO seen (id, v) VALUES (NEW.id, NEW.v); RETURN NEW; END $$;
        CREATE TRIGGER note AFTER INSERT OR UPDATE ON t FOR EACH ROW EXECUTE FUNCTION note();
    """)
    run_pg_capture(None, cfg, "cap")
    pg.sql(src, "INSERT INTO t VALUES (1, 1); UPDATE t SET v = 2 WHERE id = 1;")
    run_pg_capture(None, cfg, "cap")
    res = apply_pg_once(None, cfg, "topg")
    assert (res.transactions, res.set_based) == (2, 0)
    assert _rows(pg, dst, "seen") == [(1, 1, 1), (2, 1, 2)]  # each change fired it, in order


def _apply_in_child(cfg_path: Path, crash_at: str | None) -> int:
    code = ("import sys; from changeflow.config import load_config; "
            "from changeflow.apply.postgres import apply_pg_once; "
            "apply_pg_once(None, load_config(sys.argv[1]), 'topg')")
    env = dict(os.environ)
    env.pop("CHANGEFLOW_CRASH_AT", None)
    if crash_at:
        env["CHANGEFLOW_CRASH_AT"] = crash_at
    return subprocess.run([sys.executable, "-c", code, str(cfg_path)], env=env,
                          capture_output=True, timeout=300).returncode


def test_a_kill_inside_the_group_transaction_neither_loses_nor_duplicates(
        pg, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    cfg, src, dst = _setup(pg, tmp_path, monkeypatch, "[public.t, public.h]")
    pg.sql(src, "CREATE TABLE t (id int PRIMARY KEY, v int); "
                "CREATE TABLE h (hid serial PRIMARY KEY, id int, v int)")
    pg.sql(dst, "CREATE TABLE t (id int PRIMARY KEY, v int); "
                "CREATE TABLE h (hid int PRIMARY KEY, id int, v int)")
    run_pg_capture(None, cfg, "cap")
    pg.sql(src, "INSERT INTO t SELECT g, 0 FROM generate_series(1, 3) g;\n" + "\n".join(
        f"BEGIN; UPDATE t SET v = v + {i} WHERE id = {i % 3 + 1}; "
        f"INSERT INTO h (id, v) VALUES ({i % 3 + 1}, {i}); COMMIT;" for i in range(40)))
    run_pg_capture(None, cfg, "cap")
    path = tmp_path / "p.yaml"
    # dies after the group's statements and done records, before its COMMIT
    assert _apply_in_child(path, "apply.before_commit") == EXIT_CRASHED
    assert _rows(pg, dst) == [] and _rows(pg, dst, "h") == []
    # dies right after the COMMIT, before the queue position moves
    assert _apply_in_child(path, "apply.after_commit") == EXIT_CRASHED
    assert _rows(pg, dst) == _rows(pg, src)
    res = apply_pg_once(None, cfg, "topg")  # the re-run skips what the target has
    assert (res.transactions, res.skipped, res.errors) == (0, 41, 0)
    assert _rows(pg, dst) == _rows(pg, src) and _rows(pg, dst, "h") == _rows(pg, src, "h")
    assert views.list_errors(cfg, "topg") == []
