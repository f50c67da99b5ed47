#!/usr/bin/env bash
# The demo as a directed network of three sites (config/demo-3site.yaml, queue forwarding):
# run by `make demo-3site` inside scripts/env.sh. DBS1 snapshots are captured at site1,
# propagated to site2 (applied there) and forwarded to site3 (applied there); both
# sites' targets must equal the source's final state.
set -euo pipefail
ROOT="${CHANGEFLOW_HOME:?run through scripts/env.sh}"
DEMO="$CHANGEFLOW_WORK/demo3"
LOG="$CHANGEFLOW_WORK/demo3-dagrun.log"
export CHANGEFLOW_CONFIG="$ROOT/config/demo-3site.yaml" CHANGEFLOW_PIPELINE=demo3
rm -rf "$DEMO"
mkdir -p "$CHANGEFLOW_WORK"
cd "$ROOT"
changeflow demo generate --root "$DEMO/source" --rounds "${CHANGEFLOW_DEMO_ROUNDS:-3}"
airflow db migrate >/dev/null 2>&1 || airflow db migrate
echo "running DAG changeflow_demo3__pipeline (log: $LOG) ..."
set +e
airflow dags test changeflow_demo3__pipeline >"$LOG" 2>&1
rc=$?
set -e
grep -a -E "verification:|  OK |DIFFERS" "$LOG" | sed -E 's/^.*\[info +\] //; s/ \[airflow\.task.*$//' || true
if [ $rc -ne 0 ] || [ "$(grep -ac 'verification: PASSED' "$LOG")" -lt 2 ]; then
  echo "demo-3site FAILED: see $LOG" >&2
  exit 1
fi
changeflow views lag
echo "demo-3site PASSED: the targets at site2 and site3 equal the source's final state"
