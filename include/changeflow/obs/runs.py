"""Recording every run of a capture, propagation or apply: rows, events, progress, lag.

:func:`recorded` wraps :func:`changeflow.runner.run_component`. For each run it

* inserts a ``cf_runs`` row (``running``) in the component's site store and writes a
  ``start`` event (:mod:`.logs`), then ``end`` (or ``error``) with the counts;
* reports progress while the run goes on: every ``CHANGEFLOW_PROGRESS_SECONDS``
  (default 10) a ``progress`` event and the row's ``progress`` column say how far the
  Spark stages are (tasks done of total) and what the run has committed so far;
* for an apply, measures end-to-end lag: the transactions pending before the run whose
  batches the run acknowledged were applied now, so their lag is now minus their
  source commit time; a histogram per source database goes to ``cf_lag_hist``;
* stores the rule statistics its client filter observed (:mod:`.rulestats`).

Recording never fails a run: a problem is logged and the run goes on.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select, update

from changeflow import logs
from changeflow.obs import lag
from changeflow.pipeline import Pipeline, resolve
from changeflow.rules import stats as rulestats
from changeflow.state import schema_obs, utcnow

if TYPE_CHECKING:
    from changeflow.config import PipelineConfig
    from changeflow.sites import SiteRuntime

log = logging.getLogger(__name__)
R = schema_obs.runs


def run_id() -> str:
    """This run's id: the Airflow DAG run and try when Airflow runs it, else a new one."""
    dag_run = os.environ.get("AIRFLOW_CTX_DAG_RUN_ID")
    if dag_run:
        return f"{dag_run}#{os.environ.get('AIRFLOW_CTX_TRY_NUMBER', '1')}"
    return uuid.uuid4().hex[:16]


def component_site(pipe: Pipeline, kind: str, name: str) -> tuple[SiteRuntime, str]:
    """The site whose store records a component's runs, and the queue it reads or fills."""
    spec = pipe.cfg.component(kind, name)
    q = pipe.queue(spec.source_queue if kind == "propagation" else spec.queue)
    return q.site, q.name


def _counts(result: Any) -> tuple[int | None, int | None]:
    messages = getattr(result, "messages", None)
    if messages is None:
        messages = getattr(result, "messages_propagated", None)
    batches = getattr(result, "batches", None)
    if batches is None:
        batches = getattr(result, "batches_read", None)
    return messages, batches


def _details(result: Any) -> str | None:
    if not dataclasses.is_dataclass(result):
        return None
    data = {k: v for k, v in dataclasses.asdict(result).items()  # type: ignore[arg-type]
            if not isinstance(v, list) or len(v) <= 20}
    return json.dumps(data, default=str)[:4000]


class Recorder:
    """One run being recorded (see the module docstring)."""

    def __init__(self, spark: Any, pipe: Pipeline, kind: str, name: str):
        self.spark, self.cfg, self.kind, self.name = spark, pipe.cfg, kind, name
        self.run_id = run_id()
        self.started = utcnow()
        self.t0 = time.monotonic()
        self.row_id: int | None = None
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.pending_txns: list[tuple[int, list[tuple[str, Any]]]] = []
        self.rt, self.queue = component_site(pipe, kind, name)
        self.fields = {"component": f"{kind}:{name}", "kind": kind, "name": name,
                       "run_id": self.run_id, "site": self.rt.name}

    def begin(self) -> None:
        with self.rt.store.begin() as c:
            key = c.execute(R.insert().values(
                run_id=self.run_id, kind=self.kind, name=self.name, started_at=self.started,
                status="running", process=f"{socket.gethostname()}:{os.getpid()}",
            )).inserted_primary_key
            assert key is not None
            self.row_id = int(key[0])
        logs.event("start", **self.fields, config=self.cfg.source_path)
        if self.kind == "apply":
            self.pending_txns = _pending_transactions(self)
        every = float(os.environ.get("CHANGEFLOW_PROGRESS_SECONDS", "10"))
        if every > 0:
            self.thread = threading.Thread(target=self._progress_loop, args=(every,),
                                           daemon=True, name=f"progress-{self.name}")
            self.thread.start()

    def progress(self) -> dict[str, Any]:
        """What the run has done so far: Spark tasks and committed batches."""
        out: dict[str, Any] = {"seconds": round(time.monotonic() - self.t0, 1)}
        try:
            tracker = self.spark.sparkContext.statusTracker() if self.spark is not None \
                else None
            stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()] \
                if tracker is not None else []
            stages = [s for s in stages if s is not None]
            if stages:
                out["tasks_done"] = sum(s.numCompletedTasks for s in stages)
                out["tasks_total"] = sum(s.numTasks for s in stages)
                out["stages"] = [s.name.split(" at ")[0] for s in stages][:3]
        except Exception:  # noqa: BLE001  (the session may be stopping)
            pass
        producer = {"capture": "capture", "propagation": "propagation"}.get(self.kind)
        if producer is not None:
            out.update(self._committed(f"{producer}:{self.name}"))
        return out

    def _committed(self, producer: str) -> dict[str, Any]:
        from changeflow.state import schema

        B = schema.queue_batches
        with self.rt.store.read() as c:
            n, msgs = c.execute(select(func.count(), func.coalesce(func.sum(B.c.n_messages), 0))
                                .where(B.c.producer == producer,
                                       B.c.created_at >= self.started)).one()
        return {"batches_committed": int(n), "messages_committed": int(msgs)}

    def _progress_loop(self, every: float) -> None:
        while not self.stop.wait(every):
            try:
                state = self.progress()
                logs.event("progress", **self.fields, **state)
                with self.rt.store.begin() as c:
                    c.execute(update(R).where(R.c.id == self.row_id).values(
                        progress=json.dumps(state)))
            except Exception as exc:  # noqa: BLE001
                log.debug("progress of %s %s: %s", self.kind, self.name, exc)

    def finish(self, result: Any = None, error: BaseException | None = None) -> None:
        self.stop.set()
        seconds = time.monotonic() - self.t0
        messages, batches = _counts(result)
        status = "failed" if error is not None or getattr(result, "ok", True) is False \
            else "succeeded"
        text = f"{type(error).__name__}: {error}"[:4000] if error is not None else None
        with self.rt.store.begin() as c:
            c.execute(update(R).where(R.c.id == self.row_id).values(
                ended_at=utcnow(), status=status, messages=messages, batches=batches,
                seconds=seconds, error=text, details=_details(result)))
        logs.event("error" if error is not None else "end", **self.fields, status=status,
                   messages=messages, batches=batches, seconds=round(seconds, 3), error=text)
        if error is None and self.kind == "apply":
            _record_lag(self)
        _record_rule_stats(self)


def _pending_transactions(rec: Recorder) -> list[tuple[int, list[tuple[str, Any]]]]:
    """Per pending batch of the apply: its (source database, min commit time) per txn."""
    from changeflow.sites import consumer_name

    try:
        batches = rec.rt.catalog.pending(rec.queue, consumer_name("apply", rec.name),
                                         max_batches=2000)
    except Exception:  # noqa: BLE001  (a first run: the consumer is not registered yet)
        return []
    out = []
    for b in batches:
        txns = _batch_transactions(rec.spark, b.path)
        if txns:
            out.append((b.seq, txns))
    return out


def _batch_transactions(spark: Any, path: str) -> list[tuple[str, Any]]:
    """``(source database, commit time)`` of each transaction in a batch."""
    cols = ["source_database_name", "transaction_id", "commit_scn", "commit_time"]
    if "://" not in path or path.startswith("file:"):
        import pyarrow.dataset as ds

        local = path.removeprefix("file:")
        table = ds.dataset(local, format="parquet").to_table(columns=cols)
        grouped = table.group_by(cols[:3]).aggregate([("commit_time", "min")])
        return [(r["source_database_name"], r["commit_time_min"])
                for r in grouped.to_pylist() if r["commit_time_min"] is not None]
    if spark is None:
        return []
    from pyspark.sql import functions as F

    rows = spark.read.parquet(path).groupBy(*cols[:3]).agg(F.min("commit_time").alias("t"))
    return [(r.source_database_name, r.t) for r in rows.collect() if r.t is not None]


def _record_lag(rec: Recorder) -> None:
    from changeflow.sites import consumer_name

    if not rec.pending_txns:
        return
    position = rec.rt.catalog.position(rec.queue, consumer_name("apply", rec.name))
    now = utcnow()
    per_db: dict[str, list[float]] = {}
    for seq, txns in rec.pending_txns:
        if seq > position:
            continue
        for db, t in txns:
            if t is not None and t.tzinfo is None:
                t = t.replace(tzinfo=now.tzinfo)
            per_db.setdefault(db or "?", []).append(max(0.0, (now - t).total_seconds()))
    newest = max((t for seq, txns in rec.pending_txns if seq <= position for _, t in txns
                  if t is not None), default=None)
    if newest is not None:
        with rec.rt.store.begin() as c:
            c.execute(update(R).where(R.c.id == rec.row_id).values(
                progress=json.dumps({"last_applied_commit_time": newest.isoformat()})))
    rows = [{"apply": rec.name, "source_database": db, "recorded_at": now, "run_id": rec.run_id,
             "n": len(lags), "max_seconds": max(lags),
             "bins": json.dumps(lag.histogram(lags))} for db, lags in per_db.items() if lags]
    if rows:
        with rec.rt.store.begin() as c:
            c.execute(schema_obs.lag_hist.insert(), rows)


def _record_rule_stats(rec: Recorder) -> None:
    stats = rulestats.collect(rec.kind, rec.name, rec.run_id)
    if stats is None:
        return
    S = schema_obs.rule_stats
    now = utcnow()
    with rec.rt.store.begin() as c:
        c.execute(S.delete().where(S.c.client == rec.name, S.c.kind == rec.kind))
        for s in stats:
            c.execute(S.insert().values(
                client=rec.name, kind=rec.kind, rule_set=s["rule_set"] or "-",
                rule=s["rule"] or "-", polarity=s["polarity"] or "-",
                evaluated=s["evaluated"], matched=s["matched"] if s["matched"] is not None
                else -1, run_id=rec.run_id, recorded_at=now))


def _safely(what: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001  (recording must never fail the run)
        log.warning("could not record %s: %s", what, exc)
        return None


def recorded(run: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate ``run_component(spark, cfg, kind, name, ...)`` to record its runs.

    ``cfg`` (a configuration or a resolved pipeline) is resolved once, here: the run
    gets the same :class:`~changeflow.pipeline.Pipeline` the recorder uses.
    """

    @functools.wraps(run)
    def wrapper(spark: Any, cfg: PipelineConfig | Pipeline, kind: str, name: str,
                *args: Any, **kwargs: Any) -> Any:
        pipe = resolve(cfg)
        if kind not in ("capture", "propagation", "apply"):
            return run(spark, pipe, kind, name, *args, **kwargs)
        logs.use_json_logs()
        rec = _safely("the run's start", lambda: Recorder(spark, pipe, kind, name))
        if rec is not None and _safely("the run's start", rec.begin) is None and \
                rec.row_id is None:
            rec = None
        with logs.context(**(rec.fields if rec is not None else {})):
            try:
                result = run(spark, pipe, kind, name, *args, **kwargs)
            except BaseException as exc:
                if rec is not None:
                    failure = exc
                    _safely("the run's end", lambda: rec.finish(error=failure))
                raise
            if rec is not None:
                _safely("the run's end", lambda: rec.finish(result=result))
        return result

    return wrapper
