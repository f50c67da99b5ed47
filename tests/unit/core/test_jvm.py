"""Iterating Java collections through py4j (:mod:`changeflow.jvm`)."""

from __future__ import annotations

from typing import Any

import pytest

from changeflow.jvm import java_each


class _StrictIterator:
    """A Java iterator as py4j shows it: ``next()`` past the end throws (in the JVM,
    where the exception and its stack trace then cross the gateway)."""

    def __init__(self, items: list[Any]):
        self.items, self.i, self.calls = items, 0, 0

    def hasNext(self) -> bool:  # noqa: N802  (Java's name)
        self.calls += 1
        return self.i < len(self.items)

    def next(self) -> Any:
        self.calls += 1
        if self.i >= len(self.items):
            raise AssertionError("next() past the end: NoSuchElementException in the JVM")
        self.i += 1
        return self.items[self.i - 1]


class _Iterable:
    def __init__(self, items: list[Any]):
        self.it = _StrictIterator(items)

    def iterator(self) -> _StrictIterator:
        return self.it


@pytest.mark.parametrize("items", [[], ["a"], ["a", "b", "c"]])
def test_java_each_ends_on_has_next_not_on_an_exception(items: list[str]) -> None:
    src = _Iterable(items)
    assert list(java_each(src)) == items
    assert src.it.calls == 2 * len(items) + 1  # one hasNext per item and the last one
