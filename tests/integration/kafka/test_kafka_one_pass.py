"""The Kafka capture reads its records once when each partition's first record
describes them all (:mod:`changeflow.debezium.onepass`), and surveys every record when
one does not: a range mixing a table's schema versions, or records of a table the
first records do not show, is captured as exactly as by the survey and the conversion.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from changeflow import lcr
from changeflow.debezium.kafka import run_kafka_capture, stored_offsets
from changeflow.sites import queue_site

from .conftest import customer_event, pipeline, queue_rows

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.slow]


def _with_column(line: str, name: str, value: Any) -> str:
    """The event with one more optional string column in its schema and images."""
    event = json.loads(line)
    for image in event["schema"]["fields"]:
        if image["field"] in ("before", "after"):
            image["fields"].append({"type": "string", "optional": True, "field": name})
    event["payload"]["after"][name] = value
    return json.dumps(event, separators=(",", ":"))


def _values(row: dict[str, Any]) -> dict[str, Any]:
    return {k: lcr.decode_value(v) for k, v in row["new_values"] or []}


def test_one_pass_when_the_first_records_describe_the_range(
        spark: Any, tmp_path: Path, stack: dict[str, Any]) -> None:
    broker = stack["broker"]
    broker.create_topic("one.pass")
    broker.produce("one.pass", [(None, "null")]  # a tombstone first: the next is read
                   + [(None, customer_event(id=i)) for i in (1, 2, 3)])
    cfg = pipeline(tmp_path, broker, ["one.pass"])
    result = run_kafka_capture(spark, cfg, "kcap")
    assert (result.passes, result.messages, result.records) == (1, 3, 4)
    assert result.skipped == {"tombstone": 1} and result.offsets == {"one.pass:0": 4}
    assert sorted(_values(r)["ID"] for r in queue_rows(cfg)) == [1, 2, 3]


def test_a_range_mixing_schema_versions_is_surveyed(
        spark: Any, tmp_path: Path, stack: dict[str, Any]) -> None:
    """A column added within the range: the first record's schema does not describe the
    later ones, the one pass's batch is dropped and the survey types both versions."""
    broker = stack["broker"]
    broker.create_topic("two.versions")
    old = [customer_event(id=i) for i in (1, 2)]
    new = [_with_column(customer_event(id=i), "email", f"c{i}@example.com") for i in (3, 4)]
    broker.produce("two.versions", [(None, x) for x in old + new])
    cfg = pipeline(tmp_path, broker, ["two.versions"])
    result = run_kafka_capture(spark, cfg, "kcap")
    assert result.passes == 3 and result.messages == 4 and result.events == 4
    rows = {_values(r)["ID"]: _values(r) for r in queue_rows(cfg)}
    assert "EMAIL" not in rows[1] and rows[4]["EMAIL"] == "c4@example.com"
    rt, _ = queue_site(cfg, "strm.q@s1")
    assert stored_offsets(rt, "kcap") == {("two.versions", 0): 4}
    assert len(queue_rows(cfg)) == 4  # the dropped one-pass batch was never committed
