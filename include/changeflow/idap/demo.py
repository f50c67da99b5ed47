"""HTTP propagation between two local servers: ``python -m changeflow.idap.demo [DIR]``.

Site ``site2`` is served by an IDAP server on a free local port (its own pipeline file);
site ``site1`` declares ``site2``'s endpoint as the remote site ``dba`` and a propagation
``oe_to_ws`` into ``ws.booked@dba``. The demo enqueues LCRs and a user message at
``site1``, runs the propagation twice (the second pass finds nothing new: nothing is
duplicated) and prints what arrived at ``site2``. Everything lives under DIR (default: a
temporary directory).
"""

from __future__ import annotations

import os
import sys
import tempfile
import textwrap
from pathlib import Path

DST = """
version: 1
sites:
  site2: {staging_root: s2/st, target_root: s2/t, state_url: "sqlite:///s2/state.db",
          database: DB2}
queues:
  - {name: ws.booked, site: site2, queue_table: ws.orders_qt}
messaging:
  queue_tables:
    - {name: ws.orders_qt, site: site2, payload_type: RAW, multiple_consumers: true}
  subscribers:
    - {queue: ws.booked@site2, name: all}
idap:
  users: [{name: prop, password_env: DEMO_PROP_PASSWORD}]
"""

SRC = """
version: 1
sites:
  site1: {{staging_root: s1/st, target_root: s1/t, state_url: "sqlite:///s1/state.db",
          database: DB1}}
queues:
  - {{name: oe.booked, site: site1, queue_table: oe.orders_qt}}
propagations:
  - {{name: oe_to_ws, source_queue: oe.booked@site1, destination_queue: ws.booked@dba}}
messaging:
  queue_tables: [{{name: oe.orders_qt, site: site1, payload_type: RAW, multiple_consumers: true}}]
  subscribers:
    - {{queue: oe.booked@site1, name: local}}
    - {{queue: oe.booked@site1, address: ws.booked@dba}}
idap:
  remote_sites:
    dba: {{url: "{url}", username_env: DEMO_PROP_USER, password_env: DEMO_PROP_PASSWORD}}
"""


def main(argv: list[str] | None = None) -> int:
    """Run the demo; returns the exit code (0 when everything arrived once)."""
    from changeflow.config import load_config
    from changeflow.idap.server import running
    from changeflow.messaging import connect
    from changeflow.propagation import propagate_once
    from changeflow.schedules.probe import arrived, enqueue_probes
    from changeflow.sites import site

    args = argv if argv is not None else sys.argv[1:]
    root = Path(args[0] if args else tempfile.mkdtemp(prefix="idap-demo-")).resolve()
    (root / "s1").mkdir(parents=True, exist_ok=True)
    (root / "s2").mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("DEMO_PROP_USER", "prop")
    os.environ.setdefault("DEMO_PROP_PASSWORD", "demo-password")
    (root / "site2.yaml").write_text(textwrap.dedent(DST))
    dst = load_config(root / "site2.yaml")
    with running(dst, dst.idap) as server:
        print(f"site2 served at {server.url}")
        (root / "site1.yaml").write_text(textwrap.dedent(SRC.format(url=server.url)))
        src = load_config(root / "site1.yaml")
        site(dst, "site2").catalog.add_consumer("ws.booked", "demo_reader")
        s = connect(src)
        mid = s.enqueue("oe.booked", b"an order", correlation="order-1")
        s.commit()
        enqueue_probes(src, "oe.booked@site1", ["lcr-1", "lcr-2", "lcr-3"], 1000)
        for n in (1, 2):
            res = propagate_once(None, src, "oe_to_ws")  # type: ignore[arg-type]
            print(f"pass {n}: read {res.messages_read}, committed at site2 "
                  f"{res.messages_propagated}")
        lcrs = arrived(dst, "ws.booked@site2", "demo_reader")
        m = connect(dst).dequeue("ws.booked", consumer="all", wait=0)
        print(f"site2 received LCRs {lcrs} and user message {m.msg_id if m else None} "
              f"({m.payload!r})" if m else f"site2 received LCRs {lcrs}")
        ok = lcrs == ["lcr-1", "lcr-2", "lcr-3"] and m is not None and m.msg_id == mid
    print("HTTP propagation: OK" if ok else "HTTP propagation: FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
