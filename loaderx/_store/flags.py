"""Checks of the boolean flags the public constructors and functions take (readonly=, verify=,
reuse_buffers=, overwrite=, append=, truncate=), with one message in both builds.

A flag is True or False, as a Python bool or a NumPy bool (what a comparison of arrays, or a
value read from an .npz config, gives). Anything else is refused with a TypeError naming the
parameter and the value: a truthy stand-in such as readonly="no" or readonly=1 was taken for
True by the interpreted build, while the compiled one refused even np.True_ with mypyc's
"bool object expected; got numpy.bool".

A compiled function's flag parameters are annotated `Flag` (bool | np.bool_), not bool: mypyc
checks a bool annotation at the call boundary, with its own words, before the body runs; the
NumPy class makes the union a plain object there, so the value reaches check_flag.
"""

from __future__ import annotations

from typing import TypeAlias

import numpy as np

# What a flag parameter takes (module docstring).
Flag: TypeAlias = bool | np.bool_


def check_flag(name: str, value: object) -> bool:
    """value as a Python bool (a bool or a NumPy bool), or TypeError naming the parameter."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {value!r}")


def check_optional_flag(name: str, value: object) -> bool | None:
    """check_flag for a flag whose None means "the default" (verify=)."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{name} must be True, False or None, got {value!r}")


__all__ = ["Flag", "check_flag", "check_optional_flag"]
