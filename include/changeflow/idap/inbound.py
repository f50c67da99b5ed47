"""The destination side of HTTP propagation of LCR batches: one range, one batch, once.

A propagation of another server sends the rows of its source batches ``first..last``
as ``<lcr source_seq="N">`` messages of ``AQXmlPublish`` requests carrying its
propagation header, in one HTTP session, and then ``AQXmlCommit``. The rows wait in the
session; the commit writes them as one Parquet batch of the destination queue
(:func:`changeflow.queues.arrow_io.write_arrow_batch`) and commits it with the source
range under the producer ``propagation:<name>@<source database>``
(:meth:`~changeflow.queues.catalog.QueueCatalog.commit_batch`): rows of source batches
this producer committed here before are dropped first, so a re-sent range, whole or in
part, is recognised and nothing is written twice. The response's header says what was
committed, for the sender's statistics.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any
from xml.etree.ElementTree import Element

from changeflow.idap import model as M
from changeflow.idap.errors import InvalidRequestError
from changeflow.idap.lcrxml import decode_contract_row
from changeflow.idap.render import response, result
from changeflow.idap.sessions import HttpSession
from changeflow.idap.xmlns import CF_NS
from changeflow.messaging import admin
from changeflow.messaging.model import queue_name

log = logging.getLogger(__name__)


def receive_batch(service: Any, env: M.Envelope, http: HttpSession) -> Element:
    """Keep a chunk of a propagated range in the session (commit it when asked)."""
    req, head = env.request, env.propagation
    assert head is not None
    if not isinstance(req, M.Enqueue):
        raise InvalidRequestError("a batch propagation header goes with AQXmlPublish or "
                                  "AQXmlSend")
    if service.catalog is None or not service.catalog.staging_root:
        raise InvalidRequestError(
            "this server has no staging root (it serves a bare state store): it cannot take "
            "LCR batches; start it with the pipeline configuration (changeflow serve "
            "--config ...)")
    queue = queue_name(req.destination.name)
    props = admin.queue_properties(service.store, queue)
    service.user_for(http, props, "ENQUEUE", None)
    rows, seqs = [], []
    for m in req.messages:
        path = f"{req.op}/message_set/message[{m.number}]/message_payload"
        try:
            seqs.append(int(m.payload.get("source_seq", "")))
        except ValueError:
            raise InvalidRequestError(f"{path}/lcr needs a source_seq attribute") from None
        if not head.first <= seqs[-1] <= head.last:  # type: ignore[operator]
            raise InvalidRequestError(f"{path}/lcr source_seq {seqs[-1]} is outside the range "
                                      f"{head.first}..{head.last}")
        rows.append(decode_contract_row(m.payload, path))
    pending = http.extra.get("batch")
    if pending is None:
        pending = http.extra["batch"] = {"queue": queue, "head": head, "rows": [], "seqs": []}
    elif pending["queue"] != queue or pending["head"] != head:
        raise InvalidRequestError("a session carries one propagated range: commit or roll "
                                  "back the previous one first")
    pending["rows"] += rows
    pending["seqs"] += seqs
    if req.commit:
        commit_batch(service, http)
    out = response(M.RESPONSES[req.op])
    result(out, "send_result" if req.op == M.SEND else "publish_result",
           req.destination.name, [])
    return out


def commit_batch(service: Any, http: HttpSession) -> dict[str, Any] | None:
    """Write and commit the session's propagated range, if it holds one.

    Returns:
        ``{"committed": rows, "held": bool, "seq": destination seq}``, also set as the
        reply's header; None when the session holds no range.

    Raises:
        RangeConflictError: another run committed an overlapping range meanwhile
            (transient: the sender's next pass re-sends).
    """
    import pyarrow as pa

    from changeflow import lcr
    from changeflow.queues.arrow_io import delete_batch_files, write_arrow_batch

    pending = http.extra.pop("batch", None)
    if pending is None:
        return None
    head: M.PropagationHeader = pending["head"]
    queue, cat = pending["queue"], service.catalog
    done = cat.last_from_producer(queue, head.producer)
    outcome = {"committed": 0, "held": done is not None and done >= head.last, "seq": None}
    if not outcome["held"]:
        keep = [r for r, s in zip(pending["rows"], pending["seqs"], strict=True)
                if done is None or s > done]
        table = pa.Table.from_pylist(keep, schema=lcr.arrow_schema())
        new = write_arrow_batch(cat, queue, table, producer=head.producer,
                                dedup_key=f"{head.producer}:{head.last}")
        if new is not None:
            first = head.first if done is None else max(head.first, done + 1)  # type: ignore
            new = dataclasses.replace(new, source_first_seq=first, source_last_seq=head.last)
            try:
                seq = cat.commit_batch(queue, new)
            except BaseException:
                delete_batch_files(new.path)
                raise
            if seq is None:
                delete_batch_files(new.path)
                outcome["held"] = True
            else:
                outcome.update(committed=new.n_messages, seq=seq)
    log.info("propagation %s from %s: range %s..%s into %s: %s", head.propagation, head.source,
             head.first, head.last, queue, outcome)
    el = Element(f"{{{CF_NS}}}propagation_result",
                 {k: str(v).lower() if isinstance(v, bool) else str(v)
                  for k, v in outcome.items() if v is not None})
    http.reply_header = el
    return outcome
