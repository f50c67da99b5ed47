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


def test_warm_up_imports_gx_and_builds_the_context_once_in_the_background() -> None:
    """In a fresh process: warm_up never waits for its thread (a second call while the
    thread holds the build lock returns too), starts one thread only, and the thread
    leaves GX imported and the pandas batch definition built, which the next validation
    reuses instead of building its own."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import sys, threading
        from changeflow.quality import validator as v
        assert "great_expectations" not in sys.modules
        # 1. a thread that holds the build lock until released: warm_up still returns
        release, real = threading.Event(), v._warm
        def held():
            with v._init_lock:
                release.wait(20)
        v._warm = held
        v.warm_up()
        v.warm_up()
        assert len(v._warming) == 1 and v._warming[0].is_alive(), v._warming
        release.set()
        v._warming[0].join(60)
        # 2. the real warm-up, on a thread
        v._warm = real
        v._warming.clear()
        v.warm_up()
        v._warming[0].join(120)
        assert not v._warming[0].is_alive()
        assert "great_expectations" in sys.modules
        built = v._pandas_batch_definition.cache_info()
        assert built.currsize == 1 and built.misses == 1, built
        before = v._pandas_batches()
        from changeflow.quality.target import _facts_frame
        run = v.validate(_facts_frame([{"table_name": "hr.t", "keys": 1,
            "key_not_null_violations": 0, "key_unique_violations": 0,
            "as_applied_violations": 0, "column_type_violations": 0, "rows_before": 1,
            "inserts": 0, "deletes": 0, "rows_after": 1, "expected_after": 2}]),
            "target_changes")
        assert not run.success and v._pandas_batches() is before
        assert [r.check for r in run.results if not r.success] == ["target_rows_reconcile"]
        assert v._context.cache_info().misses == 1
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "GX_ANALYTICS_ENABLED": "false"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-1] == "ok"
