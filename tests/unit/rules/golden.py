"""Loading the golden cases shared by the Python and Spark backend tests."""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path
from typing import Any

import yaml

from changeflow import lcr

FIXTURES = Path(__file__).parent / "fixtures"


def _value(spec: Any) -> dict[str, Any]:
    if isinstance(spec, dict):
        type_name, raw = spec["type"], spec.get("value")
        if raw is None:
            return lcr.encode_value(None, type_name)
        converters = {
            "NUMBER": decimal.Decimal,
            "DATE": dt.date.fromisoformat,
            "TIMESTAMP": dt.datetime.fromisoformat,
            "RAW": bytes.fromhex,
        }
        return lcr.encode_value(converters.get(type_name, lambda v: v)(raw), type_name)
    return lcr.encode_value(spec)


def message(spec: dict[str, Any]) -> dict[str, Any]:
    """A message dict (typed values) from a fixture's compact message."""
    out: dict[str, Any] = {}
    for key, value in spec.items():
        if key in ("old_values", "new_values", "payload"):
            out[key] = {k: _value(v) for k, v in value.items()}
        elif key == "tag":
            out[key] = bytes.fromhex(value)
        else:
            out[key] = value
    return out


def spark_row(msg: dict[str, Any], msg_id: str) -> dict[str, Any]:
    """A full LCR-contract row for a message dict."""
    row: dict[str, Any] = {name: None for name in lcr.FIELD_NAMES}
    row.update(schema_version=lcr.SCHEMA_VERSION, msg_id=msg_id, origin="CAPTURED")
    row.update(msg)
    return row


def golden_cases() -> list[dict[str, Any]]:
    """Every golden case: id, condition, message (typed), expected."""
    cases = yaml.safe_load((FIXTURES / "golden.yaml").read_text())
    return [{**c, "message": message(c["message"])} for c in cases]
