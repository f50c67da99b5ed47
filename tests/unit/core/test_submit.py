"""The spark-submit command a job becomes: exact argv equality, nothing executed."""

from __future__ import annotations

import json
from unittest import mock

import pytest

from changeflow.airflow.submit import SparkJobSpec, operator_kwargs


def test_operator_kwargs() -> None:
    spec = SparkJobSpec("propagation", "p1", "/repo/config/demo.yaml", "/repo/jobs",
                        conf={"spark.executor.memory": "1g"})
    assert operator_kwargs(spec) == {
        "application": "/repo/jobs/propagation.py",
        "application_args": ["--config", "/repo/config/demo.yaml", "--name", "p1"],
        "conn_id": "spark_default",
        "name": "changeflow-propagation-p1",
        "conf": {
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.shuffle.partitions": "4",
            "spark.ui.enabled": "false",
            "spark.driver.extraJavaOptions": "-XX:-DontCompileHugeMethods",
            "spark.executor.extraJavaOptions": "-XX:-DontCompileHugeMethods",
            "spark.sql.mapKeyDedupPolicy": "LAST_WIN",
            "spark.python.sql.dataFrameDebugging.enabled": "false",
            "spark.sql.extensions":
                "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
            "spark.executor.memory": "1g",
        },
        "driver_memory": "2g",
        "verbose": False,
    }


@pytest.mark.airflow
def test_hook_builds_the_exact_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT",
                       json.dumps({"conn_type": "spark", "host": "local[2]"}))
    kw = operator_kwargs(SparkJobSpec("apply", "a1", "/c.yaml", "/repo/jobs",
                                      jars_dir="/repo/jars/spark"))
    app = kw.pop("application")
    args = kw.pop("application_args")
    with mock.patch("subprocess.Popen") as popen:
        hook = SparkSubmitHook(application_args=args, **kw)
        argv = hook._build_spark_submit_command(app)
    popen.assert_not_called()
    assert argv == [
        "spark-submit", "--master", "local[2]",
        "--conf", "spark.sql.session.timeZone=UTC",
        "--conf", "spark.sql.shuffle.partitions=4",
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.driver.extraJavaOptions=-XX:-DontCompileHugeMethods "
                  "-XX:SharedArchiveFile=/repo/jars/cds/submit.jsa -Xshare:auto "
                  "-Xlog:cds=off -Xlog:cds+dynamic=off",
        "--conf", "spark.executor.extraJavaOptions=-XX:-DontCompileHugeMethods",
        "--conf", "spark.sql.mapKeyDedupPolicy=LAST_WIN",
        "--conf", "spark.python.sql.dataFrameDebugging.enabled=false",
        "--conf", "spark.sql.extensions="
                  "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        "--driver-class-path", "/repo/jars/spark/*",
        "--jars", "/repo/jars/spark/*.jar",
        "--driver-memory", "2g", "--name", "changeflow-apply-a1",
        "/repo/jobs/apply.py", "--config", "/c.yaml", "--name", "a1",
    ]
