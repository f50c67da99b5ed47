"""The spark-submit command a job becomes: exact argv equality, nothing executed."""

from __future__ import annotations

import json
from unittest import mock

import pytest

from changeflow.airflow.submit import SparkJobSpec, operator_kwargs

#: the driver's JIT options (changeflow.jvm.DRIVER_JIT), spelled out
TIER4 = ("-XX:Tier4InvocationThreshold=15000 -XX:Tier4MinInvocationThreshold=1800 "
         "-XX:Tier4CompileThreshold=45000 -XX:Tier4BackEdgeThreshold=120000")


def test_operator_kwargs() -> None:
    spec = SparkJobSpec("propagation", "p1", "/repo/config/demo.yaml", "/repo/jobs",
                        conf={"spark.executor.memory": "1g"})
    assert operator_kwargs(spec) == {
        "application": "/repo/jobs/propagation.py",
        "application_args": ["--config", "/repo/config/demo.yaml", "--name", "p1"],
        "conn_id": "spark_default",
        "name": "changeflow-propagation-p1",
        "conf": {
            "spark.sql.shuffle.partitions": "4",
            "spark.driver.extraJavaOptions": "-XX:-DontCompileHugeMethods -XX:+UseParallelGC "
                                             + TIER4,
            "spark.executor.extraJavaOptions": "-XX:-DontCompileHugeMethods",
            "spark.sql.session.timeZone": "UTC",
            "spark.ui.enabled": "false",
            "spark.sql.sources.partitionOverwriteMode": "dynamic",
            "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
            "spark.sql.mapKeyDedupPolicy": "LAST_WIN",
            "spark.python.sql.dataFrameDebugging.enabled": "false",
            "spark.sql.extensions":
                "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
            "spark.sql.constraintPropagation.enabled": "false",
            "spark.sql.inMemoryColumnarStorage.compressed": "false",
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
        "--conf", "spark.sql.shuffle.partitions=4",
        "--conf", "spark.driver.extraJavaOptions=-XX:-DontCompileHugeMethods "
                  f"-XX:+UseParallelGC {TIER4} -XX:SharedArchiveFile=/repo/jars/cds/submit.jsa "
                  "-Xshare:auto "
                  "-Xlog:cds=off -Xlog:cds+dynamic=off",
        "--conf", "spark.executor.extraJavaOptions=-XX:-DontCompileHugeMethods",
        "--conf", "spark.sql.session.timeZone=UTC",
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.sql.sources.partitionOverwriteMode=dynamic",
        "--conf", "spark.sql.parquet.outputTimestampType=TIMESTAMP_MICROS",
        "--conf", "spark.sql.mapKeyDedupPolicy=LAST_WIN",
        "--conf", "spark.python.sql.dataFrameDebugging.enabled=false",
        "--conf", "spark.sql.extensions="
                  "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        "--conf", "spark.sql.constraintPropagation.enabled=false",
        "--conf", "spark.sql.inMemoryColumnarStorage.compressed=false",
        "--driver-class-path", "/repo/jars/spark/*",
        "--jars", "/repo/jars/spark/*.jar",
        "--driver-memory", "2g", "--name", "changeflow-apply-a1",
        "/repo/jobs/apply.py", "--config", "/c.yaml", "--name", "a1",
    ]


@pytest.mark.airflow
@pytest.mark.parametrize("master", ["local[2]", "spark://127.0.0.1:7077"])
def test_the_operator_passes_no_jars_to_copy_on_a_local_master(
        master: str, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """On a local master the jars are on the driver's class path only: no ``--jars``,
    which the executor would copy into the job's temporary folder (687 MB); a cluster's
    executors get them served."""
    from changeflow.airflow.operators import ChangeflowSparkSubmitOperator

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT",
                       json.dumps({"conn_type": "spark", "host": master}))
    folder = tmp_path / "spark"
    folder.mkdir()
    for name in ("b.jar", "a.jar", "notes.txt"):
        (folder / name).write_text("x")
    kw = operator_kwargs(SparkJobSpec("apply", "a1", "/c.yaml", "/repo/jobs",
                                      jars_dir=str(folder)))
    op = ChangeflowSparkSubmitOperator(task_id="t", **kw)
    with mock.patch("subprocess.Popen") as popen:
        argv = op._get_hook()._build_spark_submit_command(kw["application"])
    popen.assert_not_called()
    if master.startswith("local"):
        assert "--jars" not in argv
    else:
        assert argv[argv.index("--jars") + 1] == f"{folder}/*.jar"
    assert argv[argv.index("--driver-class-path") + 1] == f"{folder}/*"
