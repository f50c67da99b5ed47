"""The IDAP service over real HTTP: operations, payloads, sessions and transactions, security."""

from __future__ import annotations

import decimal
import time
from collections.abc import Iterator
from xml.etree.ElementTree import fromstring

import httpx
import pytest

from changeflow.idap.server import Running
from changeflow.messaging import admin, connect
from changeflow.state import StateStore

from .conftest import (
    COMMIT,
    IDAP,
    ROLLBACK,
    client,
    envelope,
    fault,
    idap_config,
    make_queue,
    post,
    receive,
    running,
    send,
    texts,
)


@pytest.fixture(scope="module")
def server(store: StateStore) -> Iterator[Running]:
    make_queue(store, "app.raw_q")
    make_queue(store, "app.txn_q")
    make_queue(store, "app.imm_q")
    make_queue(store, "app.sel_q")
    make_queue(store, "app.topic", multi=True)
    admin.add_subscriber(store, "app.topic", "shipping")
    admin.add_subscriber(store, "app.topic", "billing")
    admin.create_type(store, "oe.order_t", {"id": "INTEGER", "region": "VARCHAR2(10)",
                                            "amount": "NUMBER", "placed": "DATE"})
    make_queue(store, "oe.orders", "oe.order_t")
    for kind in ("TEXT", "MAP", "BYTES", "OBJECT"):
        make_queue(store, f"app.jms_{kind.lower()}", f"SYS.AQ$_JMS_{kind}_MESSAGE")
    make_queue(store, "hr.secure_q", secure=True)
    admin.grant_queue_privilege(store, "ALL", "hr.secure_q", "aqxmluser")
    with running(store, idap_config()) as r:
        yield r


def test_send_with_piggyback_commit_then_receive(server: Running) -> None:
    with client(server) as a, client(server) as b:
        r = post(a, send("app.raw_q", "<raw>023f4523</raw>", commit=True,
                         header="<correlation>XML_RAW</correlation><priority>3</priority>"
                                "<sender_id><agent_name>john</agent_name></sender_id>"))
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/xml")
        root = fromstring(r.content)
        resp = root.find(f"{{http://schemas.xmlsoap.org/soap/envelope/}}Body/"
                         f"{{{IDAP}}}AQXmlSendResponse")
        assert resp is not None
        assert texts(r, "status_code") == ["0"]
        assert texts(r, "destination") == ["app.raw_q"]
        [mid] = texts(r, "message_id")
        got = post(b, receive("app.raw_q", commit=True))
        assert texts(got, "message_id") == [mid]
        assert texts(got, "raw") == ["023f4523"]
        assert texts(got, "correlation") == ["XML_RAW"]
        assert texts(got, "priority") == ["3"]
        assert texts(got, "message_state") == ["0"]
        assert texts(got, "agent_name") == ["JOHN"]
        assert texts(post(b, receive("app.raw_q")), "message_count") == ["0"]


def test_a_transaction_spans_requests_and_shows_only_after_commit(server: Running) -> None:
    with client(server) as a, client(server) as b:
        first = post(a, send("app.txn_q", "<raw>01</raw>"))
        cookie = a.cookies.get("JSESSIONID")
        assert cookie and "HttpOnly" in first.headers["set-cookie"]
        post(a, send("app.txn_q", "<raw>02</raw>"))
        assert a.cookies.get("JSESSIONID") == cookie  # the same session, the same transaction
        assert texts(post(b, receive("app.txn_q")), "message_count") == ["0"]
        assert texts(post(a, COMMIT), "status_code") == ["0"]
        got = post(b, receive("app.txn_q", extra="<batch_size>5</batch_size>", commit=True))
        assert texts(got, "raw") == ["01", "02"]


def test_rollback_returns_dequeued_messages_and_drops_enqueues(server: Running) -> None:
    s = connect(server.app.service.store)
    s.enqueue("app.txn_q", b"\x0a", commit=True)
    with client(server) as a, client(server) as b:
        assert texts(post(a, receive("app.txn_q")), "raw") == ["0a"]
        post(a, send("app.txn_q", "<raw>0b</raw>"))
        assert texts(post(b, receive("app.txn_q")), "message_count") == ["0"]  # locked by a
        assert texts(post(a, ROLLBACK), "status_code") == ["0"]
        got = post(b, receive("app.txn_q", commit=True, extra="<batch_size>5</batch_size>"))
        assert texts(got, "raw") == ["0a"]  # back, and the enqueue vanished
        assert texts(got, "delivery_count") == ["1"]


def test_immediate_visibility_is_not_rolled_back(server: Running) -> None:
    with client(server) as a, client(server) as b:
        post(a, send("app.imm_q", "<raw>aa</raw>", visibility="IMMEDIATE"))
        post(a, send("app.imm_q", "<raw>bb</raw>"))
        post(a, ROLLBACK)
        got = post(b, receive("app.imm_q", commit=True, extra="<batch_size>5</batch_size>"))
        assert texts(got, "raw") == ["aa"]


def test_object_type_payload_keeps_field_types(server: Running) -> None:
    order = ("<ORDER_T><ID>7</ID><REGION>WEST</REGION><AMOUNT>12.50</AMOUNT>"
             "<PLACED>2024-02-01</PLACED></ORDER_T>")
    with client(server) as a:
        assert post(a, send("oe.orders", order, commit=True)).status_code == 200
        bad = post(a, send("oe.orders", "<ORDER_T><ID>x</ID></ORDER_T>", commit=True))
        code, string, message = fault(bad)
        assert string.startswith("Client error:") and "field id" in message and "'x'" in message
        wrong = post(a, send("oe.orders", "<BOOK_T><ID>1</ID></BOOK_T>", commit=True))
        assert "write <ORDER_T>" in fault(wrong)[2]
    m = connect(server.app.service.store).dequeue("oe.orders", wait=0)
    assert m is not None
    assert m.payload == {"id": 7, "region": "WEST", "amount": decimal.Decimal("12.50"),
                         "placed": __import__("datetime").date(2024, 2, 1)}
    assert connect(server.app.service.store).dequeue("oe.orders", wait=0) is None


def test_object_payload_comes_back_as_elements(server: Running) -> None:
    connect(server.app.service.store).enqueue(
        "oe.orders", {"id": 8, "region": "EAST", "amount": "3.25", "placed": None},
        commit=True)
    with client(server) as b:
        got = post(b, receive("oe.orders", commit=True))
        assert texts(got, "id") == ["8"] and texts(got, "amount") == ["3.25"]
        assert texts(got, "placed") == [""]  # an empty element is NULL
        root = fromstring(got.content)
        assert root.find(f".//{{{IDAP}}}message_payload/{{{IDAP}}}ORDER_T") is not None


JMS_TEXT = ("<jms_text_message><oracle_jms_properties><userid>jmsuser</userid>"
            "<appid>AQProduct</appid></oracle_jms_properties><user_properties>"
            "<property><name>Country</name><string_value>USA</string_value></property>"
            "<property><name>Zip</name><int_value>94065</int_value></property>"
            "</user_properties><text_data>All things bright</text_data></jms_text_message>")
JMS_MAP = ("<jms_map_message><map_data><item><name>make</name><string_value>Toyota"
           "</string_value></item><item><name>Price</name><int_value>20000</int_value></item>"
           "<item><name>used</name><boolean_value>true</boolean_value></item></map_data>"
           "</jms_map_message>")


def test_jms_text_map_bytes_object(server: Running) -> None:
    from changeflow.messaging.payloads import JmsBytes, JmsMap, JmsObject, JmsText

    store = server.app.service.store
    with client(server) as a:
        for q, body in (("app.jms_text", JMS_TEXT), ("app.jms_map", JMS_MAP),
                        ("app.jms_bytes", "<jms_bytes_message><bytes_data>cafe</bytes_data>"
                                          "</jms_bytes_message>"),
                        ("app.jms_object", "<jms_object_message><ser_object_data>aced0005"
                                           "</ser_object_data></jms_object_message>")):
            assert post(a, send(q, body, commit=True)).status_code == 200, q
        wrong = post(a, send("app.jms_text", JMS_MAP, commit=True))
        assert "takes <jms_text_message>" in fault(wrong)[2]
    s = connect(store)
    text = s.dequeue("app.jms_text", wait=0)
    assert isinstance(text.payload, JmsText) and text.payload.text == "All things bright"
    assert text.payload.properties == {"JMSXUserID": "jmsuser", "JMSXAppID": "AQProduct",
                                       "Country": "USA", "Zip": 94065}
    assert s.dequeue("app.jms_map", wait=0).payload == JmsMap(
        {"make": "Toyota", "Price": 20000, "used": True}, {})
    assert s.dequeue("app.jms_bytes", wait=0).payload == JmsBytes(b"\xca\xfe", {})
    assert s.dequeue("app.jms_object", wait=0).payload == JmsObject(b"\xac\xed\x00\x05", None, {})
    s.commit()
    s.enqueue("app.jms_text", JmsText("back", {"JMSXUserID": "u1", "n": 2}), commit=True)
    with client(server) as b:
        got = post(b, receive("app.jms_text", commit=True))
        assert texts(got, "text_data") == ["back"] and texts(got, "userid") == ["u1"]
        assert texts(got, "int_value") == ["2"]


def test_publish_to_a_topic_with_recipients_and_consumers(server: Running) -> None:
    with client(server) as a:
        hdr = ("<sender_id><agent_name>john</agent_name></sender_id><recipient_list><recipient>"
               "<agent_name>billing</agent_name></recipient></recipient_list>")
        assert post(a, send("app.topic", "<raw>b1</raw>", op="AQXmlPublish", header=hdr,
                            commit=True)).status_code == 200
        assert post(a, send("app.topic", "<raw>a1</raw>", op="AQXmlPublish",
                            commit=True)).status_code == 200
        wrong = post(a, send("app.topic", "<raw>00</raw>", commit=True))
        assert "publish to it with AQXmlPublish" in fault(wrong)[2]
        missing = post(a, receive("app.topic"))
        assert "consumer_name is required" in fault(missing)[2]
        batch = "<batch_size>10</batch_size>"
        got = post(a, receive("app.topic", consumer="billing", extra=batch, commit=True))
        assert texts(got, "raw") == ["b1", "a1"]
        got = post(a, receive("app.topic", consumer="shipping", extra=batch, commit=True))
        assert texts(got, "raw") == ["a1"]


def test_selectors_browse_and_navigation(server: Running) -> None:
    s = connect(server.app.service.store)
    for i, corr in enumerate(["job-1", "other", "job-2"]):
        s.enqueue("app.sel_q", bytes([i]), correlation=corr, priority=i)
    s.commit()
    with client(server) as a:
        sel = ("<selector><correlation>job-%</correlation></selector><dequeue_mode>BROWSE"
               "</dequeue_mode><batch_size>10</batch_size>")
        assert texts(post(a, receive("app.sel_q", extra=sel)), "correlation") == ["job-1",
                                                                                  "job-2"]
        cond = "<selector><condition>priority = 1</condition></selector>"
        got = post(a, receive("app.sel_q", extra=cond, commit=True))
        assert texts(got, "correlation") == ["other"]
        nav = "<navigation_mode>FIRST_MESSAGE</navigation_mode><batch_size>10</batch_size>"
        assert texts(post(a, receive("app.sel_q", extra=nav, commit=True)), "raw") == ["00",
                                                                                      "02"]
        bad = post(a, receive("app.sel_q", extra="<dequeue_mode>STEAL</dequeue_mode>"))
        assert "unknown dequeue mode 'STEAL'" in fault(bad)[2]


def test_authentication_and_secure_queue_users(server: Running) -> None:
    store = server.app.service.store
    doc = send("hr.secure_q", "<raw>5e</raw>", commit=True)
    anonymous = httpx.post(server.url, content=doc, headers={"Content-Type": "text/xml"})
    assert anonymous.status_code == 401 and "authentication required" in anonymous.text
    assert anonymous.headers["www-authenticate"].startswith("Basic")
    with client(server, "john", "wrong") as bad:
        assert post(bad, doc).status_code == 401
    with client(server, "eve", "eve-pw") as eve:
        code, _, message = fault(post(eve, doc))
        assert code == "1031" and "agent eve may not enqueue on secure queue hr.secure_q" \
            in message.lower().replace("agent eve", "agent eve")
    # john acts as aqxmluser (its configured database user), who was granted the queue
    with client(server) as john:
        ok = post(john, send("hr.secure_q", "<raw>5e</raw>", commit=True,
                             header="<sender_id><agent_name>aqxmluser</agent_name></sender_id>"))
        assert ok.status_code == 200, ok.text
    # enable_db_access maps eve to a user with the privilege
    admin.enable_db_access(store, "eve", "clerk")
    admin.grant_queue_privilege(store, "DEQUEUE", "hr.secure_q", "clerk")
    with client(server, "eve", "eve-pw") as eve:
        got = post(eve, receive("hr.secure_q", commit=True))
        assert texts(got, "raw") == ["5e"]


def test_the_wsdl_is_served(server: Running) -> None:
    wsdl = httpx.get(server.url + "?wsdl")
    assert wsdl.status_code == 200
    root = fromstring(wsdl.content)
    ops = {o.get("name") for o in root.iter("{http://schemas.xmlsoap.org/wsdl/}operation")}
    assert ops == {"AQXmlSend", "AQXmlPublish", "AQXmlReceive", "AQXmlRegister", "AQXmlCommit",
                   "AQXmlRollback"}
    address = root.find(".//{http://schemas.xmlsoap.org/wsdl/soap/}address")
    assert address is not None and address.get("location") == server.url


def test_receive_waits_for_a_message(server: Running) -> None:
    import threading

    def later() -> None:
        time.sleep(0.5)
        connect(server.app.service.store).enqueue("app.raw_q", b"\x77", commit=True)

    threading.Thread(target=later).start()
    with client(server) as a:
        started = time.monotonic()
        got = post(a, receive("app.raw_q", wait=10, commit=True))
        assert texts(got, "raw") == ["77"] and time.monotonic() - started < 5


def test_commit_and_rollback_documents_of_the_seed(server: Running) -> None:
    commit = (b'<?xml version="1.0"?>\n<Envelope xmlns="http://schemas.xmlsoap.org/soap/envelope/'
              b'">\n   <Body>\n      <AQXmlCommit xmlns="http://ns.oracle.com/AQ/schemas/access"/'
              b'>\n   </Body>\n</Envelope>\n')
    rollback = commit.replace(b"AQXmlCommit", b"AQXmlRollback")
    with client(server) as a:
        r = post(a, commit)
        assert r.status_code == 200
        env = fromstring(r.content)
        assert env.tag == "{http://schemas.xmlsoap.org/soap/envelope/}Envelope"
        body = env.find("{http://schemas.xmlsoap.org/soap/envelope/}Body")
        [resp] = list(body)
        assert resp.tag == f"{{{IDAP}}}AQXmlCommitResponse"
        [status] = list(resp)
        assert status.tag == f"{{{IDAP}}}status_response"
        assert [(c.tag, c.text) for c in status] == [(f"{{{IDAP}}}status_code", "0")]
        r = post(a, rollback)
        assert fromstring(r.content).find(f".//{{{IDAP}}}AQXmlRollbackResponse") is not None


def test_envelope_helper_is_a_seed_shaped_document() -> None:
    assert envelope("<x/>").startswith(b'<?xml version="1.0"?>')


def test_queue_changes_made_by_another_process_are_seen_at_once(
        server: Running, monkeypatch: pytest.MonkeyPatch) -> None:
    """The service caches queue properties and agents' users per dictionary version: an
    administrative call in another process (which raises the version) is seen by the very
    next request, not after the cache's age limit (made an hour here)."""
    import subprocess
    import sys

    from changeflow.messaging import cache

    monkeypatch.setattr(cache, "MAX_AGE", 3600.0)

    url = server.app.service.store.url
    make_queue(server.app.service.store, "app.morph_q")
    with client(server) as john:
        ok = post(john, send("app.morph_q", "<raw>01</raw>", commit=True))
        assert ok.status_code == 200, ok.text
        assert texts(post(john, receive("app.morph_q", commit=True)), "raw") == ["01"]
        script = (
            "import sys\n"
            "from changeflow.messaging import admin\n"
            "from changeflow.state import StateStore\n"
            "s = StateStore(sys.argv[1])\n"
            "admin.drop_queue(s, 'app.morph_q')\n"
            "admin.drop_queue_table(s, 'app.morph_q_qt')\n"
            "admin.create_queue_table(s, 'app.morph_q_qt', 'RAW', multiple_consumers=True)\n"
            "admin.create_queue(s, 'app.morph_q', 'app.morph_q_qt', start=True)\n")
        done = subprocess.run([sys.executable, "-c", script, url], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        code, _, message = fault(post(john, send("app.morph_q", "<raw>02</raw>", commit=True)))
        assert "multiple consumers" in message, (code, message)
