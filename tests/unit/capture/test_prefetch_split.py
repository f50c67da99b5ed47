"""Cutting one read of a slot copy into the batches peeks would have returned."""

from __future__ import annotations

import json

import pytest

from changeflow.capture.pg_prefetch import split


def _read(docs: list[dict]) -> tuple[str, list[int], int, list[int], list[int]]:
    """What the fetch query returns for ``docs``: text, commit LSNs, count, lengths,
    commit ordinals (a commit's LSN is its ordinal times 100)."""
    texts = [json.dumps(d, separators=(",", ":"), ensure_ascii=False) for d in docs]
    commits = [i + 1 for i, d in enumerate(docs) if d["action"] == "C"]
    return ",".join(texts), [c * 100 for c in commits], len(docs), [len(t) for t in texts], \
        commits


def _txn(xid: int, changes: int) -> list[dict]:
    return [{"action": "B", "xid": xid},
            *[{"action": "I", "table": "t", "columns": [{"name": "v", "value": f"é,{xid}"}]}
              for _ in range(changes)],
            {"action": "C", "xid": xid}]


def _peeks(docs: list[dict], batch_rows: int) -> list[list[dict]]:
    """Batches as peeks cut them: whole transactions, ending at the first commit at or
    past ``batch_rows`` documents."""
    out, cur = [], []
    for d in docs:
        cur.append(d)
        if d["action"] == "C" and len(cur) >= batch_rows:
            out.append(cur)
            cur = []
    if cur:
        if any(d["action"] == "C" for d in cur) or not out:
            out.append(cur)
        else:
            out[-1].extend(cur)
    return out


@pytest.mark.parametrize("batch_rows", [1, 3, 5, 8, 1000])
def test_cuts_where_peeks_cut_and_keeps_every_document(batch_rows: int) -> None:
    docs = [*_txn(1, 1), *_txn(2, 4), *_txn(3, 0), *_txn(4, 2),
            {"action": "M", "prefix": "p", "content": "outside"}]
    text, lsns, rows, lengths, commits = _read(docs)
    got = split(text, lsns, rows, lengths, commits, batch_rows)
    want = _peeks(docs, batch_rows)
    assert [json.loads(f"[{t}]") for t, _, _ in got] == want
    assert [n for _, _, n in got] == [len(b) for b in want]
    assert [lsn for _, ls, _ in got for lsn in ls] == lsns
    for (_, ls, _), batch in zip(got, want, strict=True):
        assert len(ls) == sum(d["action"] == "C" for d in batch)


def test_lengths_that_do_not_add_up_keep_the_read_whole() -> None:
    text, lsns, rows, lengths, commits = _read([*_txn(1, 2), *_txn(2, 2)])
    lengths[0] += 1  # e.g. a server encoding that counts bytes, not characters
    assert split(text, lsns, rows, lengths, commits, 2) == [(text, lsns, rows)]
