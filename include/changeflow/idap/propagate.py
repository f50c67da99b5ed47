"""HTTP propagation: a propagation whose destination site is another server's IDAP endpoint.

As in Oracle, where a database link with an HTTP connect string turns a propagation
into one that posts to the remote AQ servlet (seed 003, "Propagation Using HTTP and
HTTPS"), a propagation whose destination queue is at a *remote site*
(``cars_q2@dba`` with ``idap.remote_sites.dba.url``) publishes IDAP requests instead of
writing the destination queue. It runs inside
:func:`changeflow.propagation.propagate_once` as its transport (:data:`TRANSPORT`,
registered with :mod:`changeflow.propagation.transports`), under the same lease, so the same
schedules, backoff, auto-disable, statistics and alerts apply. One pass:

1. **LCR batches** of the source queue (up to the pass limits), read batch by batch
   (filtered by the propagation's rule sets with Spark when it has any), are sent as
   ``<lcr source_seq="N">`` rows of ``AQXmlPublish`` requests (``max_messages`` a
   request) with a propagation header naming the range ``first..last``, in one HTTP
   session, then ``AQXmlCommit``. The destination writes one batch and commits it with
   the range (:mod:`.inbound`): rows of source batches it holds already are dropped, so a
   range re-sent after a crash is recognised. The source is acknowledged after the
   commit's answer.
2. **User messages** addressed to the remote queue (remote subscribers
   ``NAME@cars_q2@dba``, recipients) are locked at the source, published with their
   ``message_id`` (the destination recognises an id it holds) and a commit, then
   acknowledged (:func:`changeflow.messaging.propagate.carry_user_messages`).

An unreachable endpoint is a transient failure (retried with the schedule's backoff);
a destination queue that does not exist marks the messages UNDELIVERABLE; wrong
credentials fail the pass (counted, so the schedule disables itself after 16).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any
from xml.etree.ElementTree import Element, SubElement

from changeflow.errors import ChangeflowError, QueueNotFoundError
from changeflow.idap.client import (
    IdapClient,
    RemoteRequestError,
    message_element,
    propagation_header,
    publish_request,
)
from changeflow.idap.lcrxml import encode_contract_row
from changeflow.idap.xmlns import CF_NS, q
from changeflow.pipeline import Pipeline, resolve
from changeflow.propagation.transports import Transport

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from changeflow.config import PipelineConfig, PropagationSpec
    from changeflow.propagation import PropagationResult
    from changeflow.state.leases import Lease

log = logging.getLogger(__name__)


def is_http(cfg: PipelineConfig, spec: PropagationSpec) -> bool:
    """Whether a propagation's destination is a remote IDAP site."""
    return cfg.idap.remote(spec.destination_queue) is not None


def probe(cfg: PipelineConfig, spec: PropagationSpec) -> None:
    """Raise DestinationUnavailableError when the remote endpoint does not answer."""
    from changeflow.errors import DestinationUnavailableError

    remote = cfg.idap.remote(spec.destination_queue)
    assert remote is not None
    with IdapClient.for_remote(remote) as client:
        try:
            resp = client.http.get(f"{remote.url}?wsdl")
        except Exception as exc:  # noqa: BLE001  (any failure to connect is an outage)
            raise DestinationUnavailableError(
                f"destination {spec.destination_queue}: IDAP endpoint {remote.url} "
                f"unreachable: {type(exc).__name__}: {exc}") from exc
        if resp.status_code >= 500:
            raise DestinationUnavailableError(
                f"destination {spec.destination_queue}: IDAP endpoint {remote.url} answered "
                f"HTTP {resp.status_code}")


def propagate_http(spark: SparkSession | None, pipe: PipelineConfig | Pipeline,
                   spec: PropagationSpec, lease: Lease, rule_filter: Any = None,
                   max_batches: int | None = None) -> PropagationResult:
    """One pass of an HTTP propagation (see the module docstring)."""
    from changeflow.messaging.propagate import MAX_PER_PASS, carry_user_messages
    from changeflow.propagation import PropagationResult

    started = time.monotonic()
    pipe = resolve(pipe)
    cfg = pipe.cfg
    remote = cfg.idap.remote(spec.destination_queue)
    assert remote is not None
    dst_q = spec.destination_queue.rpartition("@")[0].lower()
    src = pipe.queue(spec.source_queue)
    src_rt, src_q = src.site, src.name
    result = PropagationResult(spec.name)
    with IdapClient.for_remote(remote) as client:
        _batches(spark, pipe, spec, lease, rule_filter, max_batches, client, dst_q, result)
    address = cfg.qualify(spec.destination_queue)
    producer = f"propagation:{spec.name}"
    limit = min(MAX_PER_PASS, spec.limits.max_messages)
    head = propagation_header(spec.name, _source_name(cfg, spec), "messages")
    with IdapClient.for_remote(remote) as client:
        carry_user_messages(
            src_rt.store, src_q, address, producer, limit, spec.name, result,
            lambda rows: _deliver(client, src_rt.store, head, dst_q, rows, lease))
    result.seconds = time.monotonic() - started
    return result


def _source_name(cfg: PipelineConfig, spec: PropagationSpec) -> str:
    site = cfg.queue(spec.source_queue).site
    return cfg.sites[site].database


def _batches(spark: SparkSession | None, pipe: Pipeline, spec: PropagationSpec,
             lease: Lease, rule_filter: Any, max_batches: int | None, client: IdapClient,
             dst_q: str, result: PropagationResult) -> None:
    from changeflow.sites import consumer_name

    cfg = pipe.cfg
    src = pipe.queue(spec.source_queue)
    src_rt, src_q = src.site, src.name
    consumer = consumer_name("propagation", spec.name)
    limits = spec.limits
    batches = src_rt.catalog.pending(src_q, consumer, max_batches=max_batches,
                                     max_messages=limits.max_messages,
                                     max_bytes=limits.max_bytes)
    if not batches:
        return
    first, last = batches[0].seq, batches[-1].seq
    head = propagation_header(spec.name, _source_name(cfg, spec), "batch", first, last)
    chunk: list[Element] = []
    sent = 0
    remote = cfg.idap.remote(spec.destination_queue)
    size = remote.max_messages if remote else 1000
    for b in batches:
        for row in _rows(spark, b, rule_filter):
            m = Element(q("message"))
            h = SubElement(m, q("message_header"))
            SubElement(SubElement(h, q("sender_id")), q("agent_name")).text = "CHANGEFLOW"
            if row.get("msg_id"):
                SubElement(h, q("message_id")).text = row["msg_id"]
            p = SubElement(m, q("message_payload"))
            encode_contract_row(p, row)
            p[0].set("source_seq", str(b.seq))
            chunk.append(m)
            if len(chunk) >= size:
                client.post(publish_request(dst_q, chunk), head)
                sent += len(chunk)
                chunk = []
    lease.check(None)
    reply = client.post(publish_request(dst_q, chunk, commit=True), head) if chunk \
        else (client.commit() if sent else None)
    outcome = _outcome(reply.header) if reply is not None else {}
    src_rt.catalog.ack(src_q, consumer, last)
    result.batches_read = len(batches)
    result.messages_read = sum(b.n_messages for b in batches)
    result.messages_propagated = int(outcome.get("committed", 0))
    result.bytes_propagated = sum(b.n_bytes for b in batches) if result.messages_propagated \
        else 0
    result.destination_seq = int(outcome["seq"]) if outcome.get("seq") else None
    result.more_pending = bool(src_rt.catalog.pending(src_q, consumer, max_batches=1))
    log.info("propagation %s: source batches %s..%s to %s at %s: %s", spec.name, first, last,
             dst_q, client.url, outcome or "nothing left after the rule sets")


def _outcome(header: list[Element]) -> dict[str, str]:
    for el in header:
        if el.tag == f"{{{CF_NS}}}propagation_result":
            return dict(el.attrib)
    return {}


def _rows(spark: SparkSession | None, batch: Any, rule_filter: Any) -> list[dict[str, Any]]:
    """One source batch's rows (contract form), through the rule sets when there are any."""
    if rule_filter is not None and spark is not None:
        from changeflow.queues import io as qio

        df = rule_filter(qio.read_batches(spark, [batch]))
        return list(df.toArrow().to_pylist())
    from changeflow.queues.arrow_io import read_arrow_batches

    return list(read_arrow_batches([batch]).to_pylist())


def _deliver(client: IdapClient, store: Any, head: Element, dst_q: str, rows: list[Any],
             lease: Lease) -> Any:
    """Publish locked user-message deliveries once each; returns the messaging Outcome."""
    from changeflow.messaging.propagate import Outcome

    by_msg: dict[str, list[Any]] = {}
    for r in rows:
        by_msg.setdefault(r.msg_id, []).append(r)
    elements = {mid: _user_message(store, ds) for mid, ds in by_msg.items()}
    out = Outcome([], [], {})
    lease.check(None)
    try:
        client.post(publish_request(dst_q, list(elements.values()), commit=True), head)
        out.sent.extend(elements)
    except QueueNotFoundError:
        raise
    except ChangeflowError as exc:
        if isinstance(exc, RemoteRequestError) or not exc.transient:
            _one_by_one(client, dst_q, elements, head, out)
        else:
            raise
    out.bytes = sum(by_msg[m][0].size for m in out.sent)
    return out


def _one_by_one(client: IdapClient, dst_q: str, elements: dict[str, Element], head: Element,
                out: Any) -> None:
    """A refused set: send each message alone, so only the bad ones are UNDELIVERABLE."""
    client.rollback()
    for mid, el in elements.items():
        try:
            client.post(publish_request(dst_q, [el], commit=True), head)
            out.sent.append(mid)
        except QueueNotFoundError:
            raise
        except ChangeflowError as exc:
            if exc.transient:
                raise
            out.undeliverable[mid] = f"{type(exc).__name__}: {exc}"
            client.rollback()


def _user_message(store: Any, deliveries: list[Any]) -> Element:
    """A source delivery row as an IDAP ``message`` (its id, properties and payload)."""
    from changeflow.idap.payloads import payload_element
    from changeflow.messaging.dequeue import from_row
    from changeflow.messaging.dictionary import message_type

    first = deliveries[0]
    with store.read() as conn:
        mtype = message_type(conn, store.url, first.msg_type)
    m = from_row(first, mtype.decode(first.payload, first.payload_raw))
    names = sorted({d.consumer for d in deliveries})
    recipients = [n for n in names if n] if "" not in names else []
    holder = Element(q("message_payload"))
    payload_element(holder, m)
    return message_element(holder[0], msg_id=m.msg_id, correlation=m.correlation,
                           priority=m.priority, delay=m.delay or None,
                           expiration=m.expiration,
                           sender=m.sender.name if m.sender and m.sender.name else "CHANGEFLOW",
                           recipients=recipients or None)


#: The HTTP transport, an entry point of ``changeflow.propagation`` (``pyproject.toml``).
TRANSPORT = Transport("idap_http", reaches=is_http, propagate=propagate_http, probe=probe)
