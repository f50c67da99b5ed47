"""Iceberg targets of a site whose state store is PostgreSQL: the catalog lives there,
Spark (Iceberg's JdbcCatalog) and PyIceberg (SqlCatalog) see the same tables."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from changeflow.apply.engine import apply_once, targets_of
from changeflow.config import load_config
from changeflow.sites import open_pipeline, queue_site

pytestmark = [pytest.mark.postgres, pytest.mark.spark]


def test_the_catalog_lives_in_a_postgresql_state_store(pg: Any, spark: Any,
                                                       workdir: Path) -> None:
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog
    from pyspark.sql import functions as F

    from changeflow import lcr
    from changeflow.queues import io as qio

    db = f"state_{uuid.uuid4().hex[:8]}"
    url = pg.createdb(db).replace("postgresql://", "postgresql+psycopg://")
    (workdir / "p.yaml").write_text(f"""
version: 1
sites:
  s2: {{staging_root: s2/staging, target_root: s2/targets, state_url: "{url}",
        database: DBS2.EXAMPLE.COM}}
queues: [{{name: strm.q, site: s2}}]
applies: [{{name: ap, queue: strm.q@s2, buckets: 2}}]
""")
    cfg = load_config(workdir / "p.yaml")
    open_pipeline(cfg)
    msgs = []
    for i in (1, 2, 3):
        m: dict[str, Any] = {n: None for n in lcr.FIELD_NAMES}
        m.update(schema_version=lcr.SCHEMA_VERSION, msg_id=f"m{i}", kind="ROW",
                 origin="CAPTURED", source_database_name="DBS1.EXAMPLE.COM",
                 command_type="INSERT", object_owner="HR", object_name="R",
                 transaction_id="t1", commit_scn=10, position=i, key_columns=["ID"],
                 new_values={"ID": lcr.encode_value(i), "NAME": lcr.encode_value(f"n{i}")})
        msgs.append(m)
    rt, q = queue_site(cfg, "strm.q@s2")
    table = pa.Table.from_pylist(msgs, schema=lcr.arrow_schema())
    df = spark.createDataFrame(table).select(
        *[F.col(f.name).cast(f.dataType) for f in lcr.spark_schema().fields])
    qio.enqueue(spark, rt.catalog, q, df, producer="test")
    assert apply_once(spark, cfg, "ap").transactions == 1
    with pg.connect(db) as conn:  # Iceberg's catalog table, in the state store
        rows = conn.execute("SELECT catalog_name, table_namespace, table_name "
                            "FROM iceberg_tables").fetchall()
    assert rows == [("cf_s2", "hr", "r")]
    arrow = SqlCatalog("cf_s2", uri=url).load_table("hr.r").scan().to_arrow()
    assert sorted(arrow.column("name").to_pylist()) == ["n1", "n2", "n3"]
    assert targets_of(cfg, cfg.applies[0]).row_count(spark, "hr.r") == 3
