#!/usr/bin/env bash
# System packages changeflow's tests and demo need: Java for Spark, PostgreSQL 15 with
# wal2json for the log-capture tests, the PostgreSQL JDBC driver, and Chromium for the
# browser tests of the Airflow page.
# Installs only what is missing; needs root (or sudo) when something is.
set -euo pipefail
need=()
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
[ -x /usr/lib/postgresql/15/bin/initdb ] || need+=(postgresql-15)
[ -f /usr/lib/postgresql/15/lib/wal2json.so ] || need+=(postgresql-15-wal2json)
[ -f /usr/share/java/postgresql.jar ] || need+=(libpostgresql-jdbc-java)
# Headless Chromium for the browser tests of the Airflow page (Playwright drives it).
[ -x /usr/bin/chromium ] || need+=(chromium)
command -v pgbench >/dev/null 2>&1 || [ -x /usr/lib/postgresql/15/bin/pgbench ] || need+=(postgresql-contrib)
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
echo "installing system packages: ${need[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
