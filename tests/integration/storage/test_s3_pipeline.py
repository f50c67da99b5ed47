"""Object storage for real: the demo pipeline with both sites' staging roots and Iceberg
targets on ``s3a://`` buckets of a real S3-compatible server (S3Proxy on loopback), state
stores on PostgreSQL; and ``changeflow doctor`` on the same sites."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from changeflow.testing.pg_cluster import PgCluster
from changeflow.testing.s3_server import S3Server

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROOT = Path(__file__).resolve().parents[3]
pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.spark]


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[S3Server, PgCluster]]:
    s3, pg = S3Server().start(), PgCluster().start()
    try:
        yield s3, pg
    finally:
        s3.stop()
        pg.stop()


def s3_env(monkeypatch: pytest.MonkeyPatch, s3: S3Server, pg: PgCluster, source: Path,
           bucket: str) -> None:
    """Point the demo pipeline at the buckets and PostgreSQL, as a user would."""
    for k, v in s3.env().items():
        monkeypatch.setenv(k, v)
    for n in (1, 2):
        db = f"s3state{n}_{bucket.replace('-', '_')}"
        pg.createdb(db)
        monkeypatch.setenv(f"CHANGEFLOW_SITE{n}_STATE_URL",
                           f"postgresql+psycopg://postgres@/{db}?host={pg.sock}&port={pg.port}")
        monkeypatch.setenv(f"CHANGEFLOW_SITE{n}_STAGING", f"s3a://{bucket}/site{n}/staging")
        monkeypatch.setenv(f"CHANGEFLOW_SITE{n}_TARGETS", f"s3a://{bucket}/site{n}/targets")
    monkeypatch.setenv("CHANGEFLOW_DEMO_SOURCE", str(source))


def test_demo_pipeline_on_s3_buckets(spark: SparkSession, servers: tuple[S3Server, PgCluster],
                                     tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from changeflow.apply.engine import targets_of
    from changeflow.cli import main
    from changeflow.config import load_config
    from changeflow.demo.hr import generate
    from changeflow.demo.verify import verify
    from changeflow.errors import TargetError
    from changeflow.queues import arrow_io
    from changeflow.runner import run_component
    from changeflow.sites import open_pipeline, queue_site
    from changeflow.targets.policy import MaintenancePolicy
    from changeflow.targets.read import duckdb_scan, read_arrow, read_table

    s3, pg = servers
    bucket = f"cf-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(bucket)
    s3_env(monkeypatch, s3, pg, tmp_path / "source", bucket)
    generate(str(tmp_path / "source"), rounds=1, employees=40, changes=20)
    cfg = load_config(ROOT / "config" / "demo.yaml")
    assert cfg.sites["site1"].staging_root == f"s3a://{bucket}/site1/staging"

    def run_round(cfg: Any, *, generate_first: bool = False) -> None:
        """Capture, propagate and apply once (after a new round of source changes), and
        check the targets against the source."""
        if generate_first:
            generate(str(tmp_path / "source"), rounds=1, employees=40, changes=20)
        for kind, name in (("capture", "capture_hr"), ("propagation", "dbs1_to_dbs2"),
                           ("apply", "apply_dbs2")):
            run_component(spark, cfg, kind, name, lease_wait=60)
        result = verify(spark, cfg, "apply_dbs2")
        assert result.ok, result.report()

    open_pipeline(cfg)
    queues = [queue_site(cfg, f"strmadmin.streams_queue@site{n}") for n in (1, 2)]
    for rt, q in queues:  # an audit consumer keeps every batch, to count messages
        rt.catalog.add_consumer(q, "audit:s3", "audit")

    run_round(cfg)
    # a second round changes rows the first applied: the apply deletes them by position
    # (delete files written through the table's FileIO, in the bucket) in one RowDelta;
    # no maintenance from here on, which would rewrite the small table's files at once
    cfg = cfg.model_copy(update={"applies": [a.model_copy(update={"iceberg": a.iceberg.model_copy(
        update={"maintenance": MaintenancePolicy(enabled=False)})}) for a in cfg.applies]})
    run_round(cfg, generate_first=True)
    jt = targets_of(cfg, cfg.component("apply", "apply_dbs2")).java_table(spark, "hr.employees")
    deltas = [d for d in (dict(x.summary()) for x in jt.snapshots())
              if d.get("changeflow.pass-id") and int(d.get("added-position-deletes", 0))
              and "spark.merge-into.num-target-rows-updated" not in d]
    assert deltas, "no pass deleted rows by position (a RowDelta)"
    # a third round changes rows of the same data files again: the pass reads their
    # earlier delete files from the bucket, merges them into its own and removes them
    run_round(cfg, generate_first=True)
    jt.refresh()
    merged = [d for d in (dict(x.summary()) for x in jt.snapshots())
              if d.get("changeflow.pass-id") and int(d.get("removed-delete-files", 0))]
    assert merged, "no pass merged the earlier delete files of a data file"

    # the batches and the tables are objects in the bucket, and nothing was left on disk
    keys = s3.objects(bucket)
    assert any(k.startswith("site1/staging/strmadmin/streams_queue/batch-") and
               k.endswith(".parquet") for k in keys)
    assert any(k.startswith("site2/targets/hr/employees/metadata/") for k in keys)
    assert any(k.startswith("site2/targets/hr/employees/data/") for k in keys)
    assert not [k for k in keys if "__magic" in k], "the magic committer left pending files"
    assert not (ROOT / "s3a:").exists()
    # the Python readers go through S3 too: queue batches by Arrow, the targets by PyIceberg
    ids = []
    for rt, q in queues:
        batches = rt.catalog.pending(q, "audit:s3")
        assert batches and all(b.path.startswith(f"s3a://{bucket}/") for b in batches)
        ids.append(arrow_io.read_arrow_batches(batches).column("msg_id").to_pylist())
    assert len(ids[0]) == len(set(ids[0])) > 0
    assert sorted(ids[0]) == sorted(ids[1]), "messages lost or duplicated on the way"
    targets = targets_of(cfg, cfg.component("apply", "apply_dbs2"))
    assert read_arrow(targets, "hr.employees").num_rows == \
        read_table(spark, targets, "hr.employees").count() > 0
    with pytest.raises(TargetError, match=f"at s3a://{bucket}/.*: DuckDB reads it with its "
                                          "httpfs extension"):
        duckdb_scan(targets, "hr.employees")  # named, not read from a wrong path

    # changeflow doctor: one line per check, each ok, naming the site and the URI
    out = CliRunner().invoke(main, ["doctor", "--config", str(ROOT / "config" / "demo.yaml"),
                                    "--master", "local[2]", "--min-free-gb", "0"])
    assert out.exit_code == 0, out.output
    lines = out.output.strip().splitlines()
    assert len(lines) == 8 and lines[7].startswith("ok     scratch space")
    assert lines[0].startswith("ok") and f"s3a://{bucket}/site1/staging" in lines[0]
    assert "catalog cf_site2: 7 tables" in lines[4]
