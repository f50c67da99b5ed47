"""An export with schemas is what Kafka Connect's JsonConverter reads (issue 28).

The connector's own events (``tests/fixtures/debezium/pg-3.6.1``) are captured, the
queue is exported with schemas, and every exported line is converted by the real
JsonConverter (``JsonConverterCheck.java``, run with the ``kafka`` jars), as a sink
connector's worker converts a record.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from changeflow.debezium.capture import run_debezium_capture
from changeflow.debezium.export import export_queue
from changeflow.jvm import jars

pytestmark = pytest.mark.spark

HERE = Path(__file__).parent
FIXTURES = HERE.parents[1] / "fixtures" / "debezium" / "pg-3.6.1"


def json_converter(lines: list[str]) -> subprocess.CompletedProcess[str]:
    """Run the JsonConverter over the lines."""
    return subprocess.run(["java", "-cp", os.pathsep.join(jars("kafka")),
                           str(HERE / "JsonConverterCheck.java")], input="\n".join(lines),
                          capture_output=True, text=True, timeout=120, check=False)


def test_the_export_with_schemas_is_read_by_json_converter(spark: Any, tmp_path: Path,
                                                           dbz: Any) -> None:
    events = [x for x in (FIXTURES / "customers.jsonl").read_text().splitlines() if x != "null"]
    # the connector's own events are what JsonConverter writes: it reads them back
    assert json_converter(events).stdout.strip() == str(len(events))
    root = tmp_path / "topics"
    dbz.write_events(root / "shop.inventory.customers" / "f+0+0000000000.json", events)
    cfg = dbz.capture(tmp_path, root, [{"name": "inventory.customers", "key": ["id"]}])
    assert run_debezium_capture(spark, cfg, "dbz").messages == len(events)
    out = export_queue(spark, cfg, dbz.QUEUE, str(tmp_path / "out"), topic_prefix="back")
    [exported] = (tmp_path / "out" / "back.inventory.customers").iterdir()
    lines = exported.read_text().splitlines()
    assert len(lines) == out.events == len(events)
    done = json_converter(lines)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str(len(lines))
    # and an export naming the float type "float64", as before, is refused
    refused = json_converter([lines[0].replace('"type":"double"', '"type":"float64"')])
    assert refused.returncode == 1 and "float64" in refused.stderr
