#!/usr/bin/env bash
# The demo pipeline, end to end, through Airflow (run by `make demo` inside scripts/env.sh).
# 1. fresh HR source snapshots at DBS1.EXAMPLE.COM (initial load + rounds of changes);
# 2. `airflow dags test changeflow_demo__pipeline`: capture -> propagate -> apply -> verify,
#    every stage a spark-submit job launched by SparkSubmitOperator in local mode;
# 3. the verification: every target table equals the source's final snapshot.
set -euo pipefail
ROOT="${CHANGEFLOW_HOME:?run through scripts/env.sh}"
DEMO="$CHANGEFLOW_WORK/demo"
ROUNDS="${CHANGEFLOW_DEMO_ROUNDS:-3}"
LOG="$CHANGEFLOW_WORK/demo-dagrun.log"

rm -rf "$DEMO"
mkdir -p "$CHANGEFLOW_WORK"
cd "$ROOT"
changeflow demo generate --root "$DEMO/source" --rounds "$ROUNDS"
airflow db migrate >/dev/null 2>&1 || airflow db migrate
# The configured propagation schedules exist from the first run (page, CLI, DAGs).
changeflow schedules --config config/demo.yaml sync >/dev/null
echo "running DAG changeflow_demo__pipeline (log: $LOG) ..."
set +e
airflow dags test changeflow_demo__pipeline >"$LOG" 2>&1
rc=$?
set -e
grep -a -E "verification:|  OK |DIFFERS|^table| table +source" "$LOG" | sed -E 's/^.*\[info +\] //; s/ \[airflow\.task.*$//' || true
if [ $rc -ne 0 ] || ! grep -aq "DagRun Finished: dag_id=changeflow_demo__pipeline.*state=success" "$LOG" \
   || ! grep -aq "verification: PASSED" "$LOG"; then
  echo "demo FAILED: see $LOG" >&2
  grep -a -E "ERROR|error:" "$LOG" | tail -20 >&2 || true
  exit 1
fi
CHANGEFLOW_CONFIG=config/demo.yaml changeflow queues list
CHANGEFLOW_CONFIG=config/demo.yaml changeflow schedules
echo "data-quality checks (latest result per stage; Data Docs: work/data-docs/):"
CHANGEFLOW_CONFIG=config/demo.yaml changeflow quality latest
CHANGEFLOW_CONFIG=config/demo.yaml changeflow quality docs >/dev/null
# The Meta Change Queue (docs/mcq.md): triggers, pump, backfill and the import-table
# listener on a throwaway PostgreSQL cluster, then the XML listener as an Airflow DAG.
echo "Meta Change Queue (config/demo-mcq.yaml) ..."
changeflow mcq demo --config config/demo-mcq.yaml
MCQLOG="$CHANGEFLOW_WORK/demo-mcq-dagrun.log"
if ! airflow dags test changeflow_mcq__listener__FEED >"$MCQLOG" 2>&1 \
   || ! grep -aq "DagRun Finished: dag_id=changeflow_mcq__listener__FEED.*state=success" "$MCQLOG"; then
  echo "MCQ demo FAILED: see $MCQLOG" >&2
  exit 1
fi
echo "XML listener FEED (Airflow DAG): $(ls "$DEMO/mcq/feed" | wc -l) documents in work/demo/mcq/feed"
changeflow mcq status --config config/demo-mcq.yaml --by listener
echo "demo PASSED: every target table equals the source's final state"
