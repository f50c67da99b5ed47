"""A small IDAP client: build requests, POST them in one HTTP session, read the answers.

Used by HTTP propagation, the benchmark and the demo; any SOAP client works as well
(the tests use zeep). The client keeps the session cookie, so its requests share one
transaction until :meth:`IdapClient.commit`. A Fault becomes a Python error of the
matching kind (:func:`remote_error`); an unreachable server or a ``5xx`` without a
Fault is a :class:`~changeflow.errors.DestinationUnavailableError` (transient).

>>> el = publish_request("ws.q", [message_element(b"\\x01", msg_id="m1")], commit=True)
>>> from changeflow.idap.render import to_bytes
>>> b"<raw>01</raw>" in to_bytes(el) and b"<AQXmlCommit/>" in to_bytes(el)
True
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any
from xml.etree.ElementTree import Element, SubElement

from changeflow.errors import (
    DestinationUnavailableError,
    PayloadTypeError,
    QueueNotFoundError,
    RangeConflictError,
    SecurityError,
    TerminalError,
)
from changeflow.idap.parse import parse_xml
from changeflow.idap.render import envelope, to_bytes
from changeflow.idap.xmlns import CF_NS, IDAP_NS, SOAP_NS, q


class RemoteRequestError(TerminalError):
    """The remote IDAP service refused a request (a client Fault)."""

    def __init__(self, message: str, code: int = 0):
        super().__init__(message)
        self.oracle_code = code


class RemoteAuthError(TerminalError):
    """The remote IDAP service refused the credentials (HTTP 401)."""


@dataclass(frozen=True)
class Reply:
    """A successful response: its body element and its SOAP header entries."""

    body: Element
    header: list[Element]
    status: int

    def find(self, path: str) -> list[Element]:
        """Elements under the response element (``/``-separated IDAP local names)."""
        xpath = "/".join(f"{{{IDAP_NS}}}{p}" for p in path.split("/"))
        return self.body.findall(xpath)

    def texts(self, path: str) -> list[str]:
        """The texts of :meth:`find`."""
        return [e.text or "" for e in self.find(path)]


def remote_error(code: int, side: str, message: str) -> Exception:
    """The Python error for a remote Fault's code and side."""
    text = f"remote IDAP service: {message}"
    if side == "Server":
        if code == 25200 and "already committed source batches" in message:
            return RangeConflictError(text)
        return DestinationUnavailableError(text)
    kinds: dict[int, type[Exception]] = {24010: QueueNotFoundError, 1031: SecurityError,
                                         25215: PayloadTypeError}
    kind = kinds.get(code)
    return kind(text) if kind else RemoteRequestError(text, code)


# -- building requests ----------------------------------------------------------------------
def _add(parent: Element, name: str, value: Any) -> Element:
    el = SubElement(parent, q(name))
    if value is not None:
        el.text = str(value)
    return el


def message_element(payload: bytes | Element, *, msg_id: str | None = None,
                    correlation: str | None = None, priority: int | None = None,
                    delay: float | None = None, expiration: float | None = None,
                    sender: str = "CHANGEFLOW", recipients: list[str] | None = None,
                    number: int | None = None) -> Element:
    """One ``message``: a header and a payload (bytes: RAW hex; or a payload element)."""
    m = Element(q("message"))
    if number is not None:
        _add(m, "message_number", number)
    h = SubElement(m, q("message_header"))
    s = SubElement(h, q("sender_id"))
    _add(s, "agent_name", sender)
    for key, value in (("message_id", msg_id), ("correlation", correlation),
                       ("delay", delay), ("expiration", expiration), ("priority", priority)):
        if value is not None:
            _add(h, key, value)
    if recipients:
        rl = SubElement(h, q("recipient_list"))
        for r in recipients:
            name, _, address = r.partition("@")
            rec = SubElement(rl, q("recipient"))
            if name:
                _add(rec, "agent_name", name)
            if address:
                _add(rec, "address", address)
    p = SubElement(m, q("message_payload"))
    if isinstance(payload, Element):
        p.append(payload)
    else:
        _add(p, "raw", bytes(payload).hex())
    return m


def publish_request(queue: str, messages: list[Element], *, op: str = "AQXmlPublish",
                    commit: bool = False, visibility: str | None = None) -> Element:
    """An ``AQXmlPublish`` (or ``AQXmlSend``) request."""
    el = Element(q(op))
    po = SubElement(el, q("producer_options"))
    _add(po, "destination", queue)
    if visibility:
        _add(po, "visibility", visibility)
    ms = SubElement(el, q("message_set"))
    _add(ms, "message_count", len(messages))
    for m in messages:
        ms.append(m)
    if commit:
        SubElement(el, q("AQXmlCommit"))
    return el


def receive_request(queue: str, *, consumer: str | None = None, wait: float | None = 0,
                    batch_size: int = 1, commit: bool = False,
                    **options: str) -> Element:
    """An ``AQXmlReceive`` request (options: dequeue_mode, navigation_mode, visibility)."""
    el = Element(q("AQXmlReceive"))
    co = SubElement(el, q("consumer_options"))
    _add(co, "destination", queue)
    if consumer:
        _add(co, "consumer_name", consumer)
    if wait is not None:
        _add(co, "wait_time", wait)
    for key, value in options.items():
        _add(co, key, value)
    if batch_size != 1:
        _add(co, "batch_size", batch_size)
    if commit:
        SubElement(el, q("AQXmlCommit"))
    return el


def propagation_header(name: str, source: str, kind: str, first: int | None = None,
                       last: int | None = None) -> Element:
    """The SOAP header entry a changeflow propagation sends (see :mod:`.inbound`)."""
    attrs = {"name": name, "source": source, "kind": kind}
    if first is not None and last is not None:
        attrs.update(first=str(first), last=str(last))
    return Element(f"{{{CF_NS}}}propagation", attrs)


def request_document(body: Element, header: Element | None = None) -> bytes:
    """A request envelope (with an optional header entry)."""
    if header is None:
        return envelope(body)
    env = Element(f"{{{SOAP_NS}}}Envelope")
    SubElement(env, f"{{{SOAP_NS}}}Header").append(header)
    SubElement(env, f"{{{SOAP_NS}}}Body").append(body)
    return to_bytes(env)


# -- the client -----------------------------------------------------------------------------
class IdapClient:
    """An HTTP session with an IDAP endpoint (keeps the cookie, hence the transaction).

    Args:
        url: the endpoint, e.g. ``https://host:8443/aq``.
        auth: ``(user, password)`` for HTTP basic authentication.
        verify: True (system CAs), False (accept any certificate), or a CA file path.
    """

    def __init__(self, url: str, auth: tuple[str, str] | None = None, *,
                 verify: bool | str = True, timeout: float = 30.0) -> None:
        import httpx

        self.url = url
        self.http = httpx.Client(auth=auth, verify=verify, timeout=timeout,
                                 headers={"Content-Type": "text/xml; charset=utf-8"})

    @classmethod
    def for_remote(cls, remote: Any) -> IdapClient:
        """A client of a :class:`~changeflow.idap.config.RemoteSite` (credentials from env)."""
        auth = None
        if remote.username_env:
            auth = (os.environ.get(remote.username_env, ""),
                    os.environ.get(remote.password_env or "", ""))
        verify: bool | str = remote.ca_file or remote.verify
        return cls(remote.url, auth, verify=verify, timeout=remote.timeout)

    def post(self, body: Element, header: Element | None = None) -> Reply:
        """POST one request; returns the reply or raises the Fault as an error."""
        import httpx

        doc = request_document(body, header)
        try:
            resp = self.http.post(self.url, content=doc, headers={
                "SOAPAction": f'"{IDAP_NS}#{body.tag.split("}")[-1]}"'})
        except httpx.HTTPError as exc:
            raise DestinationUnavailableError(
                f"IDAP endpoint {self.url} unreachable: {type(exc).__name__}: {exc}") from exc
        if resp.status_code == 401:
            raise RemoteAuthError(f"IDAP endpoint {self.url} refused the credentials (401): "
                                  f"{resp.text.strip()}")
        if resp.status_code not in (200, 500) or "xml" not in resp.headers.get(
                "content-type", ""):
            raise DestinationUnavailableError(
                f"IDAP endpoint {self.url} answered HTTP {resp.status_code}: "
                f"{resp.text.strip()[:300]}")
        root = parse_xml(resp.content)
        header_el = root.find(f"{{{SOAP_NS}}}Header")
        body_el = root.find(f"{{{SOAP_NS}}}Body")
        first = next(iter(body_el), None) if body_el is not None else None
        if first is None:
            raise DestinationUnavailableError(f"IDAP endpoint {self.url}: empty response")
        if first.tag == f"{{{SOAP_NS}}}Fault":
            code = int((first.findtext("faultcode") or "0").strip() or 0)
            text = first.findtext("faultstring") or ""
            side, _, message = text.partition(" error: ")
            raise remote_error(code, side, message or text)
        return Reply(first, list(header_el) if header_el is not None else [],
                     resp.status_code)

    def commit(self) -> Reply:
        """``AQXmlCommit``."""
        return self.post(Element(q("AQXmlCommit")))

    def rollback(self) -> Reply:
        """``AQXmlRollback``."""
        return self.post(Element(q("AQXmlRollback")))

    def close(self) -> None:
        """Close the connection (the server rolls back what was not committed, when idle)."""
        self.http.close()

    def __enter__(self) -> IdapClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
