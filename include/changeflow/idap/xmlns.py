"""Namespaces of IDAP documents and small helpers over ElementTree elements.

>>> SOAP_NS, IDAP_NS
('http://schemas.xmlsoap.org/soap/envelope/', 'http://ns.oracle.com/AQ/schemas/access')
>>> split("{http://ns.oracle.com/AQ/schemas/access}AQXmlSend")
('http://ns.oracle.com/AQ/schemas/access', 'AQXmlSend')
"""

from __future__ import annotations

from collections.abc import Iterator
from xml.etree.ElementTree import Element

from changeflow.idap.errors import InvalidRequestError

SOAP_NS = "http://schemas.xmlsoap.org/soap/envelope/"
IDAP_NS = "http://ns.oracle.com/AQ/schemas/access"
#: changeflow's own SOAP header entries (HTTP propagation), outside the IDAP namespace.
CF_NS = "urn:changeflow:idap:propagation"
XSI_NS = "http://www.w3.org/2001/XMLSchema-instance"


def q(name: str) -> str:
    """A tag in the IDAP namespace."""
    return f"{{{IDAP_NS}}}{name}"


def split(tag: str) -> tuple[str, str]:
    """``{ns}local`` as ``(ns, local)``; an unqualified tag has namespace ``''``."""
    if tag.startswith("{"):
        ns, _, local = tag[1:].partition("}")
        return ns, local
    return "", tag


def local(el: Element) -> str:
    """The element's local name."""
    return split(el.tag)[1]


def where(path: str, el: Element) -> str:
    """A readable position: ``path/local``."""
    return f"{path}/{local(el)}" if path else local(el)


def children(el: Element, path: str) -> Iterator[Element]:
    """The child elements, each in the IDAP namespace or unqualified.

    Raises:
        InvalidRequestError: a child in another namespace (seed 003: requests with
            incorrect namespaces are invalid).
    """
    for child in el:
        if not isinstance(child.tag, str):  # comments, processing instructions
            continue
        ns, name = split(child.tag)
        if ns not in (IDAP_NS, ""):
            raise InvalidRequestError(
                f"element {path}/{name} is in namespace {ns!r}; IDAP elements are in "
                f"{IDAP_NS}")
        yield child


def by_name(el: Element, path: str, allowed: tuple[str, ...]) -> dict[str, Element]:
    """The children by local name; unknown or repeated ones are refused.

    Raises:
        InvalidRequestError: naming the element and what is allowed there.
    """
    out: dict[str, Element] = {}
    for child in children(el, path):
        name = local(child)
        if name not in allowed:
            raise InvalidRequestError(
                f"unknown element {path}/{name}; {path} may hold {', '.join(allowed)}")
        if name in out:
            raise InvalidRequestError(f"element {path}/{name} appears twice")
        out[name] = child
    return out


def text(el: Element | None, *, strip: bool = True) -> str | None:
    """An element's text (``None`` for a missing element or an empty one)."""
    if el is None:
        return None
    if len([c for c in el if isinstance(c.tag, str)]):
        raise InvalidRequestError(f"element {local(el)} must hold text, not elements")
    value = el.text or ""
    value = value.strip() if strip else value
    return value if value else None


def required(found: dict[str, Element], name: str, path: str) -> Element:
    """A required child element.

    Raises:
        InvalidRequestError: ``{path}/{name} is required``.
    """
    el = found.get(name)
    if el is None:
        raise InvalidRequestError(f"element {path}/{name} is required")
    return el


def required_text(found: dict[str, Element], name: str, path: str) -> str:
    """The text of a required element (empty counts as missing)."""
    value = text(required(found, name, path))
    if value is None:
        raise InvalidRequestError(f"element {path}/{name} is required and must not be empty")
    return value


def number(found: dict[str, Element], name: str, path: str, *,
           integer: bool = False) -> float | int | None:
    """An optional numeric element.

    Raises:
        InvalidRequestError: the text is not a number.
    """
    value = text(found.get(name))
    if value is None:
        return None
    try:
        return int(value) if integer else float(value)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise InvalidRequestError(
            f"element {path}/{name} must be {kind}, not {value!r}") from None
