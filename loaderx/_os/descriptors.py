"""The process's file descriptor limit: raising the soft RLIMIT_NOFILE when stores need it, and
the error that says what to do when it cannot rise further.

A store holds descriptors for as long as it is open (README, "Sharded datasets": "Open
descriptors"), so a dataset of a few hundred shards needs more than the soft limit of 1024 that
Debian/Ubuntu login shells and systemd services give. The soft limit is raised lazily, towards
the hard limit as Go's runtime does: when a store open, a lock file open, an append or a read
that maps a chunk for the first time (library.read_status) fails with EMFILE (the call is then
made once more), and before a store opens when the stores this process has
open would come near the soft limit, so the first EMFILE does not land in a file open that has
no retry (a manifest, a schema). A process that never opens that many stores never changes its
limit. Windows has no `resource` module and no such limit; nothing is raised there.

A user who wants no process-wide change turns the raising off, with LOADERX_RAISE_NOFILE=0 (read
each time loaderx would raise the limit) or set_raise_descriptor_limit(False) (which wins over
the variable); a shortage then raises DescriptorLimitError at once.

Left interpreted: it runs only on store opens and on failures.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from typing import BinaryIO, Final, TypeVar, cast

from loaderx._os.fork_safe_lock import ForkSafeLock
from loaderx.errors import DescriptorLimitError

try:
    import resource
except ImportError:  # pragma: no cover - Windows
    resource = None  # type: ignore[assignment]

# What one open store holds: its folder, open.lock, meta.zr and sums.zr read-only; a writable
# handle also maintenance.lock, and its writer writer.lock and the chunk it writes.
PER_READER: Final = 4
PER_WRITER: Final = 7
# Descriptors left to everything else (manifests, schemas, lock probes, the caller's own files)
# when deciding ahead of an open whether the stores come near the soft limit.
RESERVE: Final = 64
# The soft limit asked for when the hard limit is unlimited (Linux refuses more than nr_open,
# 2^20 by default; macOS more than OPEN_MAX); halved until the kernel accepts it.
UNLIMITED_TARGET: Final = 1 << 20

# The variable that turns the raising off ("0", "false", "no" or "off").
ENV_RAISE: Final = "LOADERX_RAISE_NOFILE"
_ENV_OFF: Final = frozenset({"0", "false", "no", "off"})

T = TypeVar("T")

_lock: Final = ForkSafeLock()  # proof against an interrupt as it is taken, renewed in a child
# How many times this process raised its soft limit: a call that failed with EMFILE compares
# the count it saw before the call, so two threads that fail at once raise the limit once.
_raised_count: int = 0
# The soft limit as last read (None until the first store open needs it).
_soft_seen: int | None = None
# set_raise_descriptor_limit's choice; None follows LOADERX_RAISE_NOFILE.
_raise_chosen: bool | None = None


def set_raise_descriptor_limit(enabled: bool | None) -> None:
    """Whether loaderx may raise the process's soft RLIMIT_NOFILE when its stores need more
    descriptors (the default). False leaves the limit as the process was given it: a shortage
    raises DescriptorLimitError instead. None goes back to the environment variable
    LOADERX_RAISE_NOFILE ("0", "false", "no" or "off" turn the raising off)."""
    global _raise_chosen
    _raise_chosen = enabled


def raise_enabled() -> bool:
    """Whether the soft limit may be raised now: the function's choice, else the variable."""
    if _raise_chosen is not None:
        return _raise_chosen
    return os.environ.get(ENV_RAISE, "1").strip().lower() not in _ENV_OFF


def raised_count() -> int:
    """The count a caller reads before a call whose EMFILE it may retry (raise_soft_limit)."""
    return _raised_count


def limits() -> tuple[int, int] | None:
    """(soft, hard) RLIMIT_NOFILE, -1 for unlimited; None where the platform has none."""
    if resource is None:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return int(soft), int(hard)


def raise_soft_limit(seen_count: int) -> bool:
    """Raises the soft limit as far towards the hard limit as the kernel allows. True when the
    limit rose (or another thread raised it since the caller read `seen_count`), so a call that
    failed with EMFILE is worth making once more; False when the soft limit is already the
    hard limit (or the platform has no limit)."""
    global _raised_count, _soft_seen
    if not raise_enabled():
        return False
    with _lock:
        if _raised_count != seen_count:
            return True
        current = limits()
        if current is None:
            return False
        soft, hard = current
        if soft == resource.RLIM_INFINITY:
            return False
        target = UNLIMITED_TARGET if hard == resource.RLIM_INFINITY else hard
        while True:  # CPython gh-130279: tests/repo/test_interruptible_loops.py
            if target <= soft:
                break
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            except (ValueError, OSError):
                target //= 2  # above what the kernel allows (nr_open, OPEN_MAX)
                continue
            _raised_count += 1
            _soft_seen = target
            return True
        return False


def make_room(open_stores: int) -> None:
    """Before a store opens: raises the soft limit when `open_stores` writable stores and the
    new one would come within RESERVE of it. A limit that cannot rise is left to the open."""
    global _soft_seen
    needed = (open_stores + 1) * PER_WRITER + RESERVE
    soft = _soft_seen
    if soft is not None and (soft < 0 or needed <= soft):
        return
    current = limits()
    if current is None:
        _soft_seen = -1
        return
    _soft_seen = current[0]
    if current[0] >= 0 and needed > current[0]:
        raise_soft_limit(raised_count())


def advice() -> str:
    """What a DescriptorLimitError says beyond its cause: the limit, the cost of a shard, and
    what to do."""
    current = limits()
    if current is None:
        held = "the process's limit is reached"
    else:
        soft, hard = current
        shown = "unlimited" if hard < 0 else str(hard)
        held = f"the process's limit (RLIMIT_NOFILE) is {soft}, its hard limit {shown}"
        if not raise_enabled():
            held += (f", and loaderx was told not to raise it ({ENV_RAISE}=0 or "
                     "set_raise_descriptor_limit(False))")
        elif soft == hard:
            held += ", so loaderx cannot raise it further"
    return (
        f"out of file descriptors: {held}. Each open store (shard) holds {PER_READER} "
        f"descriptors read-only and {PER_WRITER - 2} writable (its writer 2 more); raise the "
        "limit before starting Python ('ulimit -n N' in the shell; above the hard limit only "
        "root can, e.g. LimitNOFILE= in a systemd unit or nofile in limits.conf), or open "
        "fewer shards at once"
    )


def limit_error(message: str) -> DescriptorLimitError:
    """The error for a call that failed with EMFILE: `message` (what failed) and the advice."""
    return DescriptorLimitError(errno.EMFILE, f"{message}: {advice()}")


def retrying(call: Callable[[], T], context: str) -> T:
    """`call()`, made once more after raising the soft limit when it fails with EMFILE (an
    OSError with that errno, which includes DescriptorLimitError). A second EMFILE, or one the
    limit cannot rise for, raises DescriptorLimitError (a plain OSError's message is prefixed
    with `context`). `call` must be safe to repeat after an EMFILE (an open that failed
    changed nothing)."""
    seen = _raised_count
    try:
        return call()
    except OSError as exc:
        if exc.errno != errno.EMFILE:
            raise
        if not raise_soft_limit(seen):
            raise _final(exc, context) from exc
    try:
        return call()
    except OSError as exc:
        if exc.errno != errno.EMFILE:
            raise
        raise _final(exc, context) from exc


def _final(exc: OSError, context: str) -> DescriptorLimitError:
    if isinstance(exc, DescriptorLimitError):
        return exc  # from the native side: its message already ends with the advice
    return limit_error(f"{context}: {exc}")


def os_open(path: str, flags: int, mode: int = 0o777) -> int:
    """os.open, retried once as `retrying` says when the process is out of descriptors."""
    return retrying(lambda: os.open(path, flags, mode), f"cannot open {path!r}")


def open_binary(path: str, mode: str) -> BinaryIO:
    """open(path, mode) for a binary mode ("rb", "wb", "xb"), retried once as `retrying` says."""
    return retrying(lambda: cast(BinaryIO, open(path, mode)), f"cannot open {path!r}")
