"""The remote layer's settings from the environment (LOADERX_REMOTE_*), each checked where it is
read: a value out of range is a ValueError naming the variable, raised before any request is
sent, never a bare int() error or a setting that silently does something else (a lease of nan
seconds let every writer take over every lock; "inf" retried for ever)."""

from __future__ import annotations

import math
import os


def seconds_setting(name: str, default: float, zero_allowed: bool = False) -> float:
    """A number of seconds: finite, above 0 (or 0 itself, where zero_allowed)."""
    text = os.environ.get(name)
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_allowed):
        raise ValueError(f"{name}={text!r} must be a finite number of seconds above 0"
                         + (" (or 0)" if zero_allowed else ""))
    return value


def count_setting(name: str, default: int, minimum: int) -> int:
    """A whole number, at least minimum."""
    text = os.environ.get(name)
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not a whole number") from None
    if value < minimum:
        raise ValueError(f"{name}={text!r} must be at least {minimum}")
    return value


__all__ = ["count_setting", "seconds_setting"]
