"""TRUNCATE then reload in one source transaction, applied to Parquet (issue 13).

pgbench -i does it: TRUNCATE of its tables, INSERTs, a COPY, one COMMIT. The Parquet
target must end up as the source, whether the table existed there before or not.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from changeflow.apply import errorq
from changeflow.apply.engine import apply_once, targets_of
from changeflow.capture.postgres import run_pg_capture
from changeflow.config import load_config
from changeflow.sites import queue_site
from changeflow.targets.read import read_table

pytestmark = [pytest.mark.postgres, pytest.mark.spark]

TABLES = """
CREATE TABLE acc (aid int PRIMARY KEY, bid int, abalance int, filler char(20));
CREATE TABLE br (bid int PRIMARY KEY, bbalance int);
"""
N = 3000


def _pipeline(pg: Any, workdir: Path, pipeline_file: Any, monkeypatch: Any) -> tuple[Any, str]:
    tag = uuid.uuid4().hex[:8]
    src = f"trunc_src_{tag}"
    monkeypatch.setenv(f"CF_TRUNC_{tag}", pg.createdb(src))
    pg.sql(src, TABLES)
    path = pipeline_file(workdir, f"""
        queues:
          - {{name: strm.cq, site: s1}}
        captures:
          - name: cap
            queue: strm.cq@s1
            source: {{type: postgres, database: PG1.EXAMPLE.COM, url_env: CF_TRUNC_{tag},
                      slot: trunc_{tag}, schemas: [public], batch_changes: 1000}}
        applies:
          - {{name: toparquet, queue: strm.cq@s1}}
    """)
    return load_config(path), src


def _reload(pg: Any, src: str, first: int) -> None:
    """A row of its own, then one transaction: an INSERT, TRUNCATE of both tables, an
    INSERT, a COPY of N rows. What comes before the TRUNCATE must not survive it."""
    pg.sql(src, f"""
        INSERT INTO acc VALUES ({first - 2}, 0, 0, 'before');
        BEGIN;
        INSERT INTO acc VALUES ({first - 1}, 0, 0, 'before');
        TRUNCATE acc, br;
        INSERT INTO br VALUES (1, {first});
        COPY acc FROM PROGRAM 'seq {first} {first + N - 1} | awk ''{{print $1",1,0,x"}}''' CSV;
        COMMIT;
    """)


def _flow(spark: Any, cfg: Any) -> Any:
    run_pg_capture(None, cfg, "cap")
    result = apply_once(spark, cfg, "toparquet")
    rt, _ = queue_site(cfg, "strm.cq@s1")
    failed = [f"{e.error_kind}: {e.error_message}" for e in errorq.entries(rt.store)]
    assert result.errors == 0 and not failed, f"the apply failed transactions: {failed}"
    return result


def _compare(pg: Any, spark: Any, cfg: Any, src: str) -> None:
    catalog = targets_of(cfg, cfg.component("apply", "toparquet"))
    with pg.connect(src) as s:
        for table in ("acc", "br"):
            expected = s.execute(f"SELECT * FROM {table}").fetchall()
            assert expected, f"{table} is empty in the source"
            cols = [c.name for c in s.execute(f"SELECT * FROM {table} LIMIT 0").description]
            got = read_table(spark, catalog, f"public.{table}").select(*cols).collect()
            assert sorted(tuple(r) for r in got) == sorted(expected), \
                f"{table} differs in the Parquet target"


def test_truncate_and_reload_in_one_transaction(pg: Any, spark: Any, workdir: Path,
                                                 pipeline_file: Any, monkeypatch: Any) -> None:
    cfg, src = _pipeline(pg, workdir, pipeline_file, monkeypatch)
    run_pg_capture(None, cfg, "cap")  # creates the slot
    _reload(pg, src, 1)  # the Parquet tables do not exist yet
    _flow(spark, cfg)
    _compare(pg, spark, cfg, src)
    _reload(pg, src, 10_001)  # now they do: the old rows go
    _flow(spark, cfg)
    _compare(pg, spark, cfg, src)
