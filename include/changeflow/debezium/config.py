"""The configuration of a Debezium capture source (``source: {type: debezium, ...}``).

.. code-block:: yaml

    captures:
      - name: capture_pg1
        queue: strmadmin.streams_queue@site1
        source:
          type: debezium
          database: PG1.EXAMPLE.COM      # the source database's global name in the LCRs
          root: /data/connect/topics     # a directory (or URI) of change-event files
          tables:                        # keys (the events do not carry them); columns
            - name: inventory.customers  #   when the events have no schema
              key: [id]
              columns: {id: integer, email: text, balance: "numeric(12,2)"}

Kept apart from :mod:`changeflow.config` (which only adds the model to the capture
source union) so that the whole Debezium contract lives in one package.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

_TABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_$#]*\.[A-Za-z_][A-Za-z0-9_$#]*$")


class DebeziumTable(BaseModel):
    """A table whose change events a Debezium capture reads."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="schema.table as the events' source block names it")
    key: list[str] = Field(default=[], description="key columns; else the events' own")
    columns: dict[str, str] = Field(
        default={}, description="column -> PostgreSQL (or LCR) type, for events without "
                                "a schema; checked against the schema when both are given")

    @field_validator("name")
    @classmethod
    def _owner_name(cls, v: str) -> str:
        if not _TABLE.match(v):
            raise ValueError(f"table name {v!r} must be schema.table")
        return v


class DebeziumSource(BaseModel):
    """Debezium change-event files (JSON lines, as Kafka Connect sinks write them).

    Files are matched by ``pattern`` under ``root`` and are captured once each, oldest
    name first within each directory; a file must not change after it was captured.
    The ``*_mode`` options mirror the connector's: they say how values of declared
    PostgreSQL types were written (events with schemas describe themselves).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["debezium"]
    database: str = Field(description="global name of the source database, e.g. PG1.EXAMPLE.COM")
    root: str
    pattern: str = Field(default="*.json*", description="file-name glob, searched recursively")
    tables: list[DebeziumTable] = []
    decimal_handling_mode: Literal["precise", "double", "string"] = "precise"
    time_precision_mode: Literal["adaptive", "adaptive_time_microseconds", "connect"] = \
        "adaptive"
    binary_handling_mode: Literal["bytes", "base64", "base64-url-safe", "hex"] = "bytes"
    include_tagged_lcr: bool = True
    unavailable_value_placeholder: str = Field(
        default="__debezium_unavailable_value",
        description="the connector's unavailable.value.placeholder: a column holding it "
                    "(an unchanged TOASTed value) is left out of the LCR's values")

    def table(self, owner: str, name: str) -> DebeziumTable | None:
        """The declared table, matched case-insensitively."""
        wanted = f"{owner}.{name}".lower()
        return next((t for t in self.tables if t.name.lower() == wanted), None)


class KafkaSource(BaseModel):
    """Debezium change events in Kafka topics (``source: {type: kafka, ...}``).

    Read with Spark's Kafka source, JSON with or without schemas, exactly once: the
    offsets read are committed with the queue batch (``docs/debezium.md``). ``tables``
    and the ``*_mode`` options are a ``debezium`` source's.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["kafka"]
    database: str = Field(description="global name of the source database, e.g. PG1.EXAMPLE.COM")
    bootstrap_servers: str
    topics: list[str] = Field(min_length=1, description="the tables' topics (and, for "
                              "counting only, the transaction metadata topic)")
    options: dict[str, str] = Field(default={}, description="Kafka consumer properties "
                                    "(security.protocol, sasl.*), without the kafka. prefix")
    tables: list[DebeziumTable] = []
    decimal_handling_mode: Literal["precise", "double", "string"] = "precise"
    time_precision_mode: Literal["adaptive", "adaptive_time_microseconds", "connect"] = \
        "adaptive"
    binary_handling_mode: Literal["bytes", "base64", "base64-url-safe", "hex"] = "bytes"
    include_tagged_lcr: bool = True
    unavailable_value_placeholder: str = "__debezium_unavailable_value"

    def as_events(self) -> DebeziumSource:
        """The same tables and options as a ``debezium`` source: how the events read
        from the topics are typed and converted."""
        fields = self.model_dump(exclude={"type", "bootstrap_servers", "topics", "options"})
        return DebeziumSource(type="debezium", root=f"kafka://{self.bootstrap_servers}",
                              **fields)
