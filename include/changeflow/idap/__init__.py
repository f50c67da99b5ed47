"""Internet access to Advanced Queuing: IDAP (SOAP 1.1) over HTTP(S), seed 003 and SPEC §9.

Any HTTP client enqueues, dequeues, registers for notifications and commits by POSTing
IDAP documents to ``changeflow serve``. The pieces, each a module:

* :mod:`.parse` (a ``defusedxml`` parser, then the envelope and the request), :mod:`.model`,
  :mod:`.messages` and :mod:`.payloads` (``message_set`` and payloads in XML);
* :mod:`.service` runs requests against :mod:`changeflow.messaging` sessions;
* :mod:`.sessions` (cookie -> one open transaction, 120 s idle rollback), :mod:`.auth`;
* :mod:`.render` (responses and SOAP Faults), :mod:`.wsdl`;
* :mod:`.app` (the ASGI app) and :mod:`.server` (uvicorn, TLS, slow-client defence);
* :mod:`.notify` (``AQXmlNotification`` by HTTP POST or mail);
* :mod:`.client` (a small IDAP client), :mod:`.propagate` and :mod:`.inbound` (HTTP
  propagation to and from another changeflow server);
* :mod:`.config`: the ``idap:`` section of a pipeline file.

See ``docs/idap.md``.
"""
