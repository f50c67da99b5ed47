"""LCR -> Debezium envelope -> LCR on changes made by the project's own PostgreSQL capture.

PostgreSQL changes are captured from a slot (``capture/postgres.py``), the queue is
exported with the PostgreSQL connector's field mapping, once with schemas and once
without, and both exports are captured back by Debezium sources. Every LCR must come
back identical (types and values), and applying the re-captured queue to another
database must reproduce the source tables.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from changeflow.apply.postgres import apply_pg_once
from changeflow.capture.postgres import run_pg_capture
from changeflow.debezium.capture import run_debezium_capture
from changeflow.debezium.export import export_queue

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

TABLES = """
CREATE TABLE typed (
    id int PRIMARY KEY, n numeric(12,4), i8 bigint, t text, c char(3), b boolean, d date,
    ts timestamp, tz timestamptz, f8 float8, r bytea, u uuid, j jsonb);
CREATE TABLE other (k text, v int, PRIMARY KEY (k, v));
"""
CHANGES = """
INSERT INTO typed VALUES (1, 12.5, 9007199254740993, 'héllo "q"', 'ab', true, '2024-02-29',
  '2024-01-02 03:04:05.123456', '2024-01-02 03:04:05.5+02', 1.25, '\\x00ff',
  'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"k": [1, 2]}');
INSERT INTO typed (id, n) VALUES (2, -99999999.9999);
INSERT INTO other VALUES ('a', 1), ('b', 2);
BEGIN;
UPDATE typed SET t = 'changed', n = NULL WHERE id = 1;
DELETE FROM typed WHERE id = 2;
UPDATE other SET v = 3 WHERE k = 'b';
COMMIT;
"""


def test_round_trip_keeps_types_and_values(spark: Any, pg: Any, tmp_path: Path, dbz: Any,
                                           monkeypatch: Any) -> None:
    tag = uuid.uuid4().hex[:8]
    src, dst = f"src_{tag}", f"dst_{tag}"
    monkeypatch.setenv(f"CF_SRC_{tag}", pg.createdb(src))
    monkeypatch.setenv(f"CF_DST_{tag}", pg.createdb(dst))
    for db in (src, dst):
        pg.sql(db, TABLES)
    out = tmp_path / "export"
    cfg = dbz.pipeline(tmp_path, f"""
        queues:
          - {{name: strm.pg, site: s1}}
          - {{name: strm.with_schemas, site: s1}}
          - {{name: strm.plain, site: s1}}
        captures:
          - name: pgcap
            queue: strm.pg@s1
            source: {{type: postgres, database: PG1.EXAMPLE.COM, url_env: CF_SRC_{tag},
                      slot: slot_{tag}, tables: [public.typed, public.other]}}
          - name: back_with_schemas
            queue: strm.with_schemas@s1
            source: {{type: debezium, database: unused, root: {out}/with}}
          - name: back_plain
            queue: strm.plain@s1
            source:
              type: debezium
              database: unused
              root: {out}/plain
              tables:
                - name: public.typed
                  key: [id]
                  columns: {{id: int, n: NUMBER, i8: bigint, t: text, c: text, b: boolean,
                            d: date, ts: timestamp, tz: timestamptz, f8: float8, r: bytea,
                            u: uuid, j: jsonb}}
                - {{name: public.other, key: [k, v], columns: {{k: text, v: integer}}}}
        applies:
          - name: topg
            queue: strm.plain@s1
            target: {{type: postgres, url_env: CF_DST_{tag}}}
    """)
    assert run_pg_capture(None, cfg, "pgcap").messages == 0  # creates the slot
    pg.sql(src, CHANGES)
    assert run_pg_capture(None, cfg, "pgcap").messages == 7

    with_schemas = export_queue(spark, cfg, "strm.pg@s1", f"{out}/with", topic_prefix="pg1")
    plain = export_queue(spark, cfg, "strm.pg@s1", f"{out}/plain", schemas=False,
                         topic_prefix="pg1")
    assert with_schemas.topics == plain.topics == {"pg1.public.other": 3, "pg1.public.typed": 4}
    assert sorted(p.name for p in (out / "with" / "pg1.public.typed").iterdir()) == [
        "pg1.public.typed+0+0000000000.json"]

    assert run_debezium_capture(spark, cfg, "back_with_schemas").messages == 7
    assert run_debezium_capture(spark, cfg, "back_plain").messages == 7
    original = dbz.queue_rows(cfg, "strm.pg@s1")
    assert dbz.queue_rows(cfg, "strm.with_schemas@s1") == original
    assert dbz.queue_rows(cfg, "strm.plain@s1") == original

    applied = apply_pg_once(None, cfg, "topg")
    assert applied.errors == 0 and applied.changes == 7
    for table in ("typed", "other"):
        with pg.connect(src) as a, pg.connect(dst) as b:
            want = a.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
            got = b.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
        assert got == want and want
