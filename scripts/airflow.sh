#!/usr/bin/env bash
# Airflow standalone (scheduler, DAG processor, API server and UI on localhost:8080) with
# changeflow's DAGs, on the embedded database under work/airflow. Run by `make airflow`.
set -euo pipefail
: "${AIRFLOW_HOME:?run through scripts/env.sh}"
export AIRFLOW__API__PORT="${AIRFLOW__API__PORT:-8080}"
# Simple auth manager: users and roles from here; passwords are generated into
# $AIRFLOW_HOME/simple_auth_manager_passwords.json.generated on first start.
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS:-admin:admin}"
airflow db migrate >/dev/null
# The configured schedules exist from the first start (the page and the CLI show them).
changeflow schedules --config "$CHANGEFLOW_CONFIG" sync >/dev/null
echo "Airflow UI: http://localhost:${AIRFLOW__API__PORT}  (user admin; password in"
echo "  $AIRFLOW_HOME/simple_auth_manager_passwords.json.generated)"
exec airflow standalone
