"""What ``changeflow run`` prints: one readable line per run, a table where it helps.

A run returns a result object (``CaptureResult``, ``PropagationResult``, ...); this
module turns it into a headline in human units, and a table for the per-table
figures of an apply or a verification. ``--output json|yaml`` prints the raw result.

>>> from changeflow.propagation import PropagationResult
>>> s = summarize("propagation", "p12", PropagationResult("p12", 2, 1200, 1150, 40960, 7),
...               seconds=3.25, queues=("hr.q@s1", "hr.q@s2"))
>>> for part in s.headline.split("; "):
...     print(part)
propagation p12: 1,150 messages (40.0 KiB) propagated from hr.q@s1 to hr.q@s2 as batch 7
50 discarded by rules  [3.2 s]
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from changeflow.cli.output import Col, human_count, human_duration
from changeflow.units import human_bytes


@dataclass
class Summary:
    """A run, for people (headline, notes, table) and for scripts (:attr:`data`)."""

    headline: str
    notes: list[str] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    columns: list[Col] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    ok: bool = True


def _plural(n: int, word: str) -> str:
    return f"{human_count(n)} {word}{'' if n == 1 else 's'}"


def _span(numbers: list[int]) -> str:
    if not numbers:
        return "-"
    lo, hi = min(numbers), max(numbers)
    return str(lo) if lo == hi else f"{lo}-{hi}"


def _capture(name: str, r: Any, queues: tuple[str, ...]) -> Summary:
    to = f" to {queues[0]}" if queues else ""
    if hasattr(r, "snapshots"):  # snapshot source
        if not r.snapshots:
            return Summary(f"capture {name}: no new snapshot to capture")
        head = (f"capture {name}: {_plural(r.messages, 'message')} enqueued{to} from "
                f"{_plural(len(r.snapshots), 'snapshot')} ({_span(r.snapshots)})")
        return Summary(head)
    head = (f"capture {name}: {_plural(r.messages, 'message')} of "
            f"{_plural(r.transactions, 'transaction')} enqueued{to} in "
            f"{_plural(r.batches, 'batch')}")
    notes = [f"{_plural(r.tagged_skipped, 'tagged change')} skipped"] if r.tagged_skipped else []
    if r.last_lsn:
        notes.append(f"read up to LSN {r.last_lsn}")
    return Summary(head, notes)


def _propagation(name: str, r: Any, queues: tuple[str, ...]) -> Summary:
    src, dst = (queues + ("the source queue", "the destination queue"))[:2]
    notes = ["recovered an interrupted run (source acknowledged up to its last commit)"] \
        if r.recovered else []
    if r.more_pending:
        notes.append("more batches are waiting: run it again")
    if not r.batches_read:
        return Summary(f"propagation {name}: nothing to propagate ({src} has no pending "
                       "batch)", notes)
    moved = (f"{_plural(r.messages_propagated, 'message')} ({human_bytes(r.bytes_propagated)}) "
             f"propagated from {src} to {dst}")
    if r.destination_seq is not None:
        moved += f" as batch {r.destination_seq}"
    elif r.messages_read:
        moved += " (already there: committed by an earlier run)"
    discarded = r.messages_read - r.messages_propagated
    if discarded and r.destination_seq is not None:
        moved += f"; {human_count(discarded)} discarded by rules"
    return Summary(f"propagation {name}: {moved}", notes)


def _apply(name: str, r: Any, queues: tuple[str, ...]) -> Summary:
    if not r.batches:
        return Summary(f"apply {name}: nothing to apply ({queues[0] if queues else 'its queue'}"
                       " has no pending batch)")
    if hasattr(r, "tables"):  # Parquet targets
        rows = [{"table": t, "changes": n} for t, n in sorted(r.tables.items())]
        head = (f"apply {name}: {_plural(r.messages, 'message')} from "
                f"{_plural(r.batches, 'batch')} applied to {_plural(len(rows), 'table')}")
        return Summary(head, rows=rows, columns=[Col("table"), Col("changes", "count")])
    head = (f"apply {name}: {_plural(r.changes, 'change')} in "
            f"{_plural(r.transactions, 'transaction')} applied from "
            f"{_plural(r.batches, 'batch')}")
    notes = [f"{_plural(r.skipped, 'change')} skipped"] if r.skipped else []
    if r.errors:
        notes.append(f"{_plural(r.errors, 'error')} (see the apply's error queue)")
    return Summary(head, notes, ok=not r.errors)


def _verify(name: str, r: Any, queues: tuple[str, ...]) -> Summary:
    rows = [{**dataclasses.asdict(t), "result": "OK" if t.ok else "DIFFERS"} for t in r.tables]
    verdict = "PASSED" if r.ok else "FAILED"
    head = (f"verify {name}: {verdict}, {sum(t.ok for t in r.tables)} of "
            f"{_plural(len(rows), 'table')} equal the source's latest snapshot")
    cols = [Col("table"), Col("source_rows", "count", "source"),
            Col("target_rows", "count", "target"), Col("missing", "count"),
            Col("unexpected", "count", "extra"), Col("result")]
    return Summary(head, rows=rows, columns=cols, ok=r.ok)


_KINDS = {"capture": _capture, "propagation": _propagation, "apply": _apply,
          "verify": _verify}


def summarize(kind: str, name: str, result: Any, *, seconds: float,
              queues: tuple[str, ...] = ()) -> Summary:
    """The summary of one run of a component.

    Args:
        kind: capture, propagation, apply or verify.
        result: what the run returned.
        seconds: the run's wall time (shown in the headline).
        queues: the queues involved, as ``owner.name@site`` (source first).
    """
    s = _KINDS[kind](name, result, queues)
    s.ok = s.ok and bool(getattr(result, "ok", True))
    s.headline += f"  [{human_duration(seconds)}]"
    is_record = dataclasses.is_dataclass(result) and not isinstance(result, type)
    body = dataclasses.asdict(result) if is_record else {"value": result}
    s.data = {"kind": kind, "name": name, "ok": s.ok, "seconds": round(seconds, 3),
              "result": body}
    return s
