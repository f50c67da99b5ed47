"""Parsing IDAP requests: the seed's element names, namespaces and defaults."""

from __future__ import annotations

import pytest

from changeflow.idap import model as M
from changeflow.idap.errors import InvalidRequestError, XmlParseError
from changeflow.idap.parse import parse_envelope

SOAP = "http://schemas.xmlsoap.org/soap/envelope/"
IDAP = "http://ns.oracle.com/AQ/schemas/access"


def doc(body: str) -> bytes:
    return f'<Envelope xmlns="{SOAP}"><Body>{body}</Body></Envelope>'.encode()


SEND = f"""<AQXmlSend xmlns="{IDAP}"><producer_options><destination>aqxmladmn.book_q1
</destination></producer_options><message_set><message_count>1</message_count><message>
<message_number>1</message_number><message_header><correlation>PROGRAMMING</correlation>
<delay>0</delay><expiration>60</expiration><priority>-2</priority><message_id>m-1</message_id>
<exception_queue>aqxmladmn.exq</exception_queue><sender_id><agent_name>AGENT01</agent_name>
<address>home</address><protocol>0</protocol></sender_id><recipient_list><recipient>
<agent_name>R1</agent_name><address>ws.q@db2</address></recipient></recipient_list>
</message_header><message_payload><BOOK_TYP><TITLE>XML</TITLE></BOOK_TYP></message_payload>
</message></message_set><AQXmlCommit></AQXmlCommit></AQXmlSend>"""


def test_send_with_every_header_element() -> None:
    env = parse_envelope(doc(SEND))
    req = env.request
    assert isinstance(req, M.Enqueue) and env.op == "AQXmlSend"
    assert req.destination == M.Destination("aqxmladmn.book_q1", "DATABASE")
    assert (req.visibility, req.transformation, req.commit) == ("ON_COMMIT", None, True)
    [m] = req.messages
    assert m.number == 1
    assert m.properties == {"sender": "AGENT01", "msg_id": "m-1", "correlation": "PROGRAMMING",
                            "exception_queue": "aqxmladmn.exq", "delay": 0.0,
                            "expiration": 60.0, "priority": -2, "recipients": ["R1@ws.q@db2"]}
    assert m.payload.tag == f"{{{IDAP}}}BOOK_TYP"


def test_receive_defaults_are_the_seeds() -> None:
    req = parse_envelope(doc(f'<AQXmlReceive xmlns="{IDAP}"><consumer_options><destination>a.q'
                             "</destination></consumer_options></AQXmlReceive>")).request
    assert isinstance(req, M.Receive)
    assert (req.consumer_name, req.wait_time, req.visibility, req.dequeue_mode,
            req.navigation_mode, req.batch_size, req.commit, req.selector) == \
        (None, None, "ON_COMMIT", "REMOVE", "NEXT_MESSAGE", 1, False, {})


def test_register_and_unqualified_children() -> None:
    req = parse_envelope(doc(f'<a:AQXmlRegister xmlns:a="{IDAP}"><register_options xmlns="">'
                             "<destination>a.q</destination><consumer_name>C</consumer_name>"
                             "<notify_url>mailto:x@y</notify_url></register_options>"
                             "</a:AQXmlRegister>")).request
    assert req == M.Register(M.Destination("a.q"), "mailto:x@y", "C")


@pytest.mark.parametrize(("body", "error", "text"), [
    ("<AQXmlSend", XmlParseError, "not well-formed"),
    (f'<AQXmlSend xmlns="{IDAP}"><producer_options><destination>a.q</destination>'
     "</producer_options><message_set><message><message_header><correlation>x</correlation>"
     "</message_header><message_payload><raw>01</raw></message_payload></message>"
     "</message_set></AQXmlSend>", InvalidRequestError, "sender_id is required"),
    (f'<AQXmlSend xmlns="{IDAP}"><producer_options><destination>a.q</destination>'
     "</producer_options><message_set><message_count>2</message_count><message>"
     "<message_payload><raw>01</raw></message_payload></message></message_set></AQXmlSend>",
     InvalidRequestError, "message_count says 2, but the set holds 1"),
    (f'<AQXmlReceive xmlns="{IDAP}"><consumer_options><destination lookup_type="LDAP">a.q'
     "</destination></consumer_options></AQXmlReceive>", InvalidRequestError, "LDAP"),
    (f'<AQXmlReceive xmlns="{IDAP}"><consumer_options><destination>a.q</destination>'
     "<colour>red</colour></consumer_options></AQXmlReceive>", InvalidRequestError,
     "unknown element AQXmlReceive/consumer_options/colour"),
    (f'<AQXmlCommit xmlns="{IDAP}"><x/></AQXmlCommit>', InvalidRequestError,
     "AQXmlCommit is an empty element"),
    (f'<AQXmlReceive xmlns="{IDAP}"><consumer_options xmlns="urn:other"><destination>a.q'
     "</destination></consumer_options></AQXmlReceive>", InvalidRequestError,
     "is in namespace 'urn:other'"),
])
def test_invalid_requests_name_the_problem(body: str, error: type, text: str) -> None:
    with pytest.raises(error, match=text):
        parse_envelope(doc(body))


def test_a_dtd_is_refused_before_expansion() -> None:
    bomb = ('<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;">]>'
            f'<Envelope xmlns="{SOAP}"><Body><AQXmlCommit xmlns="{IDAP}">&b;</AQXmlCommit>'
            "</Body></Envelope>").encode()
    with pytest.raises(XmlParseError, match="declares a DTD or entities"):
        parse_envelope(bomb)
