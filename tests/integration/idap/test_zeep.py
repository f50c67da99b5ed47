"""Interoperability: zeep, a generic SOAP client, built from the served WSDL."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
import zeep
from lxml import etree
from zeep.plugins import HistoryPlugin
from zeep.transports import Transport

from changeflow.idap.server import Running
from changeflow.state import StateStore

from .conftest import IDAP, SOAP, idap_config, make_queue, running


@pytest.fixture(scope="module")
def server(store: StateStore) -> Iterator[Running]:
    make_queue(store, "app.q")
    make_queue(store, "app.text", "SYS.AQ$_JMS_TEXT_MESSAGE")
    make_queue(store, "app.topic", multi=True)
    from changeflow.messaging import admin

    admin.add_subscriber(store, "app.topic", "shipping")
    with running(store, idap_config()) as r:
        yield r


def soap_client(server: Running, history: HistoryPlugin | None = None) -> Any:
    session = requests.Session()
    session.auth = ("john", "welcome")
    return zeep.Client(server.url + "?wsdl", transport=Transport(session=session),
                       plugins=[history] if history else [])


def message(payload: dict[str, Any], **header: Any) -> dict[str, Any]:
    return {"message_header": {"sender_id": {"agent_name": "john"}, **header},
            "message_payload": payload}


def test_send_and_receive_with_zeep_and_the_documents_it_sends(server: Running) -> None:
    history = HistoryPlugin()
    c = soap_client(server, history)
    res = c.service.AQXmlSend(
        producer_options={"destination": "app.q"},
        message_set={"message_count": 1, "message": [message({"raw": "0a0b"},
                                                             correlation="z-1")]},
        AQXmlCommit={})
    assert res.status_response.status_code == 0
    assert res.send_result.destination == "app.q" and len(res.send_result.message_id) == 1
    sent = history.last_sent["envelope"]
    assert sent.tag == f"{{{SOAP}}}Envelope"
    op = sent.find(f"{{{SOAP}}}Body")[0]
    assert op.tag == f"{{{IDAP}}}AQXmlSend"
    assert op.find(f"{{{IDAP}}}producer_options/{{{IDAP}}}destination").text == "app.q"
    out = c.service.AQXmlReceive(consumer_options={"destination": "app.q", "wait_time": 0},
                                 AQXmlCommit={})
    assert out.status_response.status_code == 0
    [m] = out.receive_result.message_set.message
    assert m.message_payload.raw == "0a0b"
    assert m.message_header.correlation == "z-1"
    assert m.message_header.message_id == res.send_result.message_id[0]
    assert m.message_header.message_state == 0 and m.message_header.priority == 1
    received = history.last_received["envelope"]
    assert etree.QName(received.find(f"{{{SOAP}}}Body")[0]).localname == "AQXmlReceiveResponse"


def test_jms_text_and_publish_with_zeep(server: Running) -> None:
    c = soap_client(server)
    text = {"jms_text_message": {"user_properties": {"property": [
        {"name": "Country", "string_value": "USA"}]}, "text_data": "hello zeep"}}
    c.service.AQXmlSend(producer_options={"destination": "app.text"},
                        message_set={"message": [message(text)]}, AQXmlCommit={})
    out = c.service.AQXmlReceive(consumer_options={"destination": "app.text",
                                                   "wait_time": 0}, AQXmlCommit={})
    [m] = out.receive_result.message_set.message
    jms = m.message_payload.jms_text_message
    assert jms.text_data == "hello zeep"
    assert [(p.name, p.string_value) for p in jms.user_properties.property] == [("Country",
                                                                                  "USA")]
    res = c.service.AQXmlPublish(producer_options={"destination": "app.topic"},
                                 message_set={"message": [message({"raw": "01"})]},
                                 AQXmlCommit={})
    assert res.publish_result.destination == "app.topic"
    out = c.service.AQXmlReceive(consumer_options={"destination": "app.topic",
                                                   "consumer_name": "shipping",
                                                   "wait_time": 0}, AQXmlCommit={})
    assert [x.message_payload.raw for x in out.receive_result.message_set.message] == ["01"]


def test_a_zeep_session_keeps_its_transaction_until_commit(server: Running) -> None:
    a, b = soap_client(server), soap_client(server)
    a.service.AQXmlSend(producer_options={"destination": "app.q"},
                        message_set={"message": [message({"raw": "ff"})]})
    empty = b.service.AQXmlReceive(consumer_options={"destination": "app.q", "wait_time": 0})
    assert empty.receive_result.message_set.message_count == 0
    assert a.service.AQXmlCommit().status_code == 0
    got = b.service.AQXmlReceive(consumer_options={"destination": "app.q", "wait_time": 0},
                                 AQXmlCommit={})
    assert [x.message_payload.raw for x in got.receive_result.message_set.message] == ["ff"]
    assert b.service.AQXmlRollback().status_code == 0


def test_a_fault_reaches_zeep_with_code_string_and_detail(server: Running) -> None:
    c = soap_client(server)
    with pytest.raises(zeep.exceptions.Fault) as err:
        c.service.AQXmlSend(producer_options={"destination": "app.nope"},
                            message_set={"message": [message({"raw": "01"})]})
    assert err.value.code == "24010"
    assert err.value.message == "Client error: queue 'app.nope' does not exist"
    detail = err.value.detail
    assert detail.findtext(f"{{{IDAP}}}status_response/{{{IDAP}}}status_code") == "-1"
    assert detail.findtext(f"{{{IDAP}}}status_response/{{{IDAP}}}error_code") == "24010"
