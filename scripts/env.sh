#!/usr/bin/env bash
# Run a command in changeflow's embedded environment: the project venv on PATH and
# Airflow configured on an embedded SQLite database under work/airflow.
# Usage: scripts/env.sh COMMAND [ARGS...]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CHANGEFLOW_HOME="$ROOT"
export CHANGEFLOW_WORK="${CHANGEFLOW_WORK:-$ROOT/work}"
# The pipeline the CLI and the Airflow UI page show by default.
export CHANGEFLOW_CONFIG="${CHANGEFLOW_CONFIG:-$ROOT/config/demo.yaml}"
export PATH="$ROOT/.venv/bin:$PATH"
export AIRFLOW_HOME="${AIRFLOW_HOME:-$CHANGEFLOW_WORK/airflow}"
export AIRFLOW__CORE__DAGS_FOLDER="${AIRFLOW__CORE__DAGS_FOLDER:-$ROOT/dags}"
export AIRFLOW__CORE__PLUGINS_FOLDER="${AIRFLOW__CORE__PLUGINS_FOLDER:-$ROOT/plugins}"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="${AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION:-True}"
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="${AIRFLOW__DATABASE__SQL_ALCHEMY_CONN:-sqlite:///$AIRFLOW_HOME/airflow.db}"
export AIRFLOW__LOGGING__BASE_LOG_FOLDER="${AIRFLOW__LOGGING__BASE_LOG_FOLDER:-$AIRFLOW_HOME/logs}"
# The embedded Spark master; point it at a cluster by defining the connection yourself.
# (The JSON default is a separate variable: a "}" inside ${VAR:-...} would end the
# expansion there and append a stray "}" to a connection the caller set.)
LOCAL_SPARK_CONN='{"conn_type": "spark", "host": "local[2]"}'
export AIRFLOW_CONN_SPARK_DEFAULT="${AIRFLOW_CONN_SPARK_DEFAULT:-$LOCAL_SPARK_CONN}"
export GX_ANALYTICS_ENABLED=False
export PYSPARK_PYTHON="${PYSPARK_PYTHON:-$ROOT/.venv/bin/python}"
export PYSPARK_DRIVER_PYTHON="${PYSPARK_DRIVER_PYTHON:-$ROOT/.venv/bin/python}"
mkdir -p "$AIRFLOW_HOME"
exec "$@"
