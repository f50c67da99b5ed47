"""The WSDL 1.1 document describing the IDAP operations (served at ``GET {path}?wsdl``).

Document/literal over SOAP 1.1 and HTTP: one operation per request element of seed
003, whose input is the request element and whose output is its ``*Response``. The
schema's target namespace is the IDAP namespace with qualified elements, so a generic
SOAP client (zeep, SoapUI, .NET, JAX-WS) sends exactly the documents the service
reads. The ``soapAction`` of an operation is ``http://ns.oracle.com/AQ/schemas/access#
AQXmlSend`` and so on (the seed's ``SOAPMethodName``).

>>> b"AQXmlReceiveResponse" in wsdl_document("http://127.0.0.1:8042/aq")
True
"""

from __future__ import annotations

from xml.sax.saxutils import quoteattr

from changeflow.idap.model import OPERATIONS, RESPONSES
from changeflow.idap.xmlns import IDAP_NS

_SCHEMA = """
  <xsd:complexType name="destination_t">
   <xsd:simpleContent><xsd:extension base="xsd:string">
    <xsd:attribute name="lookup_type" type="xsd:string" default="DATABASE"/>
   </xsd:extension></xsd:simpleContent>
  </xsd:complexType>
  <xsd:complexType name="empty_t"><xsd:sequence/></xsd:complexType>
  <xsd:complexType name="agent_t"><xsd:all>
   <xsd:element name="agent_name" type="xsd:string" minOccurs="0"/>
   <xsd:element name="address" type="xsd:string" minOccurs="0"/>
   <xsd:element name="protocol" type="xsd:int" minOccurs="0"/>
   <xsd:element name="agent_alias" type="xsd:string" minOccurs="0"/>
  </xsd:all></xsd:complexType>
  <xsd:complexType name="recipient_list_t"><xsd:sequence>
   <xsd:element name="recipient" type="aq:agent_t" maxOccurs="unbounded"/>
  </xsd:sequence></xsd:complexType>
  <xsd:complexType name="message_header_t"><xsd:all>
   <xsd:element name="sender_id" type="aq:agent_t" minOccurs="0"/>
   <xsd:element name="message_id" type="xsd:string" minOccurs="0"/>
   <xsd:element name="correlation" type="xsd:string" minOccurs="0"/>
   <xsd:element name="delay" type="xsd:double" minOccurs="0"/>
   <xsd:element name="expiration" type="xsd:double" minOccurs="0"/>
   <xsd:element name="priority" type="xsd:int" minOccurs="0"/>
   <xsd:element name="recipient_list" type="aq:recipient_list_t" minOccurs="0"/>
   <xsd:element name="message_state" type="xsd:int" minOccurs="0"/>
   <xsd:element name="exception_queue" type="xsd:string" minOccurs="0"/>
   <xsd:element name="delivery_count" type="xsd:int" minOccurs="0"/>
  </xsd:all></xsd:complexType>
  <xsd:complexType name="value_t"><xsd:sequence>
   <xsd:element name="name" type="xsd:string"/>
   <xsd:choice>
    <xsd:element name="string_value" type="xsd:string"/>
    <xsd:element name="int_value" type="xsd:int"/>
    <xsd:element name="long_value" type="xsd:long"/>
    <xsd:element name="short_value" type="xsd:short"/>
    <xsd:element name="byte_value" type="xsd:byte"/>
    <xsd:element name="boolean_value" type="xsd:boolean"/>
    <xsd:element name="float_value" type="xsd:float"/>
    <xsd:element name="double_value" type="xsd:double"/>
    <xsd:element name="bytes_value" type="xsd:hexBinary"/>
    <xsd:element name="char_value" type="xsd:string"/>
   </xsd:choice>
  </xsd:sequence></xsd:complexType>
  <xsd:complexType name="properties_t"><xsd:sequence>
   <xsd:element name="property" type="aq:value_t" minOccurs="0" maxOccurs="unbounded"/>
  </xsd:sequence></xsd:complexType>
  <xsd:complexType name="map_data_t"><xsd:sequence>
   <xsd:element name="item" type="aq:value_t" minOccurs="0" maxOccurs="unbounded"/>
  </xsd:sequence></xsd:complexType>
  <xsd:complexType name="oracle_jms_properties_t"><xsd:all>
   <xsd:element name="type" type="xsd:string" minOccurs="0"/>
   <xsd:element name="reply_to" type="aq:agent_t" minOccurs="0"/>
   <xsd:element name="userid" type="xsd:string" minOccurs="0"/>
   <xsd:element name="appid" type="xsd:string" minOccurs="0"/>
   <xsd:element name="groupid" type="xsd:string" minOccurs="0"/>
   <xsd:element name="groupseq" type="xsd:int" minOccurs="0"/>
  </xsd:all></xsd:complexType>
  <xsd:complexType name="jms_message_t"><xsd:sequence>
   <xsd:element name="oracle_jms_properties" type="aq:oracle_jms_properties_t" minOccurs="0"/>
   <xsd:element name="user_properties" type="aq:properties_t" minOccurs="0"/>
   <xsd:choice minOccurs="0">
    <xsd:element name="text_data" type="xsd:string"/>
    <xsd:element name="map_data" type="aq:map_data_t"/>
    <xsd:element name="bytes_data" type="xsd:hexBinary"/>
    <xsd:sequence>
     <xsd:element name="class_name" type="xsd:string" minOccurs="0"/>
     <xsd:element name="ser_object_data" type="xsd:hexBinary"/>
    </xsd:sequence>
   </xsd:choice>
  </xsd:sequence></xsd:complexType>
  <xsd:complexType name="message_payload_t"><xsd:choice>
   <xsd:element name="raw" type="xsd:hexBinary"/>
   <xsd:element name="jms_text_message" type="aq:jms_message_t"/>
   <xsd:element name="jms_map_message" type="aq:jms_message_t"/>
   <xsd:element name="jms_bytes_message" type="aq:jms_message_t"/>
   <xsd:element name="jms_object_message" type="aq:jms_message_t"/>
   <xsd:any namespace="##any" processContents="lax"/>
  </xsd:choice></xsd:complexType>
  <xsd:complexType name="message_t"><xsd:sequence>
   <xsd:element name="message_number" type="xsd:int" minOccurs="0"/>
   <xsd:element name="message_header" type="aq:message_header_t" minOccurs="0"/>
   <xsd:element name="message_payload" type="aq:message_payload_t" minOccurs="0"/>
  </xsd:sequence></xsd:complexType>
  <xsd:complexType name="message_set_t"><xsd:sequence>
   <xsd:element name="message_count" type="xsd:int" minOccurs="0"/>
   <xsd:element name="message" type="aq:message_t" minOccurs="0" maxOccurs="unbounded"/>
  </xsd:sequence></xsd:complexType>
  <xsd:complexType name="producer_options_t"><xsd:all>
   <xsd:element name="destination" type="aq:destination_t"/>
   <xsd:element name="visibility" type="xsd:string" minOccurs="0"/>
   <xsd:element name="transformation" type="xsd:string" minOccurs="0"/>
  </xsd:all></xsd:complexType>
  <xsd:complexType name="selector_t"><xsd:all>
   <xsd:element name="correlation" type="xsd:string" minOccurs="0"/>
   <xsd:element name="message_id" type="xsd:string" minOccurs="0"/>
   <xsd:element name="condition" type="xsd:string" minOccurs="0"/>
  </xsd:all></xsd:complexType>
  <xsd:complexType name="consumer_options_t"><xsd:all>
   <xsd:element name="destination" type="aq:destination_t"/>
   <xsd:element name="consumer_name" type="xsd:string" minOccurs="0"/>
   <xsd:element name="wait_time" type="xsd:double" minOccurs="0"/>
   <xsd:element name="selector" type="aq:selector_t" minOccurs="0"/>
   <xsd:element name="visibility" type="xsd:string" minOccurs="0"/>
   <xsd:element name="dequeue_mode" type="xsd:string" minOccurs="0"/>
   <xsd:element name="navigation_mode" type="xsd:string" minOccurs="0"/>
   <xsd:element name="transformation" type="xsd:string" minOccurs="0"/>
   <xsd:element name="batch_size" type="xsd:int" minOccurs="0"/>
  </xsd:all></xsd:complexType>
  <xsd:complexType name="register_options_t"><xsd:all>
   <xsd:element name="destination" type="aq:destination_t"/>
   <xsd:element name="consumer_name" type="xsd:string" minOccurs="0"/>
   <xsd:element name="notify_url" type="xsd:string"/>
  </xsd:all></xsd:complexType>
  <xsd:complexType name="status_response_t"><xsd:sequence>
   <xsd:element name="status_code" type="xsd:int"/>
   <xsd:element name="error_code" type="xsd:int" minOccurs="0"/>
   <xsd:element name="error_message" type="xsd:string" minOccurs="0"/>
  </xsd:sequence></xsd:complexType>
  <xsd:complexType name="result_t"><xsd:sequence>
   <xsd:element name="destination" type="xsd:string"/>
   <xsd:element name="message_id" type="xsd:string" minOccurs="0" maxOccurs="unbounded"/>
  </xsd:sequence></xsd:complexType>
  <xsd:complexType name="receive_result_t"><xsd:sequence>
   <xsd:element name="destination" type="xsd:string"/>
   <xsd:element name="message_set" type="aq:message_set_t"/>
  </xsd:sequence></xsd:complexType>
  <xsd:complexType name="notification_options_t"><xsd:sequence>
   <xsd:element name="destination" type="xsd:string"/>
   <xsd:element name="consumer_name" type="xsd:string" minOccurs="0"/>
  </xsd:sequence></xsd:complexType>
  <xsd:element name="AQXmlSend"><xsd:complexType><xsd:sequence>
   <xsd:element name="producer_options" type="aq:producer_options_t"/>
   <xsd:element name="message_set" type="aq:message_set_t"/>
   <xsd:element name="AQXmlCommit" type="aq:empty_t" minOccurs="0"/>
  </xsd:sequence></xsd:complexType></xsd:element>
  <xsd:element name="AQXmlPublish"><xsd:complexType><xsd:sequence>
   <xsd:element name="producer_options" type="aq:producer_options_t"/>
   <xsd:element name="message_set" type="aq:message_set_t"/>
   <xsd:element name="AQXmlCommit" type="aq:empty_t" minOccurs="0"/>
  </xsd:sequence></xsd:complexType></xsd:element>
  <xsd:element name="AQXmlReceive"><xsd:complexType><xsd:sequence>
   <xsd:element name="consumer_options" type="aq:consumer_options_t"/>
   <xsd:element name="AQXmlCommit" type="aq:empty_t" minOccurs="0"/>
  </xsd:sequence></xsd:complexType></xsd:element>
  <xsd:element name="AQXmlRegister"><xsd:complexType><xsd:sequence>
   <xsd:element name="register_options" type="aq:register_options_t"/>
  </xsd:sequence></xsd:complexType></xsd:element>
  <xsd:element name="AQXmlCommit" type="aq:empty_t"/>
  <xsd:element name="AQXmlRollback" type="aq:empty_t"/>
  <xsd:element name="AQXmlSendResponse"><xsd:complexType><xsd:sequence>
   <xsd:element name="status_response" type="aq:status_response_t"/>
   <xsd:element name="send_result" type="aq:result_t" minOccurs="0"/>
  </xsd:sequence></xsd:complexType></xsd:element>
  <xsd:element name="AQXmlPublishResponse"><xsd:complexType><xsd:sequence>
   <xsd:element name="status_response" type="aq:status_response_t"/>
   <xsd:element name="publish_result" type="aq:result_t" minOccurs="0"/>
  </xsd:sequence></xsd:complexType></xsd:element>
  <xsd:element name="AQXmlReceiveResponse"><xsd:complexType><xsd:sequence>
   <xsd:element name="status_response" type="aq:status_response_t"/>
   <xsd:element name="receive_result" type="aq:receive_result_t" minOccurs="0"/>
  </xsd:sequence></xsd:complexType></xsd:element>
  <xsd:element name="AQXmlRegisterResponse"><xsd:complexType><xsd:sequence>
   <xsd:element name="status_response" type="aq:status_response_t"/>
  </xsd:sequence></xsd:complexType></xsd:element>
  <xsd:element name="AQXmlCommitResponse"><xsd:complexType><xsd:sequence>
   <xsd:element name="status_response" type="aq:status_response_t"/>
  </xsd:sequence></xsd:complexType></xsd:element>
  <xsd:element name="AQXmlRollbackResponse"><xsd:complexType><xsd:sequence>
   <xsd:element name="status_response" type="aq:status_response_t"/>
  </xsd:sequence></xsd:complexType></xsd:element>
  <xsd:element name="AQXmlNotification"><xsd:complexType><xsd:sequence>
   <xsd:element name="notification_options" type="aq:notification_options_t"/>
   <xsd:element name="message_set" type="aq:message_set_t"/>
  </xsd:sequence></xsd:complexType></xsd:element>
  <xsd:element name="status_response" type="aq:status_response_t"/>
"""


def wsdl_document(location: str) -> bytes:
    """The WSDL, with the service's address set to ``location``."""
    messages, port_ops, binding_ops = [], [], []
    for op in OPERATIONS:
        resp = RESPONSES[op]
        messages.append(
            f'<message name="{op}Input"><part name="body" element="aq:{op}"/></message>\n'
            f'<message name="{op}Output"><part name="body" element="aq:{resp}"/></message>')
        port_ops.append(f'<operation name="{op}"><input message="aq:{op}Input"/>'
                        f'<output message="aq:{op}Output"/></operation>')
        binding_ops.append(
            f'<operation name="{op}"><soap:operation soapAction="{IDAP_NS}#{op}" '
            'style="document"/><input><soap:body use="literal"/></input>'
            '<output><soap:body use="literal"/></output></operation>')
    nl = "\n"
    doc = f"""<?xml version="1.0" encoding="UTF-8"?>
<definitions name="AQXmlService" targetNamespace="{IDAP_NS}"
  xmlns="http://schemas.xmlsoap.org/wsdl/" xmlns:soap="http://schemas.xmlsoap.org/wsdl/soap/"
  xmlns:xsd="http://www.w3.org/2001/XMLSchema" xmlns:aq="{IDAP_NS}">
<documentation>changeflow Advanced Queuing over the Internet: IDAP (seed 003).</documentation>
<types>
 <xsd:schema targetNamespace="{IDAP_NS}" elementFormDefault="qualified">{_SCHEMA} </xsd:schema>
</types>
{nl.join(messages)}
<portType name="AQXmlPortType">
{nl.join(port_ops)}
</portType>
<binding name="AQXmlBinding" type="aq:AQXmlPortType">
<soap:binding style="document" transport="http://schemas.xmlsoap.org/soap/http"/>
{nl.join(binding_ops)}
</binding>
<service name="AQXmlService">
<port name="AQXmlPort" binding="aq:AQXmlBinding">
<soap:address location={quoteattr(location)}/></port>
</service>
</definitions>
"""
    return doc.encode("utf-8")
