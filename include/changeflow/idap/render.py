"""Writing IDAP responses, notifications and faults as SOAP 1.1 envelopes.

Documents are written in the seed's shape: the envelope declares the SOAP namespace as
the default, and the response element re-declares the IDAP namespace as its default,
so element names carry no prefixes:

>>> print(envelope(response("AQXmlCommitResponse")).decode())
<?xml version="1.0" encoding="UTF-8"?>
<Envelope xmlns="http://schemas.xmlsoap.org/soap/envelope/"><Body><AQXmlCommitResponse xmlns="http://ns.oracle.com/AQ/schemas/access"><status_response><status_code>0</status_code></status_response></AQXmlCommitResponse></Body></Envelope>

A Fault's ``faultcode``, ``faultstring`` and ``detail`` are unqualified, as SOAP 1.1
wants, so the Fault envelope writes the SOAP namespace with a prefix (no default
namespace is in scope of those three); ``detail`` holds the IDAP ``status_response``
(``status_code`` -1, ``error_code``, ``error_message``):

>>> from changeflow.idap.errors import Fault
>>> doc = fault(Fault(24010, "Client", "queue 'a.b' does not exist")).decode()
>>> "<SOAP-ENV:Fault><faultcode>24010</faultcode><faultstring>Client error: queue" in doc
True
>>> "<error_code>24010</error_code>" in doc
True
"""

from __future__ import annotations

from xml.etree.ElementTree import Element, SubElement
from xml.sax.saxutils import escape, quoteattr

from changeflow.idap.errors import Fault
from changeflow.idap.xmlns import SOAP_NS, q, split


def _serialize(el: Element, parent_ns: str, out: list[str], prefixed: str = "") -> None:
    ns, name = split(el.tag)
    default = parent_ns
    if prefixed and ns == SOAP_NS:
        out.append(f"<{prefixed}:{name}")
        if not parent_ns and out[0] == _DECL and len(out) == 2:
            out.append(f" xmlns:{prefixed}={quoteattr(SOAP_NS)}")
        name = f"{prefixed}:{name}"
    else:
        out.append(f"<{name}")
        if ns != parent_ns:
            out.append(f" xmlns={quoteattr(ns)}")
        default = ns
    for key, value in el.attrib.items():
        kns, kname = split(key)
        if kns:  # attributes of other namespaces are not used by IDAP documents
            continue
        out.append(f" {kname}={quoteattr(value)}")
    if el.text is None and len(el) == 0:
        out.append("/>")
        return
    out.append(">")
    if el.text:
        out.append(escape(el.text))
    for child in el:
        _serialize(child, default, out, prefixed)
    out.append(f"</{name}>")


_DECL = '<?xml version="1.0" encoding="UTF-8"?>\n'


def to_bytes(root: Element, *, prefixed: str = "") -> bytes:
    """An element tree as an XML document: default namespaces, no prefixes, or the SOAP
    namespace with the prefix ``prefixed`` (what SOAP clients such as zeep read faults in).
    """
    out = [_DECL]
    _serialize(root, "", out, prefixed)
    return "".join(out).encode("utf-8")


def envelope(*body: Element, header: Element | None = None) -> bytes:
    """``<Envelope>[<Header>..</Header>]<Body>...</Body></Envelope>`` around the elements."""
    env = Element(f"{{{SOAP_NS}}}Envelope")
    if header is not None:
        SubElement(env, f"{{{SOAP_NS}}}Header").append(header)
    b = SubElement(env, f"{{{SOAP_NS}}}Body")
    for el in body:
        b.append(el)
    return to_bytes(env)


def status_response(parent: Element, code: int = 0, error_code: int | None = None,
                    error_message: str | None = None) -> Element:
    """``status_response``: ``status_code`` 0 (success) or -1, and the error when failed."""
    sr = SubElement(parent, q("status_response"))
    SubElement(sr, q("status_code")).text = str(code)
    if error_code is not None:
        SubElement(sr, q("error_code")).text = str(error_code)
    if error_message is not None:
        SubElement(sr, q("error_message")).text = error_message
    return sr


def response(name: str) -> Element:
    """A ``*Response`` element with a successful ``status_response``."""
    el = Element(q(name))
    status_response(el)
    return el


def result(parent: Element, tag: str, destination: str, message_ids: list[str]) -> None:
    """``send_result``/``publish_result``: the destination and each ``message_id``."""
    r = SubElement(parent, q(tag))
    SubElement(r, q("destination")).text = destination
    for mid in message_ids:
        SubElement(r, q("message_id")).text = mid


def fault(f: Fault) -> bytes:
    """A SOAP Fault envelope for an error (see the module docstring)."""
    el = Element(f"{{{SOAP_NS}}}Fault")
    SubElement(el, "faultcode").text = str(f.code)
    SubElement(el, "faultstring").text = f.faultstring
    detail = SubElement(el, "detail")
    status_response(detail, -1, f.code, f.message)
    env = Element(f"{{{SOAP_NS}}}Envelope")
    SubElement(env, f"{{{SOAP_NS}}}Body").append(el)
    return to_bytes(env, prefixed="SOAP-ENV")
