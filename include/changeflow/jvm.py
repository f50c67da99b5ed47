"""The JVM libraries changeflow's Spark jobs are started with.

``make setup`` copies them from Maven Central (pinned in ``jvm/<set>/pom.xml``) into
``jars/<set>/`` under the project directory, so nothing is downloaded when a job runs
and no ``~/.m2`` or Ivy cache is needed. Sets:

* ``spark``: every Spark job and session: the Apache Iceberg runtime (the apply's target
  tables) and the JDBC drivers of Iceberg's catalog in the state store;

``CHANGEFLOW_JARS`` overrides the folder that holds the sets (a cluster deployment that
ships the jars elsewhere).
"""

from __future__ import annotations

import os
from pathlib import Path

from changeflow.errors import ConfigError

#: Apache Iceberg's Spark SQL (MERGE INTO, CALL of its procedures, branches)
ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
#: the project directory (``include/changeflow/jvm.py`` -> the checkout's root)
PROJECT = Path(__file__).resolve().parents[2]


def jars_root() -> Path:
    """The folder holding the jar sets (``jars/`` of the project by default)."""
    override = os.environ.get("CHANGEFLOW_JARS")
    if override:
        return Path(override)
    home = os.environ.get("CHANGEFLOW_HOME")
    return (Path(home) if home else PROJECT) / "jars"


def jars(kind: str = "spark") -> list[str]:
    """The jars of one set, sorted (absolute paths).

    Raises:
        ConfigError: the set's folder is missing or empty (``make setup`` not run).
    """
    folder = jars_root() / kind
    found = sorted(str(p) for p in folder.glob("*.jar")) if folder.is_dir() else []
    if not found:
        raise ConfigError(
            f"the {kind} jars are missing from {folder}: run `make setup` (it copies them "
            f"from Maven Central, as pinned in jvm/{kind}/pom.xml), or set CHANGEFLOW_JARS")
    return found


def spark_jars_csv() -> str:
    """The Spark set as ``spark.jars`` / ``--jars`` takes it (comma-separated)."""
    return ",".join(jars("spark"))
