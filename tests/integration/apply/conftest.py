"""One-site pipelines and inline LCR batches for the apply tests."""

from __future__ import annotations

import datetime as dt
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from changeflow import lcr
from changeflow.config import PipelineConfig, load_config
from changeflow.sites import open_pipeline, queue_site

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
QUEUE = "strmadmin.apply_q@site2"

BASE = """
version: 1
sites:
  site2: {staging_root: s2/staging, target_root: s2/targets, state_url: "sqlite:///s2/state.db",
          database: DBS2.EXAMPLE.COM}
queues:
  - {name: strmadmin.apply_q, site: site2}
  - {name: strmadmin.other_q, site: site2}
"""


def taken(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[bool]:
    """Spy on an Arrow path's entry ``owner.name``: per call, whether it was taken
    (returned something other than None, which sends the caller to the Spark path)."""
    calls: list[bool] = []
    real = getattr(owner, name)

    def spy(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(owner, name, spy)
    return calls


def vals(**cols: Any) -> dict[str, Any]:
    """A value map: ``vals(id=1, name="x")`` -> ``{"ID": <typed>, "NAME": <typed>}``."""
    return {k.upper(): lcr.encode_value(v) if not isinstance(v, tuple) else
            lcr.encode_value(v[0], v[1]) for k, v in cols.items()}


def row(cmd: str, *, new: dict[str, Any] | None = None, old: dict[str, Any] | None = None,
        table: str = "HR.EMP", txn: str = "t1", scn: int = 10, pos: int = 1,
        source: str = "DBS1.EXAMPLE.COM", key: tuple[str, ...] = ("ID",), **over: Any
        ) -> dict[str, Any]:
    """A row LCR of ``table`` (default HR.EMP keyed by ID)."""
    owner, name = table.split(".")
    msg: dict[str, Any] = {n: None for n in lcr.FIELD_NAMES}
    msg.update(
        schema_version=lcr.SCHEMA_VERSION, msg_id=lcr.message_id(source, scn, txn, pos, table),
        kind="ROW", origin="CAPTURED", source_database_name=source, command_type=cmd,
        object_owner=owner, object_name=name, transaction_id=txn, commit_scn=scn,
        commit_time=T0 + dt.timedelta(seconds=scn), position=pos, key_columns=list(key),
        old_values=old, new_values=new)
    msg.update(over)
    return msg


def ddl(text: str, command: str, *, table: str = "HR.EMP", txn: str = "d1", scn: int = 50,
        pos: int = 1, source: str = "DBS1.EXAMPLE.COM") -> dict[str, Any]:
    """A DDL LCR."""
    owner, name = table.split(".")
    msg: dict[str, Any] = {n: None for n in lcr.FIELD_NAMES}
    msg.update(
        schema_version=lcr.SCHEMA_VERSION, msg_id=lcr.message_id(source, scn, txn, pos, text),
        kind="DDL", origin="CAPTURED", source_database_name=source, command_type=command,
        object_owner=owner, object_name=name, object_type="TABLE", base_table_owner=owner,
        base_table_name=name, ddl_text=text, transaction_id=txn, commit_scn=scn,
        commit_time=T0 + dt.timedelta(seconds=scn), position=pos)
    return msg


def user_msg(i: int, **payload: Any) -> dict[str, Any]:
    """A user message of type HR.ORDER_MSG."""
    msg: dict[str, Any] = {n: None for n in lcr.FIELD_NAMES}
    msg.update(schema_version=lcr.SCHEMA_VERSION, msg_id=f"user-{i}", kind="USER",
               origin="USER", msg_type_name="HR.ORDER_MSG", enq_time=T0,
               payload=vals(**payload))
    return msg


@pytest.fixture
def make_cfg(tmp_path: Path) -> Callable[[str], PipelineConfig]:
    """Write a one-site pipeline whose ``applies:`` (and more) is ``body``, and open it."""

    def make(body: str) -> PipelineConfig:
        (tmp_path / "pipeline.yaml").write_text(BASE + textwrap.dedent(body))
        cfg = load_config(tmp_path / "pipeline.yaml")
        open_pipeline(cfg)
        return cfg

    return make


@pytest.fixture
def enqueue(spark: Any) -> Callable[[PipelineConfig, list[dict[str, Any]]], None]:
    """Commit messages as one batch of the apply queue."""
    from changeflow.queues import io as qio

    def put(cfg: PipelineConfig, messages: list[dict[str, Any]], queue: str = QUEUE) -> None:
        import pyarrow as pa
        from pyspark.sql import functions as F

        rt, q = queue_site(cfg, queue)
        # Through Arrow, so value maps keep the order the source listed the columns in
        # (as captured batches do); Python dicts through Spark's pickler become hash maps.
        table = pa.Table.from_pylist([{n: m[n] for n in lcr.FIELD_NAMES} for m in messages],
                                     schema=lcr.arrow_schema())
        df = spark.createDataFrame(table).select(
            *[F.col(f.name).cast(f.dataType) for f in lcr.spark_schema().fields])
        assert qio.enqueue(spark, rt.catalog, q, df, producer="test") is not None

    return put


def table_rows(spark: Any, cfg: PipelineConfig, table: str = "hr.emp",
               cols: list[str] | None = None) -> list[tuple]:
    """The current rows of an Iceberg target table (some columns), sorted."""
    from changeflow.apply.engine import targets_of
    from changeflow.targets.read import read_table

    df = read_table(spark, targets_of(cfg, cfg.applies[0]), table)
    if cols:
        df = df.select(*cols)
    return sorted(tuple(r) for r in df.collect())
