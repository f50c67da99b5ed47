"""The generic XML listener: one XML document per change, for systems that take a feed.

The seed's "XML Output" future: instead of a listener-specific package per system, a
generic listener writes each change as an XML document. The document holds the entry
(table, subtype, change type, keys, entry number and date) and, when the listener has
a query for the entry's table, the object's current state (``<record>``; an object that
is gone gives ``<record present="false"/>``). Documents go to a directory, one file
per entry named by its entry number (written to a temporary name, then renamed, so a
reader never sees half a document; writing it again is harmless), or are POSTed to a
URL (``Content-Type: application/xml``).

>>> import datetime as dt
>>> rec = ChangeRec("FEED", "PERSON", "Telephone", None, "C", 1001, entry_number=7,
...                 entry_date=dt.datetime(2024, 1, 1, tzinfo=dt.UTC))
>>> root = ET.fromstring(document(rec, [{"phone": "276-6000", "tele_type": None}]))
>>> root.attrib
{'listener': 'FEED', 'entry_number': '7', 'change_type': 'C', 'operation': 'update'}
>>> [(e.tag, e.text) for e in root if e.tag != "record"]  # doctest: +NORMALIZE_WHITESPACE
[('tname', 'PERSON'), ('subtype', 'Telephone'), ('person_id', '1001'),
 ('entry_date', '2024-01-01T00:00:00+00:00'), ('retry_count', '0')]
>>> [(f.get("name"), f.text, f.get("null")) for f in root.find("record")]
[('phone', '276-6000', None), ('tele_type', None, 'true')]
"""

from __future__ import annotations

import datetime as dt
import os
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from changeflow.mcq.listeners.handlers import TargetUnavailableError, fetch_rows
from changeflow.mcq.model import ChangeRec, McqError

OPERATIONS = {"I": "insert", "C": "update", "D": "delete"}
_FIELDS = ("tname", "subtype", "rrowid", "person_id", "pkey_string", "pkey_number",
           "aux_string", "entry_date", "retry_count")


def _text(v: Any) -> str:
    if isinstance(v, dt.datetime | dt.date):
        return v.isoformat()
    if isinstance(v, bytes):
        return v.hex()
    return str(v)


def document(rec: ChangeRec, rows: list[dict[str, Any]] | None) -> bytes:
    """The XML document of one change (``rows``: the object's current state, if asked)."""
    root = ET.Element("change", {"listener": rec.proc_name,
                                 "entry_number": str(rec.entry_number),
                                 "change_type": rec.change_type or "",
                                 "operation": OPERATIONS.get(rec.change_type or "", "")})
    if rec.bulk:
        root.set("bulk", "true")
    for name in _FIELDS:
        value = getattr(rec, name)
        if value is not None:
            ET.SubElement(root, name).text = _text(value)
    if rows is not None:
        if not rows:
            ET.SubElement(root, "record", {"present": "false"})
        for row in rows:
            record = ET.SubElement(root, "record", {"present": "true"})
            for k, v in row.items():
                f = ET.SubElement(record, "field", {"name": str(k)})
                if v is None:
                    f.set("null", "true")
                else:
                    f.text = _text(v)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


class XmlFeed:
    """Writes each change as an XML document (see the module doc).

    Args:
        listener: the listener's name (in the document).
        directory: where documents are written (one file per entry).
        url: where documents are POSTed instead.
        source_url: a PostgreSQL source the current state is read from.
        queries: ``TNAME`` or ``TNAME/Subtype`` -> SQL with the entry's keys as parameters.
        timeout: seconds for an HTTP POST.
    """

    def __init__(self, listener: str, *, directory: str | None = None, url: str | None = None,
                 source_url: str | None = None, queries: dict[str, str] | None = None,
                 timeout: float = 10.0):
        if (directory is None) == (url is None):
            raise McqError("xml listener: give exactly one of directory and url")
        self.listener = listener
        self.directory = Path(directory) if directory else None
        self.url = url
        self.source_url = source_url
        self.queries = queries or {}
        self.timeout = timeout
        self._conn: Any = None
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)

    def _source(self) -> Any:
        if self._conn is None or self._conn.closed:
            from changeflow.pgconn import connect

            self._conn = connect(str(self.source_url), application_name=f"mcq-{self.listener}",
                                 attempts=2)
        return self._conn

    def _rows(self, rec: ChangeRec) -> list[dict[str, Any]] | None:
        if self.source_url is None:
            return None
        import psycopg

        try:
            return fetch_rows(self._source(), self.queries, rec)
        except psycopg.OperationalError as exc:
            self.close()
            raise TargetUnavailableError(f"xml listener {self.listener}: source: {exc}") from exc

    def handle(self, rec: ChangeRec) -> None:
        """Write (or POST) the change's document."""
        body = document(rec, self._rows(rec))
        if self.directory is not None:
            path = self.directory / f"{rec.entry_number:012d}.xml"
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_bytes(body)
            os.replace(tmp, path)
            return
        self._post(body, rec)

    def _post(self, body: bytes, rec: ChangeRec) -> None:
        req = urllib.request.Request(str(self.url), data=body, method="POST",
                                     headers={"Content-Type": "application/xml"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310
                if resp.status >= 300:
                    raise McqError(f"feed {self.url} answered {resp.status} to entry "
                                   f"{rec.entry_number}")
        except urllib.error.HTTPError as exc:
            if exc.code >= 500:
                raise TargetUnavailableError(f"feed {self.url} answered {exc.code}") from exc
            raise McqError(f"feed {self.url} refused entry {rec.entry_number}: "
                           f"{exc.code} {exc.reason}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise TargetUnavailableError(f"feed {self.url} is unreachable: {exc}") from exc

    def close(self) -> None:
        """Close the source connection."""
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None
