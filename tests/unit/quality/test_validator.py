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
    df = spark.createDataFrame(
        [(1, True, True, True, True, True, True, True),
         (2, True, True, True, False, None, None, None),
         (2, True, True, True, True, None, None, True)],
        "msg_hash long, required_fields boolean, kind_allowed boolean, origin_allowed boolean, "
        "command_type_allowed boolean, insert_no_old_values boolean, "
        "delete_no_new_values boolean, update_has_key boolean",
    )
    run = validator.validate(df, "lcr_messages", blocking=lambda c: c != "unique_msg_id")
    by = {r.check: r for r in run.results}
    assert not run.success
    assert by["command_type_allowed"].success is False
    assert by["command_type_allowed"].unexpected_count == 1
    assert by["unique_msg_id"].success is False and by["unique_msg_id"].blocking is False
    assert by["insert_no_old_values"].success is True  # NULL = not applicable
    assert run.gx_result["suite_name"] == "lcr_messages"


def test_usage_statistics_are_off() -> None:
    ctx = validator.context()
    assert os.environ["GX_ANALYTICS_ENABLED"] == "false"
    assert ctx.get_config().analytics_enabled is False
