"""``message_set``, ``message`` and ``message_header``: parsing them, and writing them back.

A ``message_header`` (seed 003) holds ``sender_id`` (required when a header is given:
``agent_name``, ``address``, ``protocol``), and optionally ``message_id``,
``correlation``, ``delay``, ``expiration``, ``priority``, ``recipient_list`` of
``recipient``, ``message_state`` (filled in at dequeue) and ``exception_queue``. A
``message_id`` given at enqueue is the producer's stable id: sending it again is
recognised and does nothing (how HTTP propagation is exactly once).
"""

from __future__ import annotations

from typing import Any
from xml.etree.ElementTree import Element, SubElement

from changeflow.idap import model as M
from changeflow.idap.agents import agent
from changeflow.idap.errors import InvalidRequestError
from changeflow.idap.xmlns import by_name, children, local, number, q, required, text
from changeflow.messaging.model import Message

_HEADER = ("sender_id", "message_id", "correlation", "delay", "expiration", "priority",
           "recipient_list", "message_state", "exception_queue", "delivery_count")


def parse_message_set(el: Element, path: str) -> tuple[M.OutMessage, ...]:
    """The messages of a send or publish (at least one).

    Raises:
        InvalidRequestError: no message, a ``message_count`` that does not match, a
            missing ``message_payload``, a bad header.
    """
    count_el = None
    msgs: list[M.OutMessage] = []
    for child in children(el, path):
        name = local(child)
        if name == "message_count":
            count_el = child
        elif name == "message":
            msgs.append(_message(child, f"{path}/message[{len(msgs) + 1}]", len(msgs) + 1))
        else:
            raise InvalidRequestError(f"unknown element {path}/{name}; a message_set holds "
                                      "message_count and message elements")
    if not msgs:
        raise InvalidRequestError(f"{path} holds no message; at least one is required")
    if count_el is not None:
        found = number({"message_count": count_el}, "message_count", path, integer=True)
        if found != len(msgs):
            raise InvalidRequestError(
                f"{path}/message_count says {found}, but the set holds {len(msgs)} messages")
    return tuple(msgs)


def _message(el: Element, path: str, position: int) -> M.OutMessage:
    found = by_name(el, path, ("message_number", "message_header", "message_payload"))
    num = number(found, "message_number", path, integer=True)
    props = _header(found["message_header"], f"{path}/message_header") \
        if "message_header" in found else {}
    payload_el = required(found, "message_payload", path)
    inner = list(children(payload_el, f"{path}/message_payload"))
    if len(inner) != 1:
        raise InvalidRequestError(
            f"{path}/message_payload must hold one element (raw, a typed object or a "
            f"jms_*_message), not {len(inner)}")
    return M.OutMessage(int(num) if num is not None else position, props, inner[0])


def _header(el: Element, path: str) -> dict[str, Any]:
    found = by_name(el, path, _HEADER)
    if "sender_id" not in found:
        raise InvalidRequestError(f"{path}/sender_id is required: a message_header must "
                                  "contain a sender_id (seed 003)")
    props: dict[str, Any] = {
        "sender": agent(found["sender_id"], f"{path}/sender_id", address_is_queue=False)}
    for key, prop in (("message_id", "msg_id"), ("correlation", "correlation"),
                      ("exception_queue", "exception_queue")):
        if (value := text(found.get(key))) is not None:
            props[prop] = value
    for key in ("delay", "expiration"):
        if (seconds := number(found, key, path)) is not None:
            props[key] = seconds
    if (prio := number(found, "priority", path, integer=True)) is not None:
        props["priority"] = prio
    if "recipient_list" in found:
        rl_path = f"{path}/recipient_list"
        recips = []
        for i, r in enumerate(children(found["recipient_list"], rl_path), 1):
            if local(r) != "recipient":
                raise InvalidRequestError(f"unknown element {rl_path}/{local(r)}; a "
                                          "recipient_list holds recipient elements")
            recips.append(agent(r, f"{rl_path}/recipient[{i}]", address_is_queue=True))
        if not recips:
            raise InvalidRequestError(f"{rl_path} is empty")
        props["recipients"] = recips
    return props


# -- writing -------------------------------------------------------------------------------
def _add(parent: Element, name: str, value: Any) -> Element:
    el = SubElement(parent, q(name))
    if value is not None:
        el.text = str(value)
    return el


def _agent_el(parent: Element, name: str, agent: Any) -> None:
    el = SubElement(parent, q(name))
    if agent.name:
        _add(el, "agent_name", agent.name)
    if agent.address:
        _add(el, "address", agent.address)
    _add(el, "protocol", agent.protocol)


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def header_element(parent: Element, m: Message) -> Element:
    """A dequeued message's ``message_header`` (its properties and state)."""
    h = SubElement(parent, q("message_header"))
    _add(h, "message_id", m.msg_id)
    if m.correlation is not None:
        _add(h, "correlation", m.correlation)
    _add(h, "delay", _seconds(m.delay))
    if m.expiration is not None:
        _add(h, "expiration", _seconds(m.expiration))
    _add(h, "priority", m.priority)
    if m.sender is not None:
        _agent_el(h, "sender_id", m.sender)
    if m.recipients:
        rl = SubElement(h, q("recipient_list"))
        for r in m.recipients:
            _agent_el(rl, "recipient", r)
    _add(h, "delivery_count", m.attempts)
    _add(h, "message_state", m.state.code)
    if m.exception_queue:
        _add(h, "exception_queue", m.exception_queue)
    return h


def message_set_element(parent: Element, msgs: list[Message], *,
                        payloads: bool = True) -> Element:
    """A ``message_set``: ``message_count``, then each ``message`` (header, payload)."""
    from changeflow.idap.payloads import payload_element

    ms = SubElement(parent, q("message_set"))
    _add(ms, "message_count", len(msgs))
    for i, m in enumerate(msgs, 1):
        me = SubElement(ms, q("message"))
        _add(me, "message_number", i)
        header_element(me, m)
        if payloads and m.payload is not None:
            payload_element(SubElement(me, q("message_payload")), m)
    return ms
