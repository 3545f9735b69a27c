"""Checks of the arguments both loaders take (DataLoader, MixtureLoader), with the same messages.

The public parameters are typed SupportsIndex, not int, and converted here: mypyc checks an
int parameter at the call boundary, which refuses NumPy integers and names neither the
parameter nor what it takes ("int object expected; got numpy.int64").
"""

from __future__ import annotations

import operator
from typing import Final

from loaderx._loading.process_workers import default_start_method
from loaderx._store.choices import START_METHODS, check_choice, check_optional_choice

WORKER_TYPES: Final = ("thread", "process")


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


def worker_settings(worker_type: object, start_method: object) -> tuple[str, str]:
    """worker_type and start_method (None: the default) checked, as plain strs: TypeError for
    what is no str, ValueError for another str (loaderx._store.choices). Taken as objects:
    narrowed from `str | np.str_ | None` by an `is not None`, the compiled build cast
    start_method to str and refused 1 with mypyc's words before the check could name it."""
    kind = check_choice("worker_type", worker_type, WORKER_TYPES)
    method = check_optional_choice("start_method", start_method, START_METHODS)
    return kind, default_start_method() if method is None else method


__all__ = ["WORKER_TYPES", "as_int", "check_count", "worker_settings"]
