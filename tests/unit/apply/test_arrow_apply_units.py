"""The Arrow paths' pure parts: resolution, compaction rows, key membership, paths."""

from __future__ import annotations

import pyarrow as pa
import pytest

from changeflow.apply import arrow_files as af
from changeflow.apply.compaction_arrow import compacted, resolve


def _images(*rows: tuple[int | None, int | None, int, bool, str]) -> pa.Table:
    """Images as (id, seq, scn, deleted, name); the position is 1 throughout."""
    cols = list(zip(*rows, strict=True)) if rows else [[]] * 5
    return pa.table({"id": pa.array(cols[0], pa.int64()), "name": pa.array(cols[4], pa.string()),
                     "_cf_seq": pa.array(cols[1], pa.int64()),
                     "_cf_scn": pa.array(cols[2], pa.int64()),
                     "_cf_pos": pa.array([1] * len(cols[0]), pa.int64()),
                     "_cf_deleted": pa.array(cols[3], pa.bool_())})


def _names(t: pa.Table) -> list[tuple[int, str]]:
    return sorted(zip(t.column("id").to_pylist(), t.column("name").to_pylist(), strict=True))


def test_resolve_keeps_the_newest_image_and_drops_tombstones() -> None:
    assert _names(resolve(_images((1, 1, 5, False, "a")), ["id"])) == [(1, "a")]
    rows = _images((1, 1, 5, False, "a"), (1, 2, 4, False, "b"),  # seq before commit position
                   (2, 1, 5, False, "c"), (2, 2, 6, True, "x"),  # deleted last
                   (3, None, 9, False, "d"), (3, 1, 1, False, "e"),  # NULL seq is 0
                   (4, 3, 7, True, "y"), (4, 3, 8, False, "f"))  # then commit position
    assert _names(resolve(rows, ["id"])) == [(1, "b"), (3, "e"), (4, "f")]


def test_resolve_refuses_what_spark_might_resolve_otherwise() -> None:
    with pytest.raises(af.Unproven, match="tie"):
        resolve(_images((1, 2, 5, False, "a"), (1, 2, 5, False, "b")), ["id"])
    with pytest.raises(af.Unproven, match="NULL id"):
        resolve(_images((None, 2, 5, False, "a")), ["id"])


def test_compacted_copies_base_rows_of_keys_no_delta_names() -> None:
    base = _images((1, 1, 1, False, "a"), (2, 1, 1, False, "b"), (3, 1, 1, False, "c"))
    delta = _images((2, 2, 5, True, "x"), (4, 2, 5, False, "d"), (1, 3, 6, False, "a2"))
    assert _names(compacted([base], [delta], ["id"])) == [(1, "a2"), (3, "c"), (4, "d")]
    assert _names(compacted([], [delta], ["id"])) == [(1, "a2"), (4, "d")]


def test_member_mask_matches_no_null_key() -> None:
    t = pa.table({"a": ["x", "x", None, "y"], "b": [1, 2, 1, None]})
    keys = pa.table({"a": ["x", None, "y"], "b": [1, 1, None]})
    assert af.member_mask(t, keys, ["a", "b"]).to_pylist() == [True, False, False, False]
    assert af.member_mask(t, pa.table({"a": ["x", None]}), ["a"]).to_pylist() == [
        True, True, False, False]
