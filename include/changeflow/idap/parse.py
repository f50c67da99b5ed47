"""Parsing IDAP requests: a hardened XML parser, then the SOAP envelope and the IDAP body.

The body is parsed by ``defusedxml`` with DTDs forbidden: a document declaring
entities (the "billion laughs") or referring to external ones (XXE) is refused before
anything is expanded or fetched. Then the structure is checked: the envelope and body
in the SOAP 1.1 namespace, one request in the IDAP namespace, the seed's elements and
no others. Every refusal names the element and what was expected, and happens before
the request touches a queue.

>>> env = parse_envelope(b'''<?xml version="1.0"?>
... <Envelope xmlns="http://schemas.xmlsoap.org/soap/envelope/">
...    <Body>
...       <AQXmlCommit xmlns="http://ns.oracle.com/AQ/schemas/access"/>
...    </Body>
... </Envelope>''')
>>> env.op, env.request
('AQXmlCommit', Commit())
>>> parse_envelope(b"<Envelope><Body>")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
changeflow.idap.errors.XmlParseError: the request is not well-formed XML: ...
"""

from __future__ import annotations

from typing import Any
from xml.etree.ElementTree import Element, ParseError

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import fromstring

from changeflow.idap import model as M
from changeflow.idap.errors import InvalidRequestError, XmlParseError
from changeflow.idap.xmlns import (
    CF_NS,
    IDAP_NS,
    SOAP_NS,
    by_name,
    children,
    local,
    number,
    required,
    required_text,
    split,
    text,
)
from changeflow.messaging.constants import DequeueMode, Navigation, Visibility
from changeflow.messaging.errors import MessagePropertyError

_TRUE = ("1", "true")


def parse_xml(body: bytes) -> Element:
    """Parse XML with DTDs, entities and external references forbidden.

    Raises:
        XmlParseError: not well-formed, or a DTD/entity declaration was found.
    """
    try:
        return fromstring(body, forbid_dtd=True, forbid_entities=True,
                          forbid_external=True)
    except DefusedXmlException as exc:
        raise XmlParseError(
            f"the request declares a DTD or entities ({type(exc).__name__}); IDAP requests may "
            "not (entity expansion and external entities are refused, nothing was expanded "
            "or fetched)") from None
    except ParseError as exc:
        raise XmlParseError(f"the request is not well-formed XML: {exc}") from None
    except ValueError as exc:  # e.g. a declared encoding Python cannot decode
        raise XmlParseError(f"the request is not well-formed XML: {exc}") from None


def parse_envelope(body: bytes) -> M.Envelope:
    """Parse a SOAP 1.1 envelope holding one IDAP request.

    Raises:
        XmlParseError, InvalidRequestError: naming what is wrong.
    """
    root = parse_xml(body)
    ns, name = split(root.tag)
    if name != "Envelope":
        raise InvalidRequestError(f"the document element is {name!r}; a SOAP request is an "
                                  f"Envelope in namespace {SOAP_NS}")
    if ns != SOAP_NS:
        raise InvalidRequestError(
            f"the Envelope is in namespace {ns!r}; SOAP 1.1 envelopes are in {SOAP_NS} "
            "(VersionMismatch)")
    header = body_el = None
    for child in root:
        if not isinstance(child.tag, str):
            continue
        cns, cname = split(child.tag)
        if cns != SOAP_NS or cname not in ("Header", "Body"):
            raise InvalidRequestError(
                f"unexpected element {{{cns}}}{cname} in the Envelope; it holds a Header and "
                f"a Body in namespace {SOAP_NS}")
        if cname == "Header":
            header = child
        else:
            body_el = child
    if body_el is None:
        raise InvalidRequestError(f"the Envelope has no Body (namespace {SOAP_NS})")
    ops = [c for c in body_el if isinstance(c.tag, str)]
    if len(ops) != 1:
        raise InvalidRequestError(
            f"the Body must hold exactly one IDAP request, not {len(ops)} elements")
    op_ns, op = split(ops[0].tag)
    if op_ns != IDAP_NS:
        raise InvalidRequestError(
            f"the request {op} is in namespace {op_ns!r}; IDAP requests are in {IDAP_NS}")
    if op not in M.OPERATIONS:
        raise InvalidRequestError(
            f"unknown operation {op}; IDAP operations are {', '.join(M.OPERATIONS)}")
    prop = _propagation(header) if header is not None else None
    return M.Envelope(_request(op, ops[0]), op, prop)


def _propagation(header: Element) -> M.PropagationHeader | None:
    found = None
    for entry in header:
        if not isinstance(entry.tag, str):
            continue
        ns, name = split(entry.tag)
        if ns == CF_NS and name == "propagation":
            found = entry
        elif entry.get(f"{{{SOAP_NS}}}mustUnderstand") in _TRUE:
            raise InvalidRequestError(
                f"header entry {{{ns}}}{name} must be understood, and this service does not "
                "know it (MustUnderstand)")
    if found is None:
        return None
    kind = found.get("kind", "")
    if kind not in ("batch", "messages") or not found.get("name") or not found.get("source"):
        raise InvalidRequestError("the propagation header needs name, source and kind "
                                  "(batch or messages)")
    try:
        first = int(found.get("first") or "") if found.get("first") else None
        last = int(found.get("last") or "") if found.get("last") else None
    except ValueError:
        raise InvalidRequestError("the propagation header's first and last must be "
                                  "integers") from None
    if kind == "batch" and (first is None or last is None or first > last):
        raise InvalidRequestError("a batch propagation header needs first <= last")
    return M.PropagationHeader(found.get("name", ""), found.get("source", ""), kind, first,
                               last)


def _request(op: str, el: Element) -> M.Request:
    if op in (M.COMMIT, M.ROLLBACK):
        extra = [local(c) for c in children(el, op)]
        if extra:
            raise InvalidRequestError(f"{op} is an empty element; it holds {extra[0]}")
        return M.Commit() if op == M.COMMIT else M.Rollback()
    if op in (M.SEND, M.PUBLISH):
        return _enqueue(op, el)
    if op == M.RECEIVE:
        return _receive(el)
    return _register(el)


def _destination(found: dict[str, Element], path: str) -> M.Destination:
    el = required(found, "destination", path)
    name = required_text(found, "destination", path)
    lookup = (el.get("lookup_type") or "DATABASE").strip().upper()
    if lookup == "LDAP":
        raise InvalidRequestError(
            f"{path}/destination lookup_type LDAP is not supported (no LDAP server); give "
            "schema.queue_name with lookup_type DATABASE")
    if lookup != "DATABASE":
        raise InvalidRequestError(
            f"{path}/destination lookup_type {lookup!r} must be DATABASE or LDAP")
    return M.Destination(name, lookup)


def _choice(value: str | None, parse: Any, default: str, path: str) -> str:
    if value is None:
        return default
    try:
        return str(parse(value).value)
    except MessagePropertyError as exc:
        raise InvalidRequestError(f"{path}: {exc}") from None


def _commit_flag(found: dict[str, Element], path: str) -> bool:
    el = found.get("AQXmlCommit")
    if el is not None and [c for c in el if isinstance(c.tag, str)]:
        raise InvalidRequestError(f"{path}/AQXmlCommit is an empty element")
    return el is not None


def _enqueue(op: str, el: Element) -> M.Enqueue:
    found = by_name(el, op, ("producer_options", "message_set", "AQXmlCommit"))
    po_path = f"{op}/producer_options"
    po = by_name(required(found, "producer_options", op), po_path,
                 ("destination", "visibility", "transformation"))
    dest = _destination(po, po_path)
    vis = _choice(text(po.get("visibility")), Visibility.parse, "ON_COMMIT",
                  f"{po_path}/visibility")
    from changeflow.idap.messages import parse_message_set

    messages = parse_message_set(required(found, "message_set", op), f"{op}/message_set")
    return M.Enqueue(op, dest, messages, vis, text(po.get("transformation")),
                     _commit_flag(found, op))


def _receive(el: Element) -> M.Receive:
    path = M.RECEIVE
    found = by_name(el, path, ("consumer_options", "AQXmlCommit"))
    co_path = f"{path}/consumer_options"
    co = by_name(required(found, "consumer_options", path), co_path,
                 ("destination", "consumer_name", "wait_time", "selector", "visibility",
                  "dequeue_mode", "navigation_mode", "transformation", "batch_size"))
    wait = _wait(text(co.get("wait_time")), co_path)
    batch = number(co, "batch_size", co_path, integer=True)
    if batch is not None and not 1 <= int(batch) <= 1000:
        raise InvalidRequestError(f"{co_path}/batch_size must be 1..1000, not {batch}")
    selector: dict[str, str] = {}
    if co.get("selector") is not None:
        sel = by_name(co["selector"], f"{co_path}/selector",
                      ("correlation", "message_id", "condition"))
        selector = {k: v for k in ("correlation", "message_id", "condition")
                    if (v := text(sel.get(k))) is not None}
        if len(selector.get("condition", "")) > 4000:
            raise InvalidRequestError(f"{co_path}/selector/condition is longer than 4000 "
                                      "characters")
    return M.Receive(
        destination=_destination(co, co_path), consumer_name=text(co.get("consumer_name")),
        wait_time=wait, selector=selector,
        visibility=_choice(text(co.get("visibility")), Visibility.parse, "ON_COMMIT",
                           f"{co_path}/visibility"),
        dequeue_mode=_choice(text(co.get("dequeue_mode")), DequeueMode.parse, "REMOVE",
                             f"{co_path}/dequeue_mode"),
        navigation_mode=_choice(text(co.get("navigation_mode")), Navigation.parse,
                                "NEXT_MESSAGE", f"{co_path}/navigation_mode"),
        transformation=text(co.get("transformation")), batch_size=int(batch or 1),
        commit=_commit_flag(found, path))


def _wait(value: str | None, path: str) -> float | None:
    """``wait_time``: seconds; -1 or FOREVER waits forever, 0 or NO_WAIT not at all."""
    if value is None or value.upper() == "FOREVER":
        return None
    if value.upper() == "NO_WAIT":
        return 0.0
    try:
        seconds = float(value)
    except ValueError:
        raise InvalidRequestError(f"{path}/wait_time must be seconds (-1: FOREVER), not "
                                  f"{value!r}") from None
    if seconds == -1:
        return None
    if seconds < 0 or seconds != seconds:
        raise InvalidRequestError(f"{path}/wait_time must be >= 0 or -1, not {value!r}")
    return seconds


def _register(el: Element) -> M.Register:
    path = M.REGISTER
    found = by_name(el, path, ("register_options",))
    ro_path = f"{path}/register_options"
    ro = by_name(required(found, "register_options", path), ro_path,
                 ("destination", "consumer_name", "notify_url"))
    url = required_text(ro, "notify_url", ro_path)
    low = url.lower()
    if low.startswith("plsql://"):
        raise InvalidRequestError(f"{ro_path}/notify_url {url!r}: plsql:// procedures do not "
                                  "exist here; use http://, https:// or mailto:")
    if not low.startswith(("http://", "https://", "mailto:")):
        raise InvalidRequestError(f"{ro_path}/notify_url {url!r} must be http://..., "
                                  "https://... or mailto:address")
    return M.Register(_destination(ro, ro_path), url, text(ro.get("consumer_name")))
