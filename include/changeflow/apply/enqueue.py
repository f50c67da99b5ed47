"""Enqueue destinations: an apply re-enqueues matching messages into other queues.

Oracle's ``DBMS_APPLY_ADM.SET_ENQUEUE_DESTINATION`` sets a destination queue on a rule
of the apply's positive rule set; ``SET_EXECUTE(..., FALSE)`` stops the apply from also
executing what the rule matches. Here each destination has a condition (the rule
condition language, or a rule of the rules file by name) and an ``execute`` flag.

A pass writes, per destination, one batch of the messages that match (as user-enqueued
messages: ``origin = USER``, seed 001) and commits it in the destination queue with
the dedup key ``apply:<name>:<n>:<queue>:<last source batch>`` and the source range it
came from, *before* the apply commits its own progress. A crash in between re-runs
the pass, and the destination recognises the range: each message is enqueued exactly
once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from changeflow import fs
from changeflow.apply.config import EnqueueDestination
from changeflow.config import ApplySpec, PipelineConfig
from changeflow.errors import ConfigError
from changeflow.sites import SiteRuntime

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from changeflow.pipeline import Pipeline
    from changeflow.queues.catalog import Batch

log = logging.getLogger(__name__)


@dataclass
class Destination:
    """One enqueue destination, resolved."""

    spec: EnqueueDestination
    index: int
    site: SiteRuntime
    queue: str

    @property
    def ref(self) -> str:
        """``owner.name@site``."""
        return f"{self.queue}@{self.site.name}"

    def condition(self, cfg: PipelineConfig) -> Column:
        """The Spark condition messages must satisfy."""
        from pyspark.sql import functions as F

        from changeflow.rules import Rule

        if self.spec.condition is None and self.spec.rule is None:
            return F.lit(True)
        if self.spec.rule is not None:
            from changeflow.clients import registry

            reg = registry(cfg)
            rule = reg.rules.get(self.spec.rule) if reg is not None else None
            if rule is None:
                raise ConfigError(f"enqueue destination {self.ref}: no rule named "
                                  f"{self.spec.rule!r} in the rules file", file=cfg.source_path)
        else:
            rule = Rule(f"enqueue_{self.index}", self.spec.condition or "")
        return F.coalesce(rule.code_column().isNotNull(), F.lit(False))


def destinations(pipe: Pipeline, spec: ApplySpec) -> list[Destination]:
    """An apply's enqueue destinations (from the run's resolved pipeline).

    Raises:
        ConfigError: a destination queue is not declared.
    """
    out = []
    cfg = pipe.cfg
    for i, d in enumerate(spec.enqueue):
        try:
            handle = pipe.queue(d.queue)
            rt, queue = handle.site, handle.name
        except ConfigError as exc:
            raise ConfigError(f"enqueue destination {d.queue!r}: {exc}", file=cfg.source_path,
                              key=f"applies.{spec.name}.enqueue.{i}.queue") from None
        out.append(Destination(d, i, rt, queue))
    return out


def split(cfg: PipelineConfig, df: DataFrame, dests: list[Destination]
          ) -> tuple[DataFrame, list[tuple[Destination, DataFrame]]]:
    """The messages the apply executes, and per destination the messages it enqueues."""
    from pyspark.sql import functions as F

    if not dests:
        return df, []
    out = []
    instead = F.lit(False)
    for d in dests:
        cond = d.condition(cfg)
        out.append((d, df.where(cond)))
        if not d.spec.execute:
            instead = instead | cond
    return df.where(~instead), out


def enqueue(spark: SparkSession, apply: str, parts: list[tuple[Destination, DataFrame]],
            batches: list[Batch]) -> int:
    """Write and commit one batch per destination (exactly once per source range).

    Returns:
        Messages newly enqueued (a range committed before counts zero).
    """
    from pyspark.sql import functions as F

    from changeflow.queues import io as qio

    first, last = batches[0].seq, batches[-1].seq
    total = 0
    for d, df in parts:
        producer = f"apply:{apply}:{d.index}"
        key = f"{producer}:{d.ref}:{last}"
        if d.site.catalog.find_dedup(d.queue, key) is not None:
            continue
        user = df.withColumn("origin", F.lit("USER"))
        with qio.guard(batches, destination=d.ref):
            new = qio.write_batch(spark, d.site.catalog, d.queue, user, producer=producer,
                                  dedup_key=key, source_first_seq=first, source_last_seq=last)
        if new is None:
            continue
        try:
            seq = d.site.catalog.commit_batch(d.queue, new)
        except BaseException:
            fs.delete(spark, new.path)
            raise
        if seq is None:
            fs.delete(spark, new.path)
        else:
            total += new.n_messages
            log.info("apply %s: enqueued %s messages into %s (batch %s)", apply,
                     new.n_messages, d.ref, seq)
    return total
