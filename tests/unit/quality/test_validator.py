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
    ids = spark.createDataFrame([(1,), (2,), (2,)], "msg_hash long")
    run = validator.validate(ids, "lcr_message_ids", blocking=lambda c: False)
    [uniq] = run.results
    assert not run.success and uniq.check == "unique_msg_id" and uniq.blocking is False
    assert run.gx_result["suite_name"] == "lcr_message_ids"


def test_sum_expectations_report_the_violation_count(spark) -> None:  # type: ignore[no-untyped-def]
    from changeflow.quality import facts

    cols = [f"{c}_violations" for c in facts.MESSAGE_CHECKS]
    flags = list(facts.TRANSACTION_CHECKS)
    schema = ", ".join([f"{c} long" for c in cols] + [f"{c} boolean" for c in flags])
    row1 = tuple([0] * len(cols) + [True] * len(flags))
    row2 = tuple([0, 0, 0, 2] + [0] * (len(cols) - 4) + [True, None, True, False, None])
    run = validator.validate(spark.createDataFrame([row1, row2], schema), "lcr_batch")
    by = {r.check: r for r in run.results}
    assert by["command_type_allowed"].success is False
    assert by["command_type_allowed"].unexpected_count == 2
    assert by["commit_order_in_batch"].success is False
    assert by["transaction_single_commit_time"].success is True  # NULL = not applicable
    assert by["required_fields"].success is True


def test_usage_statistics_are_off() -> None:
    ctx = validator.context()
    assert os.environ["GX_ANALYTICS_ENABLED"] == "false"
    assert ctx.get_config().analytics_enabled is False
