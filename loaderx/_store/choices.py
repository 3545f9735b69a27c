"""Checks of the str choices the public constructors and functions take (codec=, mode=,
worker_type=, start_method=), with one rule and one message in both builds.

A choice is one of a few names, given as a str or a NumPy str (taken as the plain str). What is
no str at all (None where None means nothing, an int, bytes) is a TypeError; a str that names
none of the choices is a ValueError; both say "<name> must be one of <choices>, got <value>",
listing the choices (and "or None" where None picks the default) and naming the value given.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, TypeVar

Choice = TypeVar("Choice", bound=str)

# How worker processes may be started (multiprocessing's names), in the order they are listed.
START_METHODS: Final = ("spawn", "forkserver", "fork")


def _refused(name: str, value: object, choices: Sequence[str], optional: bool) -> Exception:
    listed = ", ".join(repr(choice) for choice in choices) + (" or None" if optional else "")
    error = ValueError if isinstance(value, str) else TypeError
    return error(f"{name} must be one of {listed}, got {value!r}")


def check_choice(name: str, value: object, choices: Sequence[Choice]) -> Choice:
    """value as the plain str among choices that it equals (also for a NumPy str); TypeError
    for what is no str, ValueError for another str (module docstring)."""
    if isinstance(value, str):
        for choice in choices:
            if value == choice:
                return choice
    raise _refused(name, value, choices, False)


def check_optional_choice(name: str, value: object, choices: Sequence[Choice]) -> Choice | None:
    """check_choice for a choice whose None means "the default" (start_method=)."""
    if value is None:
        return None
    if isinstance(value, str):
        for choice in choices:
            if value == choice:
                return choice
    raise _refused(name, value, choices, True)


__all__ = ["START_METHODS", "check_choice", "check_optional_choice"]
