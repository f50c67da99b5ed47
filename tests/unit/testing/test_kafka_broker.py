"""The throwaway Kafka broker's storage format accepts every cluster id it draws."""

from __future__ import annotations

import doctest
import uuid

from changeflow.testing import kafka


def test_a_cluster_id_never_begins_with_a_dash() -> None:
    # 0xf8.. encodes to "-AAA..": the storage tool's parser read it as an option
    # and CI's broker failed to format (one start in 64).
    drawn = iter([uuid.UUID(bytes=b"\xf8" + bytes(15)), uuid.UUID(bytes=b"\xfb" + bytes(15)),
                  uuid.UUID(int=7)])
    assert kafka.cluster_id(lambda: next(drawn)) == "AAAAAAAAAAAAAAAAAAAABw"
    ids = {kafka.cluster_id() for _ in range(2000)}
    assert len(ids) == 2000
    assert not any(text.startswith("-") for text in ids)
    assert all(len(text) == 22 for text in ids)


def test_the_module_examples_hold() -> None:
    result = doctest.testmod(kafka)
    assert result.attempted > 0 and result.failed == 0
