"""The argparse value types of the command's options: a bad value is a usage error (exit 2)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from loaderx._store.schema import DICT_TIERS


def dict_size_option(text: str) -> str | int:
    """--dict-size's argparse type: a tier name or a byte count (its range is the converter's)."""
    if text in DICT_TIERS:
        return text
    try:
        return int(text)
    except ValueError:
        names = ", ".join(DICT_TIERS)
        raise argparse.ArgumentTypeError(f"one of {names} or a byte count, not {text!r}") from None


def int_option(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse type: an int in minimum..maximum (no maximum: unbounded), so that a bad
    number is a usage error (exit 2) said before any work, not a traceback from deep inside the
    run. The demo's options use it too."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"an integer, not {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be <= {maximum}, got {value}")
        return value

    return parse


def seconds_option(text: str) -> float:
    """--seconds' argparse type: a finite number > 0. A timing round runs until that many
    seconds have passed: nan and inf would never end it, and 0 or less times one call."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number of seconds, not {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value
