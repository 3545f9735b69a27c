"""JAX helpers: device prefetch that overlaps host-to-device copies with compute, multi-host shards.

jax stays optional: it is imported here only, and `import loaderx.dataset` never needs it.

- ``device_prefetch(loader, size=2, sharding=None)`` wraps any iterator of batches (a
  DataLoader, a MixtureLoader, a generator). A batch is any pytree of arrays, as flax's
  ``prefetch_to_device`` takes: a dict, a tuple ``(x, y)``, nested dicts, a single array. It
  keeps ``size`` batches already handed to ``jax.device_put``: JAX dispatches the copy
  asynchronously, so batch k+1 travels to the device while step k computes. With
  ``sharding=`` each array is placed with that sharding; when several processes run
  (multi-host), each contributes its local rows and the result is a global array
  (``jax.make_array_from_process_local_data``). When the loader was made with
  ``reuse_buffers=True`` (it writes later steps into the arrays it handed out), each array is
  first copied on the host: ``device_put`` may alias the NumPy batch (it does on CPU) or read
  it after returning (its copy is asynchronous, even with ``may_alias=False``), and device
  arrays already yielded would change when the loader writes a later step there. Without
  reuse_buffers nothing is copied beyond the transfer. An array in non-native byte order (a
  dataset stored as ``'>f4'`` on a little-endian host), which JAX refuses, is converted to the
  native dtype with the same values (one copy), as the torch adapters do.
- Leaving its ``with`` block (``close()``) drops the batches in flight and never closes the
  loader, which the caller made and may go on using. A loaderx loader that is still open is
  first moved back to the first batch not yielded (``load_state_dict``), so iterating it on, or
  wrapping it again, skips nothing; another iterator keeps the steps it already handed over.
- Errors keep their step: an exception raised by ``next(loader)`` (or by the placement) for
  step k is raised by the ``next()`` that would have returned step k, after every earlier batch
  was returned, as the DataLoader does. Nothing more is asked of the loader until that error
  was raised, and the next ``next()`` goes on with step k+1 (if the loader does).
- ``process_shard()`` is the ``shard=`` for this process: ``(jax.process_index(),
  jax.process_count())``, so every host's loader takes its slice of each global batch.
- ``global_batch(batch, sharding)`` builds global arrays from this process's rows.

Do not call ``float(loss)`` on every step: it waits for the device and so undoes the overlap.
Keep losses as device arrays and read them every few hundred steps.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

import jax
import numpy as np

from loaderx._loading.loader_arguments import check_count
from loaderx._loading.loader_shell import LoaderShell
from loaderx._loading.prefetch import DEPTH_MAX

__all__ = ["DevicePrefetch", "device_prefetch", "global_batch", "process_shard"]

SIZE_DEFAULT: Final = 2


def process_shard() -> tuple[int, int]:
    """(index, count) of this process among all JAX processes: pass it as shard= to a loader."""
    return jax.process_index(), jax.process_count()


# Leaves placed as they are when their dtype is placeable; any other leaf must convert to a
# NumPy array of a placeable dtype.
_ARRAY_LEAVES: Final = (np.ndarray, np.generic, jax.Array)
_SCALAR_LEAVES: Final = (bool, int, float, complex)


def _placeable(dtype: np.dtype[Any]) -> bool:
    """False for dtypes no device holds: objects, strings, dates and structured records.
    (bfloat16 and the float8 types of ml_dtypes are kind 'V' without fields, and placeable.)"""
    return dtype.kind not in "OUSMm" and dtype.fields is None


def _leaf(path: tuple[Any, ...], leaf: object, function: str) -> Any:
    """leaf as device_put takes it: an array as it is, an array-like (a CPU torch tensor, say)
    through np.asarray; anything else (a string, an object array) is a TypeError naming where
    in the batch it sits, raised before any array of the batch moves."""
    if isinstance(leaf, _SCALAR_LEAVES):
        return leaf
    array: Any = leaf
    if not isinstance(leaf, _ARRAY_LEAVES) and not isinstance(leaf, (str, bytes)):
        try:
            array = np.asarray(leaf)
        except (TypeError, ValueError):
            pass
    if not isinstance(array, _ARRAY_LEAVES) or not _placeable(np.dtype(array.dtype)):
        detail = f" of dtype {array.dtype}" if isinstance(array, _ARRAY_LEAVES) else ""
        raise TypeError(
            f"{function} places batches whose leaves are numeric arrays (a pytree of them: a "
            f"dict, a tuple, nested dicts); the leaf at batch{jax.tree_util.keystr(path)} is "
            f"{type(leaf).__name__}{detail}"
        )
    _check_range(path, array, function)
    return array


def _check_range(path: tuple[Any, ...], array: Any, function: str) -> None:
    """Refuses 64-bit integers that JAX would wrap. With jax_enable_x64 off (JAX's default)
    device_put stores int64 as int32 and uint64 as uint32 without a word, so 2**40 + 5 arrives
    as 5: a label set or ids past 2**31 would train on other values. Values that fit pass (the
    usual int64 labels from np.arange); the check reads only 64-bit integer leaves."""
    dtype = np.dtype(array.dtype).newbyteorder("=")
    if dtype.kind not in "iu" or dtype.itemsize != 8 or np.size(array) == 0:
        return
    device = np.dtype(jax.dtypes.canonicalize_dtype(dtype))
    if device == dtype:
        return  # jax_enable_x64 is on: nothing narrows
    low, high = np.iinfo(device).min, np.iinfo(device).max
    smallest, largest = np.min(array), np.max(array)
    if smallest < low or largest > high:
        raise OverflowError(
            f"{function}: the leaf at batch{jax.tree_util.keystr(path)} is {dtype} with values "
            f"in [{smallest}, {largest}], and with jax_enable_x64 off JAX stores it as {device} "
            f"([{low}, {high}]), wrapping the rest without a word. Turn on "
            "jax.config.update('jax_enable_x64', True), or map the values into range in the "
            "loader's transform."
        )


def _native(value: Any) -> Any:
    """value in native byte order. A dataset stored in the other one (dtype '>f4' on a
    little-endian host) gives such arrays, and JAX refuses them ("Dtype >f4 is not a valid JAX
    array type"); they are converted once, keeping their values, as the torch adapters do.
    Anything else is returned as it is."""
    if isinstance(value, np.ndarray) and not value.dtype.isnative:
        return value.astype(value.dtype.newbyteorder("="))
    return value


def _host_copy(value: Any) -> Any:
    """A new host array with value's values, in native byte order: one copy, also for a swapped
    array (astype swaps as it copies)."""
    array = np.asarray(value)
    return array.astype(array.dtype.newbyteorder("="), copy=True)


def _leaves_mapped(batch: Any, function: str, place: Callable[[Any], Any]) -> Any:
    """batch with place applied to each of its leaves, every leaf checked (_leaf) before the
    first is placed."""
    flat, tree = jax.tree_util.tree_flatten_with_path(batch)
    leaves = [_leaf(path, leaf, function) for path, leaf in flat]
    return jax.tree_util.tree_unflatten(tree, [place(leaf) for leaf in leaves])


def global_batch(batch: Any, sharding: jax.sharding.Sharding) -> Any:
    """Global arrays sharded by `sharding`, from this process's rows of each array in batch
    (any pytree of arrays; the result has its structure).

    Every process passes its own rows (what its loader with shard=process_shard() gave it); the
    global array's leading dimension is the sum over processes.
    """
    return _leaves_mapped(
        batch, "global_batch",
        lambda value: jax.make_array_from_process_local_data(  # type: ignore[no-untyped-call]
            sharding, _native(np.asarray(value))
        ),
    )


def _place(batch: Any, sharding: jax.sharding.Sharding | None, copy: bool) -> Any:
    """Device arrays of batch (a pytree, whose structure the result keeps); with copy, none of
    them reads memory the loader writes again.

    copy is for loaders that write later steps into this batch's arrays (reuse_buffers). The
    copy is made on the host, before device_put: device_put may alias a NumPy array (it does on
    CPU), and even with ``may_alias=False`` its copy is asynchronous and may read the array after
    device_put returned, when the loader may already be writing the next step into it.
    """
    if copy:
        batch = _leaves_mapped(batch, "device_prefetch", _host_copy)
    if sharding is not None and jax.process_count() > 1:
        return global_batch(batch, sharding)
    if sharding is None:
        return _leaves_mapped(batch, "device_prefetch", lambda value: jax.device_put(_native(value)))
    return _leaves_mapped(
        batch, "device_prefetch", lambda value: jax.device_put(_native(value), sharding)
    )


class _Unplaced:
    """A queued step whose batch came from the loader but is not on the device yet (an
    interrupt cut its placement short): placed in its turn."""

    def __init__(self, host: Any) -> None:
        self.host = host


class _Failed:
    """A queued step that raised: its error, kept for its turn."""

    def __init__(self, error: Exception) -> None:
        self.error = error


class DevicePrefetch:
    """Iterates device-resident batches, keeping `size` of them in flight; see the module doc.

    state_dict() is the wrapped loader's state moved back by the batches still queued here, so
    it names the next batch this iterator yields, not the next one the loader computes. A step's
    error is raised in that step's turn, as the DataLoader raises it (module doc).
    ``copy`` is true when the loader has ``reuse_buffers`` set (a DataLoader made with
    reuse_buffers=True): each array is then copied on the host before it is placed, so no device
    array depends on memory the loader writes again. close() (the end of a ``with`` block)
    leaves the loader open, moved back to the first batch not yielded when it is a loaderx
    loader (module doc).
    """

    def __init__(
        self, loader: Iterator[Any], size: int = SIZE_DEFAULT,
        sharding: jax.sharding.Sharding | None = None,
    ) -> None:
        if not hasattr(loader, "__next__"):
            raise TypeError(
                f"device_prefetch takes an iterator of batches (a DataLoader), not "
                f"{type(loader).__name__}"
            )
        if isinstance(size, bool):
            raise TypeError("size must be an int (batches on the device ahead), not bool")
        # Capped as the loaders' prefetch is: a larger size is a unit mix-up, and would pin
        # that many batches in device memory.
        size = check_count("size", size, DEPTH_MAX)
        if sharding is not None and not isinstance(sharding, jax.sharding.Sharding):
            raise TypeError(f"sharding must be a jax.sharding.Sharding, not {type(sharding).__name__}")
        self.loader = loader
        self.size = size
        self.sharding = sharding
        self.copy: bool = getattr(loader, "reuse_buffers", False) is True
        self.closed = False
        # Steps in order: a placed batch, a step that failed, or one not placed yet.
        self._queue: deque[Any] = deque()

    def __iter__(self) -> DevicePrefetch:
        return self

    def _fill(self) -> None:
        """Takes steps from the loader until `size` are queued, the loader ends, or a step
        failed: the loader is not asked for more before the caller has seen that error."""
        while len(self._queue) < self.size:
            if self._queue and isinstance(self._queue[-1], _Failed):
                return
            try:
                host = next(self.loader)
            except StopIteration:
                return
            except Exception as error:  # raised in its step's turn, after the batches before it
                self._queue.append(_Failed(error))
                continue
            # Queued before it is placed: an interrupt during the placement (a host copy and a
            # transfer, the widest window) leaves it queued, to be placed in its turn.
            self._queue.append(_Unplaced(host))
            self._queue[-1] = self._placed(host)

    def _placed(self, host: Any) -> Any:
        """The placed batch, or the step's error as a _Failed."""
        try:
            return _place(host, self.sharding, self.copy)
        except Exception as error:  # raised in its step's turn, as the loader's own errors
            return _Failed(error)

    def __next__(self) -> Any:
        if self.closed:
            raise StopIteration
        self._fill()
        if not self._queue:
            raise StopIteration
        first = self._queue[0]
        if isinstance(first, _Unplaced):  # its placement was interrupted: placed now
            self._queue[0] = self._placed(first.host)
        entry = self._queue.popleft()
        if isinstance(entry, _Failed):
            raise entry.error
        try:
            self._fill()  # the next copy starts now, while the caller computes on this batch
        except BaseException:
            # A KeyboardInterrupt (or the like) goes up at once; the batch it interrupted stays
            # first in line, so the next next() returns it.
            self._queue.appendleft(entry)
            raise
        return entry

    @property
    def step(self) -> int:
        """The step of the next batch this iterator yields."""
        return int(getattr(self.loader, "step")) - len(self._queue)

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = getattr(self.loader, "state_dict")()
        return {**state, "step": state["step"] - len(self._queue)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """The wrapped loader's load_state_dict, then the batches in flight dropped: a state
        the loader refuses changes nothing here either (the queue keeps its batches)."""
        getattr(self.loader, "load_state_dict")(state)
        self._queue.clear()

    def close(self) -> None:
        """Drops the batches in flight; idempotent. The loader stays open: the caller made it
        and may use it on. A loaderx loader still open is moved back first, so that its next
        batch is the first one this iterator did not yield."""
        if self.closed:
            return
        self.closed = True
        try:
            loader = self.loader
            if self._queue and isinstance(loader, LoaderShell) and not loader.closed:
                loader.load_state_dict(self.state_dict())
        finally:
            self._queue.clear()

    def __enter__(self) -> DevicePrefetch:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def device_prefetch(
    loader: Iterator[Any], size: int = SIZE_DEFAULT,
    sharding: jax.sharding.Sharding | None = None,
) -> DevicePrefetch:
    """Device-resident batches from loader, `size` copies in flight (double-buffered at 2)."""
    return DevicePrefetch(loader, size, sharding)
