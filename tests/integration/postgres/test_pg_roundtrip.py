"""Capture from a slot and apply into another database: types, old values, idempotence."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from pathlib import Path
from typing import Any

import pytest

from changeflow.apply.postgres import apply_pg_once
from changeflow.capture.postgres import run_pg_capture
from changeflow.config import load_config
from changeflow.queues import arrow_io
from changeflow.sites import queue_site

pytestmark = pytest.mark.postgres

TYPED = """
CREATE TABLE typed (
    id int PRIMARY KEY, n numeric(12,4), i8 bigint, i2 smallint, t text, v varchar(10),
    c char(3), b boolean, d date, ts timestamp, tz timestamptz, f8 float8, f4 real,
    r bytea, u uuid, j jsonb);
CREATE TABLE full_ident (id int PRIMARY KEY, a text, b int);
ALTER TABLE full_ident REPLICA IDENTITY FULL;
"""


def _pipeline(pg: Any, workdir: Path, pipeline_file: Any, monkeypatch: Any,
              tables: str = "[public.typed, public.full_ident]") -> tuple[Any, str, str]:
    tag = uuid.uuid4().hex[:8]
    src, dst = f"src_{tag}", f"dst_{tag}"
    monkeypatch.setenv(f"CF_SRC_{tag}", pg.createdb(src))
    monkeypatch.setenv(f"CF_DST_{tag}", pg.createdb(dst))
    path = pipeline_file(workdir, f"""
        queues:
          - {{name: strm.q1, site: s1}}
        captures:
          - name: cap
            queue: strm.q1@s1
            source: {{type: postgres, database: PG1.EXAMPLE.COM, url_env: CF_SRC_{tag},
                      slot: slot_{tag}, tables: {tables}}}
        applies:
          - name: topg
            queue: strm.q1@s1
            target: {{type: postgres, url_env: CF_DST_{tag}, group_changes: 3}}
    """)
    return load_config(path), src, dst


def _rows(pg: Any, db: str, table: str) -> list[tuple[Any, ...]]:
    with pg.connect(db) as c:
        return c.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()


def test_types_old_values_and_apply(pg: Any, workdir: Path, pipeline_file: Any,
                                    monkeypatch: Any) -> None:
    cfg, src, dst = _pipeline(pg, workdir, pipeline_file, monkeypatch)
    for db in (src, dst):
        pg.sql(db, TYPED)
    assert run_pg_capture(None, cfg, "cap").messages == 0  # creates the slot
    pg.sql(src, """
        INSERT INTO typed VALUES (1, 12.5, 9007199254740993, -3, 'héllo', 'v', 'ab', true,
          '2024-02-29', '2024-01-02 03:04:05.123456', '2024-01-02 03:04:05.5+02', 1.25, 0.5,
          '\\x00ff', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"k": [1, 2]}');
        INSERT INTO typed (id) VALUES (2);
        INSERT INTO full_ident VALUES (1, 'x', 10);
        BEGIN;
        UPDATE typed SET t = 'changed', n = NULL WHERE id = 1;
        UPDATE full_ident SET a = 'y' WHERE id = 1;
        DELETE FROM typed WHERE id = 2;
        COMMIT;
    """)
    result = run_pg_capture(None, cfg, "cap")
    assert result.messages == 6 and result.transactions == 4

    rt, queue = queue_site(cfg, "strm.q1@s1")
    lcrs = arrow_io.read_arrow_batches(rt.catalog.pending(queue, "apply:topg")).to_pylist()
    first = lcrs[0]
    assert (first["command_type"], first["object_owner"], first["object_name"]) == (
        "INSERT", "PUBLIC", "TYPED")
    assert first["key_columns"] == ["ID"] and first["source_database_name"] == "PG1.EXAMPLE.COM"
    new = dict(first["new_values"])
    assert new["N"]["type"] == "NUMBER" and new["N"]["dec"] == decimal.Decimal("12.5")
    assert new["I8"]["int"] == 9007199254740993
    assert new["T"]["str"] == "héllo" and new["C"]["str"] == "ab "
    assert new["B"]["bool"] is True and new["D"]["date"] == dt.date(2024, 2, 29)
    assert new["TS"]["type"] == "TIMESTAMP"
    assert new["TS"]["ts_ntz"] == dt.datetime(2024, 1, 2, 3, 4, 5, 123456)
    assert new["TZ"]["type"] == "TIMESTAMP WITH TIME ZONE"
    assert new["TZ"]["ts"] == dt.datetime(2024, 1, 2, 1, 4, 5, 500000, tzinfo=dt.UTC)
    assert new["F8"]["dbl"] == 1.25 and new["R"]["raw"] == b"\x00\xff"
    null_row = dict(lcrs[1]["new_values"])
    assert null_row["N"] == {**null_row["N"], "type": "NUMBER", "dec": None}
    assert null_row["TZ"]["type"] == "TIMESTAMP WITH TIME ZONE" and null_row["TZ"]["ts"] is None
    upd = [m for m in lcrs if m["command_type"] == "UPDATE"]
    assert dict(upd[0]["old_values"]).keys() == {"ID"}  # default replica identity: the key
    assert dict(upd[1]["old_values"])["A"]["str"] == "x"  # REPLICA IDENTITY FULL: all
    assert len({m["transaction_id"] for m in upd}) == 1
    assert [m["position"] for m in lcrs[-3:]] == [1, 2, 3]
    assert lcrs[-1]["commit_scn"] > lcrs[0]["commit_scn"]

    applied = apply_pg_once(None, cfg, "topg")
    assert applied.changes == 6 and applied.errors == 0
    for table in ("typed", "full_ident"):
        assert _rows(pg, dst, table) == _rows(pg, src, table)


def test_reapply_is_harmless_and_restart_rereads(pg: Any, workdir: Path, pipeline_file: Any,
                                                 monkeypatch: Any) -> None:
    cfg, src, dst = _pipeline(pg, workdir, pipeline_file, monkeypatch)
    for db in (src, dst):
        pg.sql(db, TYPED)
    run_pg_capture(None, cfg, "cap")
    pg.sql(src, "INSERT INTO typed (id, t) SELECT g, 'r' || g FROM generate_series(1, 50) g")
    pg.sql(src, "UPDATE typed SET i8 = id * 2 WHERE id <= 10")
    run_pg_capture(None, cfg, "cap")
    rt, queue = queue_site(cfg, "strm.q1@s1")
    rt.catalog.alter_queue(queue, retention_time=3600)  # acknowledged batches stay an hour
    first = apply_pg_once(None, cfg, "topg")
    assert first.changes == 60
    # Re-deliver everything: rewind the apply's queue position.
    rt.catalog.store.engine.dispose()
    from sqlalchemy import update

    from changeflow.state import schema
    with rt.store.begin() as c:
        c.execute(update(schema.queue_consumers).values(position=0))
    again = apply_pg_once(None, cfg, "topg")
    assert again.changes == 0 and again.skipped == 2
    assert _rows(pg, dst, "typed") == _rows(pg, src, "typed")
    # The slot was acknowledged: a new capture run reads nothing more.
    assert run_pg_capture(None, cfg, "cap").messages == 0
