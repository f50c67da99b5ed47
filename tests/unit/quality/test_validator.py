"""GX 1.x runs on the pinned PySpark, with usage statistics off."""

from __future__ import annotations

import os

import pytest

from changeflow.quality import validator

pytestmark = pytest.mark.spark


def test_gx_validates_a_spark_dataframe_with_pinned_pyspark(spark) -> None:  # type: ignore[no-untyped-def]
    import great_expectations as gx
    import pyspark

    assert gx.__version__.startswith("1.") and pyspark.__version__.startswith("4.")
    from changeflow.quality.target import _SCHEMA

    rows = spark.createDataFrame([("hr.t", 3, 1, 2, 0, 0, 5, 1, 0, 6, 6),
                                  ("hr.u", 1, 0, 0, 0, 0, 2, 0, 0, 2, 3)], _SCHEMA)
    run = validator.validate(rows, "target_changes", blocking=lambda c: c != "target_key_unique")
    by = {r.check: r for r in run.results}
    assert not run.success
    assert by["target_key_not_null"].unexpected_count == 1 and by["target_key_not_null"].blocking
    assert by["target_key_unique"].unexpected_count == 2 and not by["target_key_unique"].blocking
    assert by["target_rows_reconcile"].success is False and by["target_rows_as_applied"].success
    assert run.gx_result["suite_name"] == "target_changes"


def test_sum_expectations_report_the_violation_count(spark) -> None:  # type: ignore[no-untyped-def]
    from changeflow.quality import facts

    cols = [f"{c}_violations" for c in facts.MESSAGE_CHECKS]
    flags = list(facts.TRANSACTION_CHECKS)
    extra = ["messages_with_id", "distinct_ids", "messages_read", "messages_accounted"]
    schema = ", ".join([f"{c} long" for c in cols] + [f"{c} boolean" for c in flags]
                       + [f"{c} long" for c in extra])
    row1 = tuple([0] * len(cols) + [True] * len(flags) + [5, 5, None, None])
    row2 = tuple([0, 0, 0, 2] + [0] * (len(cols) - 4) + [True, None, True, False, None]
                 + [5, 5, None, None])
    run = validator.validate(spark.createDataFrame([row1, row2], schema), "lcr_batch")
    by = {r.check: r for r in run.results}
    assert by["command_type_allowed"].success is False
    assert by["command_type_allowed"].unexpected_count == 2
    assert by["commit_order_in_batch"].success is False
    assert by["transaction_single_commit_time"].success is True  # NULL = not applicable
    assert by["required_fields"].success is True
    assert by["unique_msg_id"].success is True
    assert by["hop_reconciled"].success is True  # no counters: not applicable


def test_usage_statistics_are_off() -> None:
    ctx = validator.context()
    assert os.environ["GX_ANALYTICS_ENABLED"] == "false"
    assert ctx.get_config().analytics_enabled is False
