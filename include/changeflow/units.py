"""Amounts in the units people read: shared by the CLI's listings and the doctor's lines."""

from __future__ import annotations


def human_bytes(n: float | None) -> str:
    """Bytes in binary units.

    >>> human_bytes(0), human_bytes(1023), human_bytes(5 * 1024**3)
    ('0 B', '1023 B', '5.0 GiB')
    """
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover
