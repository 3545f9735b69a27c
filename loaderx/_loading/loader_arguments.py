"""Checks of the arguments both loaders take (DataLoader, MixtureLoader), with the same messages.

The public parameters are typed SupportsIndex, not int, and converted here: mypyc checks an
int parameter at the call boundary, which refuses NumPy integers and names neither the
parameter nor what it takes ("int object expected; got numpy.int64").
"""

from __future__ import annotations

import operator


def as_int(name: str, value: object, got: str = "not") -> int:
    """value as a Python int (Python and NumPy integers), or TypeError naming the parameter."""
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name} must be an int, {got} {type(value).__name__}") from None


def check_count(name: str, value: object, maximum: int) -> int:
    """value as an int in 1..maximum, or TypeError / ValueError naming the parameter."""
    count = as_int(name, value)
    if count < 1 or count > maximum:
        raise ValueError(f"{name} must be in 1..{maximum}, got {count}")
    return count


__all__ = ["as_int", "check_count"]
