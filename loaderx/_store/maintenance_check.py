"""The maintenance check: a writable store's own check, run inside delete, compact and train_dict.

Checked before the call only, a store could be rolled over into a sharded dataset in another
process in between, and then changed under its manifest. So every writable Zrecord registers
here, and the native side runs its check once the call holds the store exclusively (no other
handle has it open, and every rollover or commit holds the store open from before it reads its
count until it has listed it: none is half done, none can start, and one that ended is seen).
"""

from __future__ import annotations

import ctypes
import itertools
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final, Protocol

from loaderx._native import library as _native


class MaintainedStore(Protocol):
    """A writable store as the check sees it (Zrecord)."""

    def _check_in_maintenance(self, operation: str) -> None: ...


class _Refusals(threading.local):
    """What a maintenance check refused with, on this thread: the check runs inside the
    native call, where it cannot raise, and the call that ran it raises it instead. And the
    caller's own check for one handle's maintenance on this thread (checked_by)."""

    error: BaseException | None = None
    check: tuple[object, Callable[[str], None]] | None = None


_refusals: Final = _Refusals()


def _maintenance_check(key: int | None, operation: Any, operation_size: int) -> int:
    """The native maintenance check of every writable handle (lx_store_set_maintenance_check,
    its context the handle's key in _MAINTAINED): the store's _check_in_maintenance. A handle
    that is the store's writer needs no shard check (no rollover can claim the store), and a
    dataset-owned one only its dataset's (checked_by). Nonzero refuses the call."""
    try:
        found = _MAINTAINED.get(key or 0)
        if found is not None:
            found._check_in_maintenance(ctypes.string_at(operation, operation_size).decode())
    except BaseException as error:  # a Ctrl-C too: raised by the call that ran the check
        _refusals.error = error
        return 1
    return 0


# One native callback for every handle (a thunk per handle would cost memory per shard), and
# the handles by key, weakly (a handle's key goes with it).
MAINTENANCE_CHECK: Final = _native.MaintenanceCheck(_maintenance_check)
_MAINTAINED: Final[weakref.WeakValueDictionary[int, MaintainedStore]] = (
    weakref.WeakValueDictionary()
)
_maintenance_keys: Final = itertools.count(1)


def register(store: MaintainedStore) -> int:
    """The key under which MAINTENANCE_CHECK finds `store` (its native context)."""
    key = next(_maintenance_keys)
    _MAINTAINED[key] = store
    return key


def check_maintenance(code: int, context: str) -> None:
    """_native.check for delete, compact and train_dict: what their maintenance check refused
    with, if it did, or else the status's own exception."""
    refusal = _refusals.error
    if refusal is not None:
        _refusals.error = None
        raise refusal
    _native.check(code, context)


def caller_check(store: object) -> Callable[[str], None] | None:
    """The check that this thread's caller set for `store`'s maintenance (checked_by), if any."""
    caller = _refusals.check
    if caller is not None and caller[0] is store:
        return caller[1]
    return None


@contextmanager
def checked_by(store: object, check: Callable[[str], None]) -> Iterator[None]:
    """In the block, `store`'s maintenance on this thread also runs check(operation)."""
    previous = _refusals.check
    _refusals.check = (store, check)
    try:
        yield
    finally:
        _refusals.check = previous
