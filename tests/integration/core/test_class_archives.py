"""Driver JVMs start from the class archives ``make setup`` made (scripts/cds_train.py).

Each test starts a real driver JVM the way changeflow does (``get_session`` in a fresh
Python process; spark-submit with the argv the DAG's operator builds) with the JVM's
class-load log on, and reads where Spark's classes came from: the archive's classes are
logged as ``source: shared objects file (top)``. With ``CHANGEFLOW_CDS=off`` (or no
archive) they come from the jars: that is what the tests compare against.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

from changeflow.jvm import cds_archive, jars_root

pytestmark = [pytest.mark.slow]

SPARK_CLASS = "org.apache.spark.sql.SparkSession "
APP = """
import sys
sys.path.insert(0, {include!r})
from changeflow.spark import get_session
s = get_session("cds-test")
assert s.range(5).count() == 5
{check}
s.stop()
"""
#: on a local master the jars are on the driver's class path, Iceberg's among them, and
#: none is copied into the application's temporary folder (687 MB a JVM, left behind by
#: a JVM that does not end cleanly)
CLASS_PATH_JARS = """
import os
from pyspark import SparkFiles
assert s.sparkContext.getConf().get("spark.jars", "") == ""
loader = s.sparkContext._jvm.java.lang.ClassLoader.getSystemClassLoader()
assert loader.loadClass("org.apache.iceberg.spark.SparkCatalog").getName()
assert s.sql("SELECT 1 AS a").repartition(2).count() == 1  # tasks ran in the executor
copied = os.listdir(SparkFiles.getRootDirectory())
assert copied == [], copied[:3]
"""

#: the driver collects with the parallel collector (changeflow.jvm.DRIVER_GC), not G1
PARALLEL_GC = """
beans = s.sparkContext._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
names = [b.getName() for b in beans]
assert sorted(names) == ["PS MarkSweep", "PS Scavenge"], names
"""
#: its JIT's optimising compiler starts later (changeflow.jvm.DRIVER_JIT): the flags the
#: running JVM reports, not the options it was given
LATE_C2 = """
mf = s.sparkContext._jvm.java.lang.management.ManagementFactory
hs = mf.getPlatformMXBean(s.sparkContext._jvm.java.lang.Class.forName(
    "com.sun.management.HotSpotDiagnosticMXBean"))
got = {f: hs.getVMOption(f).getValue() for f in ("Tier4InvocationThreshold",
       "Tier4MinInvocationThreshold", "Tier4CompileThreshold", "Tier4BackEdgeThreshold")}
assert got == {"Tier4InvocationThreshold": "15000", "Tier4MinInvocationThreshold": "1800",
               "Tier4CompileThreshold": "45000", "Tier4BackEdgeThreshold": "120000"}, got
"""

#: a job's cached frames are not compressed (changeflow.spark): 100,000 equal strings
#: take some 500 kB as cached, not the few kB of a run-length encoding
UNCOMPRESSED_CACHE = """
df = s.range(100000).selectExpr("'x' AS c").persist()
assert df.count() == 100000
sizes = [i.memSize() for i in s.sparkContext._jsc.sc().getRDDStorageInfo()]
assert len(sizes) == 1 and sizes[0] > 400000, sizes
"""

#: the session has every setting of changeflow.jvm.SESSION_CONF, and the shuffle
#: partitions it was given: under spark-submit, the job's own (its ``--conf``) over
#: ``CHANGEFLOW_SHUFFLE_PARTITIONS``, which is for a session get_session starts
SETTINGS = """
from changeflow.jvm import SESSION_CONF
got = {{k: s.conf.get(k) for k in SESSION_CONF}}
assert got == SESSION_CONF, got
assert s.conf.get("spark.sql.shuffle.partitions") == {partitions!r}, \\
    s.conf.get("spark.sql.shuffle.partitions")
"""


def _failure(out: subprocess.CompletedProcess[str]) -> str:
    """The app's Python traceback if there is one (spark-submit prints it on stdout,
    and Spark's log follows it on stderr), else the end of stderr."""
    both = out.stdout + out.stderr
    at = both.find("Traceback (most recent call last)")
    return both[at:at + 3000] if at >= 0 else out.stderr[-2000:]


def _source(log: Path, cls: str = SPARK_CLASS) -> str:
    """Where the JVM loaded ``cls`` from (its class-load log line's ``source:``)."""
    for line in log.read_text().splitlines():
        if cls in line:
            return line.split("source:", 1)[1].strip()
    raise AssertionError(f"{cls.strip()} was never loaded (log {log})")


def _app(tmp_path: Path, check: str = "") -> Path:
    include = str(Path(__file__).resolve().parents[3] / "include")
    app = tmp_path / "app.py"
    app.write_text(APP.format(include=include, check=check))
    return app


@pytest.mark.parametrize("cds", ["on", "off"])
def test_a_session_jvm_starts_from_its_archive(tmp_path: Path, cds: str) -> None:
    assert cds_archive("session").is_file(), "make setup makes jars/cds/session.jsa"
    log = tmp_path / "load.log"
    env = {**os.environ, "CHANGEFLOW_JAVA_OPTIONS": f"-Xlog:class+load=info:file={log}",
           "CHANGEFLOW_CDS": cds, "CHANGEFLOW_DRIVER_MEMORY": "1g",
           "CHANGEFLOW_SHUFFLE_PARTITIONS": "5"}
    app = _app(tmp_path, CLASS_PATH_JARS + PARALLEL_GC + LATE_C2 + UNCOMPRESSED_CACHE
               + SETTINGS.format(partitions="5"))
    out = subprocess.run([sys.executable, str(app)], env=env, timeout=300,
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, _failure(out)
    source = _source(log)
    if cds == "on":
        assert source == "shared objects file (top)"
    else:
        assert "shared objects file" not in source


@pytest.mark.airflow
def test_a_submitted_job_starts_from_its_archive(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The spark-submit argv the DAG's operator builds (through the provider's hook), for
    a pipeline whose ``spark`` map sets the shuffle partitions: the job keeps them."""
    from changeflow.airflow.operators import ChangeflowSparkSubmitOperator
    from changeflow.airflow.submit import SparkJobSpec, operator_kwargs

    assert cds_archive("submit").is_file(), "make setup makes jars/cds/submit.jsa"
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT",
                       json.dumps({"conn_type": "spark", "host": "local[2]"}))
    kw = operator_kwargs(SparkJobSpec("apply", "a1", "/c.yaml", "/jobs",
                                      jars_dir=str(jars_root() / "spark"),
                                      conf={"spark.sql.shuffle.partitions": "7"}))
    log = tmp_path / "load.log"
    kw["conf"]["spark.driver.extraJavaOptions"] += f" -Xlog:class+load=info:file={log}"
    kw.pop("application_args")  # the test's app takes none
    with mock.patch("subprocess.Popen"):
        argv = ChangeflowSparkSubmitOperator(task_id="t", **kw)._get_hook() \
            ._build_spark_submit_command(str(_app(tmp_path, CLASS_PATH_JARS + PARALLEL_GC
                                                     + LATE_C2
                                                     + UNCOMPRESSED_CACHE
                                                     + SETTINGS.format(partitions="7"))))
    assert "--jars" not in argv  # a local master: the driver's class path has them
    submit = Path(sys.executable).parent / "spark-submit"
    argv[0] = str(submit) if submit.exists() else argv[0]
    out = subprocess.run(argv, timeout=300, capture_output=True, text=True, check=False,
                         env={**os.environ, "CHANGEFLOW_SHUFFLE_PARTITIONS": "5"})
    assert out.returncode == 0, _failure(out)
    assert _source(log) == "shared objects file (top)"
    # Iceberg's classes come from the driver's class path: the archive holds them too.
    assert _source(log, "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions ") \
        == "shared objects file (top)"
