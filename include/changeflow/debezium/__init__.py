"""Debezium interchange (SPEC §1, §4.3): change-event files in, queues out, both ways.

* :mod:`.envelope`: the envelope contract (field names, the op enum, positions);
* :mod:`.types`: column types (PostgreSQL, Kafka Connect schemas, LCR logical types);
* :mod:`.config`: the ``debezium`` capture source;
* :mod:`.reader` and :mod:`.capture`: files into LCRs, and the capture run;
* :mod:`.export`: any queue into the same envelope.

See ``docs/debezium.md``.
"""
