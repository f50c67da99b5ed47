"""Bad input on an object store: credentials missing or wrong, a bucket that does not
exist, a store answering 5xx for a while, a slow listing. Each gives an error naming the
site and the URI, terminal or transient as it should be, and nothing half-written: the
source keeps its batches, the destination and the targets get nothing until the store is
fixed, and then every message arrives once.

The store is S3Proxy on loopback behind a fault proxy (:mod:`changeflow.testing.s3_faults`);
site ``s1`` is on local files, site ``s2`` (staging root and targets) on a bucket.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner

from changeflow.testing.s3_faults import FaultProxy
from changeflow.testing.s3_server import S3Server

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.slow]

PIPELINE = """
version: 1
sites:
  s1: {{staging_root: {tmp}/s1/staging, target_root: {tmp}/s1/targets,
       state_url: "sqlite:///{tmp}/s1.db", database: DBS1.EXAMPLE.COM}}
  s2: {{staging_root: s3a://{bucket}/s2/staging, target_root: s3a://{bucket}/s2/targets,
       state_url: "sqlite:///{tmp}/s2.db", database: DBS2.EXAMPLE.COM}}
queues:
  - {{name: strmadmin.q, site: s1}}
  - {{name: strmadmin.q, site: s2}}
propagations:
  - {{name: p12, source_queue: strmadmin.q@s1, destination_queue: strmadmin.q@s2}}
applies:
  - {{name: ap, queue: strmadmin.q@s2, buckets: 2}}
"""


@pytest.fixture(scope="module")
def store() -> Iterator[tuple[S3Server, FaultProxy]]:
    s3 = S3Server().start()
    proxy = FaultProxy(s3.port).start()
    try:
        yield s3, proxy
    finally:
        proxy.stop()
        s3.stop()


def pipeline(tmp_path: Path, bucket: str) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(PIPELINE.format(tmp=tmp_path, bucket=bucket))
    return path


def use(monkeypatch: pytest.MonkeyPatch, s3: S3Server, endpoint: str, **extra: str) -> None:
    """The client settings a user would export (``extra`` overrides, '' unsets)."""
    for k, v in {**s3.env(endpoint), "CHANGEFLOW_S3_ATTEMPTS": "1", **extra}.items():
        if v:
            monkeypatch.setenv(k, v)
        else:
            monkeypatch.delenv(k, raising=False)


def doctor(config: Path, *args: str) -> tuple[int, list[str]]:
    from changeflow.cli import main

    out = CliRunner().invoke(main, ["doctor", "--config", str(config), "--master", "local[2]",
                                    "--backoff", "0.1", "--min-free-gb", "0", *args])
    return out.exit_code, out.output.strip().splitlines()[:7]  # not the scratch space


def line(lines: list[str], what: str) -> str:
    return next(ln for ln in lines if what in ln)


def test_doctor_names_the_site_and_uri_of_bad_credentials_and_a_missing_bucket(
        store: tuple[S3Server, FaultProxy], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    s3, _ = store
    missing = f"cf-missing-{uuid.uuid4().hex[:8]}"
    config = pipeline(tmp_path, missing)
    use(monkeypatch, s3, s3.endpoint)

    code, lines = doctor(config)
    assert code == 65, lines  # terminal: no retry creates a bucket
    assert line(lines, "site s1 staging root").startswith("ok")
    bad = line(lines, "site s2 staging root")
    assert bad.startswith("FAILED") and f"s3a://{missing}/s2/staging" in bad
    assert f"bucket '{missing}' does not exist" in bad
    assert f"bucket '{missing}' does not exist" in line(lines, "site s2 target catalog")

    bucket = s3.create_bucket(missing)  # fixed: every check passes, nothing left behind
    code, lines = doctor(config)
    assert code == 0, lines
    assert [ln.split()[0] for ln in lines] == ["ok"] * 7
    assert s3.objects(missing) == [], "the probe objects were not deleted"

    use(monkeypatch, s3, s3.endpoint, AWS_SECRET_ACCESS_KEY="not-the-secret")
    code, lines = doctor(config)
    assert code == 65, lines
    bad = line(lines, "site s2 staging root")
    assert bad.startswith("FAILED") and f"{bucket}/s2/staging" in bad and "access denied" in bad
    assert line(lines, "site s1 staging root").startswith("ok")

    use(monkeypatch, s3, s3.endpoint, AWS_ACCESS_KEY_ID="", AWS_SECRET_ACCESS_KEY="")
    monkeypatch.setenv("CHANGEFLOW_S3_ENDPOINT", s3.endpoint)
    code, lines = doctor(config)
    assert code == 65, lines
    bad = line(lines, "site s2 staging root")
    assert f"{bucket}/s2/staging" in bad and "credentials missing: AWS_ACCESS_KEY_ID" in bad


def test_doctor_retries_a_store_failing_for_a_while_and_reports_a_slow_listing(
        store: tuple[S3Server, FaultProxy], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    s3, proxy = store
    bucket = f"cf-flaky-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(bucket)
    config = pipeline(tmp_path, bucket)
    use(monkeypatch, s3, proxy.endpoint)
    try:
        proxy.fail(2)  # two 503s: each check is tried again with backoff, and passes
        before = proxy.counts["failed"]
        code, lines = doctor(config)
        assert code == 0, lines
        assert proxy.counts["failed"] - before == 2

        proxy.fail(None)  # down all along: reported transient (exit 75), site and URI named
        code, lines = doctor(config, "--retries", "1")
        assert code == 75, lines
        bad = line(lines, "site s2 staging root")
        assert bad.startswith("FAILED") and f"s3a://{bucket}/s2/staging" in bad
        assert "unavailable" in bad
        proxy.heal()

        proxy.slow_listing(1.5)  # slower than --slow-after: a warning, not a failure
        code, lines = doctor(config, "--slow-after", "1")
        assert code == 0, lines
        assert line(lines, "site s2 staging root").startswith("slow")

        use(monkeypatch, s3, proxy.endpoint, CHANGEFLOW_S3_TIMEOUT="1")
        proxy.slow_listing(3)  # slower than the request timeout: transient, said so
        code, lines = doctor(config, "--retries", "0")
        assert code == 75, lines
        bad = line(lines, "site s2 staging root")
        assert f"s3a://{bucket}/s2/staging" in bad and "CHANGEFLOW_S3_TIMEOUT=1" in bad
    finally:
        proxy.heal()
    assert s3.objects(bucket) == []


def _pending(cfg: Any, ref: str, consumer: str) -> int:
    from changeflow.sites import queue_site

    rt, q = queue_site(cfg, ref)
    return len(rt.catalog.pending(q, consumer))


@pytest.mark.spark
def test_propagation_and_apply_write_nothing_until_the_store_is_fixed(
        spark: SparkSession, store: tuple[S3Server, FaultProxy], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from changeflow import storage
    from changeflow.apply.engine import targets_of
    from changeflow.config import load_config
    from changeflow.errors import is_transient
    from changeflow.runner import run_component
    from changeflow.schedules import probe
    from changeflow.sites import open_pipeline, queue_site
    from changeflow.targets.read import read_arrow

    s3, proxy = store
    bucket = f"cf-prop-{uuid.uuid4().hex[:8]}"
    use(monkeypatch, s3, proxy.endpoint)
    cfg = load_config(pipeline(tmp_path, bucket))
    open_pipeline(cfg)
    rt, q = queue_site(cfg, "strmadmin.q@s2")
    rt.catalog.add_consumer(q, "audit:s3", "audit")
    sent = [f"m{i}" for i in range(40)]
    probe.enqueue_probes(cfg, "strmadmin.q@s1", sent[:20], scn=1)
    probe.enqueue_probes(cfg, "strmadmin.q@s1", sent[20:], scn=21)
    where = f"s3a://{bucket}/s2/staging"

    def refused(transient: bool) -> str:
        with pytest.raises(Exception) as info:
            run_component(spark, cfg, "propagation", "p12")
        assert is_transient(info.value) is transient, info.value
        assert "site s2" in str(info.value) and where in str(info.value), info.value
        # nothing half-written: the source keeps both batches, the destination has none
        assert _pending(cfg, "strmadmin.q@s1", "propagation:p12") == 2
        assert _pending(cfg, "strmadmin.q@s2", "audit:s3") == 0
        return str(info.value)

    assert f"bucket '{bucket}' does not exist" in refused(transient=False)
    s3.create_bucket(bucket)
    use(monkeypatch, s3, proxy.endpoint, AWS_SECRET_ACCESS_KEY="not-the-secret")
    assert "access denied" in refused(transient=False)
    use(monkeypatch, s3, proxy.endpoint)
    proxy.fail(None)
    try:
        assert "unavailable" in refused(transient=True)
    finally:
        proxy.heal()
    assert s3.objects(bucket) == []

    run_component(spark, cfg, "propagation", "p12")
    assert sorted(probe.arrived(cfg, "strmadmin.q@s2", "audit:s3")) == sorted(sent)
    assert _pending(cfg, "strmadmin.q@s1", "propagation:p12") == 0
    delivered = _pending(cfg, "strmadmin.q@s2", "apply:ap")
    assert delivered > 0

    # the apply's listing of the batches is slower than the request timeout: transient,
    # the targets untouched, the batches kept; then the apply runs once the store is fast
    use(monkeypatch, s3, proxy.endpoint, CHANGEFLOW_S3_TIMEOUT="1")
    proxy.slow_listing(3)
    try:
        with pytest.raises(storage.StorageUnavailableError) as info:
            run_component(spark, cfg, "apply", "ap")
        assert "site s2" in str(info.value) and where in str(info.value)
        assert "CHANGEFLOW_S3_TIMEOUT=1" in str(info.value)
    finally:
        proxy.heal()
    assert not [k for k in s3.objects(bucket) if k.startswith("s2/targets/")]
    assert _pending(cfg, "strmadmin.q@s2", "apply:ap") == delivered
    use(monkeypatch, s3, proxy.endpoint)
    run_component(spark, cfg, "apply", "ap")
    table = read_arrow(targets_of(cfg, cfg.component("apply", "ap")), "probe.ping")
    ids = table.column(next(c for c in table.column_names if c.lower() == "id"))
    assert sorted(int(v) for v in ids.to_pylist()) == list(range(1, 41))  # each row once
    keys = s3.objects(bucket, "s2/targets/probe/ping/")
    assert any("/data/" in k for k in keys) and any("/metadata/" in k for k in keys)
    assert not [k for k in s3.objects(bucket) if "__magic" in k]
