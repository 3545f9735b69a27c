"""Byte counts as people read them (B, KiB, MiB, ...), for the command's and the demo's output."""

from __future__ import annotations


def size_text(count: int) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    return f"{count} B"
