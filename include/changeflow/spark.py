"""Building the SparkSession that jobs and tests share."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


# Whole-stage generated code for a large rule set can exceed 8,000 bytes of bytecode per
# method, which HotSpot otherwise never compiles: it would run in the interpreter.
JIT_OPTIONS = "-XX:-DontCompileHugeMethods"


def get_session(app_name: str = "changeflow", *, master: str | None = None) -> SparkSession:
    """Return the active SparkSession, or build one with changeflow's settings.

    Under ``spark-submit`` the master and resources come from the command line; the
    defaults here only fill what is unset (local mode with few shuffle partitions).

    Args:
        app_name: the application name shown in the Spark UI.
        master: the Spark master; ``None`` keeps what spark-submit set, else local.
    """
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master or not os.environ.get("SPARK_ENV_LOADED") and "spark.master" not in _conf():
        builder = builder.master(master or os.environ.get("CHANGEFLOW_SPARK_MASTER", "local[2]"))
    builder = (
        builder.config("spark.sql.session.timeZone", "UTC")
        .config(
            "spark.sql.shuffle.partitions", os.environ.get("CHANGEFLOW_SHUFFLE_PARTITIONS", "4")
        )
        .config("spark.ui.enabled", "false")
        .config("spark.sql.sources.partitionOverwriteMode", "dynamic")
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        .config("spark.driver.memory", os.environ.get("CHANGEFLOW_DRIVER_MEMORY", "4g"))
        # Row migration overlays old values with new ones with a plain map_concat, which
        # stays in generated code (see rules.migration.merged_values).
        .config("spark.sql.mapKeyDedupPolicy", "LAST_WIN")
    )
    if not _conf().get("spark.driver.extraJavaOptions"):
        builder = builder.config("spark.driver.extraJavaOptions", JIT_OPTIONS)
    return builder.getOrCreate()


def _conf() -> dict[str, str]:
    """Spark properties passed by spark-submit through the environment, if any."""
    from pyspark import SparkConf

    return dict(SparkConf().getAll())
