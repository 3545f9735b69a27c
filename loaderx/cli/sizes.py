"""Counts and byte sizes as people read them (1 record, 2 records; B, KiB, MiB, ...), for the
command's and the demo's output."""

from __future__ import annotations


def size_text(count: int) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    return f"{count} B"


def count_text(count: int, noun: str) -> str:
    """`count` with its noun, plural unless the count is one: "1 bad record", "2 bad records"."""
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"
