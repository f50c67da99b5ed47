# changeflow: the two commands of the README are `make demo` and `make test`.
SHELL := /bin/bash
ROOT := $(abspath .)
VENV := $(ROOT)/.venv
PY := $(VENV)/bin/python
ENV := $(ROOT)/scripts/env.sh
STAMP := $(VENV)/.installed
PYTHON ?= python3

.PHONY: setup demo test test-long test-fast bench bench-report chaos airflow lint typecheck render clean system-deps \
	cluster airflow-prod demo-3site clean-jars

## setup: system packages, the virtualenv with pinned requirements, the package itself,
## the JVM jars (jvm/*/pom.xml) copied from Maven Central into jars/ (git-ignored), and
## the drivers' class archives (jars/cds/, scripts/cds_train.py: faster JVM starts)
JAR_SETS := spark kafka s3proxy
JAR_STAMPS := $(foreach s,$(JAR_SETS),$(ROOT)/jars/$(s)/.fetched)
CDS_STAMP := $(ROOT)/jars/cds/.trained
setup: $(STAMP) $(JAR_STAMPS) $(CDS_STAMP)

# Best effort: a JVM whose archive is missing or stale starts without it. The archive
# fits one class path: made again when the code that builds it changes.
$(CDS_STAMP): $(STAMP) $(ROOT)/jars/spark/.fetched scripts/cds_train.py \
		include/changeflow/jvm.py include/changeflow/spark.py
	$(ENV) $(PY) scripts/cds_train.py
	mkdir -p $(dir $@) && touch $@

# Jars already there are kept (a running JVM reads its jars again: replacing them under it
# breaks it); jars the pom no longer lists are removed afterwards.
$(ROOT)/jars/%/.fetched: jvm/%/pom.xml
	mvn -q -B -f jvm/$*/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
		-DoutputDirectory=$(ROOT)/jars/$*
	mvn -q -B -f jvm/$*/pom.xml dependency:list -DincludeScope=runtime \
		-DoutputAbsoluteArtifactFilename=true -DoutputFile=$(ROOT)/jars/$*/.list
	cd $(ROOT)/jars/$* && for f in *.jar; do \
		grep -q "/$$f$$" .list || grep -q "/$$f " .list || rm -f "$$f"; done
	touch $@

$(STAMP): requirements.txt pyproject.toml scripts/system-deps.sh
	bash scripts/system-deps.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	# pyspark-client shares files with pyspark: reinstall full pyspark last (same version).
	$(PY) -m pip install --quiet --no-deps --force-reinstall "pyspark==$$(grep -E '^pyspark==' requirements.txt | cut -d= -f3)"
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

## demo: generate HR data and run the demo pipeline end to end through Airflow
demo: setup
	$(ENV) bash scripts/demo.sh

## test: the test suite (CI), in TEST_WORKERS processes (a test file stays in one; most
## tests wait on subprocesses, servers and schedulers); the three long runs are in test-long
TEST_WORKERS ?= 2
test: setup
	$(ENV) $(PY) -m pytest -q tests -m "not long" -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=40

## test-long: the README/docs examples after a full demo, the demo DAG on a Spark cluster, pgbench
test-long: setup
	$(ENV) $(PY) -m pytest -q tests -m long --durations=20

test-fast: setup
	$(ENV) $(PY) -m pytest -q tests -m "not slow and not airflow and not postgres"

## cluster: the demo DAG on a Spark standalone cluster (master + 2 workers), both sites'
## staging roots and targets on an S3-compatible server (S3Proxy), state on PostgreSQL
cluster: setup
	$(ENV) $(PY) -m changeflow.testing.cluster_demo --s3

## airflow-prod: Airflow with the LocalExecutor on a PostgreSQL metadata database, three
## propagations with overlapping windows and an apply at once, one destination cut off
airflow-prod: setup
	$(ENV) $(PY) -m changeflow.testing.airflow_prod

## demo-3site: the demo as a directed network of three sites (config/demo-3site.yaml)
demo-3site: setup
	$(ENV) bash scripts/demo-3site.sh

## serve: the IDAP SOAP service (Advanced Queuing over HTTP) on embedded defaults, 127.0.0.1:8042
.PHONY: serve
serve: setup
	$(ENV) $(VENV)/bin/changeflow serve $(SERVE_ARGS)

## bench: benchmarks; results in bench-results.json, full-size runs archived in docs/results/;
## exits 1 when a target is missed (BENCH_ARGS="--no-fail" to explore, "--size small" to be quick)
bench: setup
	$(ENV) $(PY) -m bench $(BENCH_ARGS)

## bench-report: the README's and docs/benchmarks.md's tables and docs/bench-scaling.png,
## from the newest archived results (runs no benchmark)
bench-report: setup
	$(ENV) $(PY) -m bench.report --write-readme --write-docs --plot

## chaos: the long chaos suite (50+ kills, concurrent runs, outages, pgbench, Spark workers
## lost mid-stage on a cluster over an object store); chaos-results.json
CHAOS_ARGS ?= --cluster-kills 2
chaos: setup
	$(ENV) $(PY) -m changeflow.testing.chaos --postgres $(CHAOS_ARGS)

## kafka: a Kafka broker (KRaft) and Kafka Connect with Debezium's PostgreSQL connector on
## free loopback ports, until Ctrl-C (docs/debezium.md#a-real-kafka)
.PHONY: kafka
kafka: setup
	$(ENV) $(PY) -m changeflow.testing.kafka

## airflow: Airflow standalone (scheduler, API server, UI on localhost:8080)
airflow: setup
	$(ENV) bash scripts/airflow.sh

## render: regenerate the demo DAG file from config/demo.yaml
render: setup
	$(ENV) changeflow dags render --config config/demo.yaml --pipeline demo --verify apply_dbs2

lint: setup
	$(VENV)/bin/ruff check include tests dags jobs plugins bench
	$(VENV)/bin/lint-imports --no-cache --no-logo  # the floors (docs/architecture.md#floors)

typecheck: setup
	$(VENV)/bin/mypy include/changeflow

clean:
	rm -rf work bench-results.json

## clean-jars: forget the fetched jars (the next setup copies them again)
clean-jars:
	rm -rf jars
