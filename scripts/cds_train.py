"""Make the JVM class archives (CDS) changeflow's Spark JVMs start from.

A Spark JVM spends seconds of CPU loading and verifying the same classes every time it
starts; on a small machine that is a good part of a one-shot job (see
``changeflow.jvm.cds_options``). ``make setup`` runs this once, after the jars: for each
way changeflow starts a driver JVM (``session``: ``get_session`` in a Python process,
the CLI and the tests; ``submit``: spark-submit with the jars on the driver's class
path, as the DAGs' tasks run) it starts one with ``-XX:ArchiveClassesAtExit``, runs a
small apply pass of the product on a throw-away pipeline (so the archive holds the
classes a pass loads), and keeps the archive the JVM writes as it exits.

Usage: ``python scripts/cds_train.py`` (both kinds), or ``--workload`` (what the
training JVM runs; internal). An archive that cannot be made is reported and skipped:
the JVMs then start without it, as before.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "include")]


def workload() -> None:
    """A small apply pass of the product (the apply benchmark's, at a tiny size)."""
    from bench import apply_bench as ab

    from changeflow.spark import get_session

    spark = get_session("changeflow-cds-training")
    with tempfile.TemporaryDirectory(prefix="cf-cds-") as tmp:
        cfg, targets = ab.setup(spark, Path(tmp))
        ab.make_table(spark, targets, ab.TABLE, 20_000)
        ab.rewrite(spark, targets, ab.TABLE)
        apply = ab.Applier(spark, cfg, 20_000, 2_000)
        apply(1)
        apply(2)
    spark.stop()


def train(kind: str) -> bool:
    """Make one archive; whether it was made."""
    from changeflow.airflow.submit import DEFAULT_CONF, SparkJobSpec, operator_kwargs
    from changeflow.jvm import cds_archive, jars_root

    final = cds_archive(kind)
    final.parent.mkdir(parents=True, exist_ok=True)
    part = final.with_name(f"{final.name}.part")
    part.unlink(missing_ok=True)
    dump = f"-XX:ArchiveClassesAtExit={part} -Xlog:cds=off -Xlog:cds+dynamic=off"
    env = {**os.environ, "CHANGEFLOW_CDS": "off"}  # the training JVM starts without one
    me = [str(Path(__file__).resolve()), "--workload"]
    if kind == "session":
        env["CHANGEFLOW_JAVA_OPTIONS"] = dump
        cmd = [sys.executable, *me]
    else:  # what the DAG's operator passes (the class path must be the same), dumping
        kw = operator_kwargs(SparkJobSpec("apply", "cds", "-", "-",
                                          jars_dir=str(jars_root() / "spark")))
        conf = {**kw["conf"], "spark.driver.extraJavaOptions":
                f"{DEFAULT_CONF['spark.driver.extraJavaOptions']} {dump}"}
        submit = shutil.which("spark-submit", path=str(Path(sys.executable).parent)) \
            or "spark-submit"
        cmd = [submit, "--master", "local[2]", "--driver-memory", kw["driver_memory"],
               "--driver-class-path", kw["driver_class_path"],  # no --jars: local
               *[a for k, v in conf.items() for a in ("--conf", f"{k}={v}")], *me]
    started = time.monotonic()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900,
                         check=False)
    if out.returncode != 0 or not part.exists() or part.stat().st_size == 0:
        print(f"cds: the {kind} archive was not made (exit {out.returncode}); JVMs start "
              f"without it. {out.stderr[-1500:]}", file=sys.stderr)
        part.unlink(missing_ok=True)
        return False
    part.replace(final)
    print(f"cds: {final} ({final.stat().st_size // 2**20} MiB) in "
          f"{time.monotonic() - started:.0f} s")
    return True


if __name__ == "__main__":
    if sys.argv[1:] == ["--workload"]:
        workload()
    else:
        from changeflow.jvm import CDS_KINDS

        for k in sys.argv[1:] or CDS_KINDS:
            train(k)
        sys.exit(0)  # best effort: a JVM without an archive still works
