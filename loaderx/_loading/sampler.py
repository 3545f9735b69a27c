"""Sampler: the record indices of every training step, a thin typed layer over lx_sampler_batch.

Every batch is a pure function of (length, batch_size, mode, seed, step, shard): nothing is
carried from one step to the next, so a run resumes exactly by asking for the step it stopped
at, whatever the number of threads or hosts. One native call writes a whole batch.

Modes (the exact definitions are in zig/src/sampler/sampler.zig):

- ``"sequential"``: step k reads the window starting at k * global_batch_size, wrapping around
  the end of the index space.
- ``"iid"``: uniform draws with replacement: a SplitMix64 stream keyed by the seed, counted from
  step * global_batch_size, reduced to [0, length) by Lemire's multiply-shift with rejection
  (unbiased).
- ``"cyclic"``: without replacement. Cycle c (steps_per_cycle steps) walks a fresh permutation
  of [0, length), a Feistel network keyed by (seed, c) over the next power of two, brought into
  range by cycle-walking. A cycle drops length mod global_batch_size records, a different set
  each cycle.

Sharding: with ``shard=(index, count)`` the global batch of a step has batch_size * count
indices and this host takes the contiguous slice [index * batch_size, (index + 1) * batch_size).
The global batch depends only on batch_size * count, so a run may resume on another number of
hosts (with batch_size adjusted) and see the same global batches.

Left interpreted (not compiled with mypyc): the work is one ctypes call per batch.
"""

from __future__ import annotations

import ctypes
import operator
import sys
from functools import partial
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, Literal, NoReturn, SupportsIndex

import numpy as np
import numpy.typing as npt

from loaderx._native import library as _native
from loaderx._store.choices import check_choice

__all__ = ["Sampler", "MODES", "Mode"]

MODES: Final = ("sequential", "iid", "cyclic")
# The mode names as a type, so that mypy catches mode="random" before anything runs.
Mode = Literal["sequential", "iid", "cyclic"]
_MODE_IDS: Final = {
    "sequential": _native.SAMPLER_SEQUENTIAL,
    "iid": _native.SAMPLER_IID,
    "cyclic": _native.SAMPLER_CYCLIC,
}

# Indices are int64, so the index space is at most 2^63 records.
LENGTH_MAX: Final = 1 << 63
# A batch is one int64 array, so it must be addressable.
BATCH_SIZE_MAX: Final = sys.maxsize // 8
# Seeds and steps are unsigned 64-bit integers on the native side.
SEED_LIMIT: Final = 1 << 64
STEP_LIMIT: Final = 1 << 64

_INT64: Final = np.dtype(np.int64)
# A writable array's data address is _addressof(_first_byte(array)): two C calls, about half
# the cost of array.ctypes.data. from_buffer also refuses read-only memory.
_first_byte: Final[Callable[[Any], ctypes.c_char]] = ctypes.c_char.from_buffer
_addressof: Final = ctypes.addressof
# np.frombuffer over a ctypes array (NumPy's stubs do not list ctypes arrays as buffers).
_wrap: Final[Callable[[Any, np.dtype[np.int64]], npt.NDArray[np.int64]]] = np.frombuffer
_U64_MAX: Final = (1 << 64) - 1


def check_integer(value: object, name: str) -> int:
    """value as a Python int (Python and NumPy integers); TypeError for anything else."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, not bool")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name} must be an integer, not {type(value).__name__}") from None


def check_mode(mode: object) -> Mode:
    """mode as one of MODES (a plain str, also for a NumPy str); TypeError for what is no
    str, ValueError for another str, both listing the modes (loaderx._store.choices)."""
    return check_choice("mode", mode, MODES)


def check_step(step: object) -> int:
    """A valid step as a Python int: 0 <= step < 2**64."""
    value = check_integer(step, "step")
    if value < 0:
        raise ValueError(f"step must be >= 0, got {value}")
    if value >= STEP_LIMIT:
        raise ValueError(f"step must be < 2**64, got {value}")
    return value


def check_shard(shard: object) -> tuple[int, int]:
    """(index, count) of a shard; None means the single host (0, 1)."""
    if shard is None:
        return 0, 1
    if not isinstance(shard, (tuple, list)) or len(shard) != 2:
        raise TypeError(f"shard must be None or a pair (index, count), got {shard!r}")
    index = check_integer(shard[0], "shard index")
    count = check_integer(shard[1], "shard count")
    if count < 1:
        raise ValueError(f"shard count must be >= 1, got {count}")
    if not 0 <= index < count:
        raise ValueError(f"shard index must be in [0, {count}), got {index}")
    return index, count


class Sampler:
    """Indices of each step's batch for an index space of ``length`` records.

    ``batch(step)`` returns a new int64 array of ``batch_size`` indices, ``fill(step, out)``
    writes them into a caller's array (the allocation-free path), and iteration yields the
    batches of steps start_step, start_step + 1, ... without end. Seeds are integers in
    [0, 2**64); reduce larger or negative seeds yourself (for example ``seed % 2**64``).
    """

    _length: Final[int]
    _batch_size: Final[int]
    _mode: Final[str]
    _seed: Final[int]
    _shard_index: Final[int]
    _shard_count: Final[int]
    _global_batch_size: Final[int]
    _steps_per_cycle: Final[int | None]

    def __init__(
        self,
        length: SupportsIndex,
        batch_size: SupportsIndex,
        mode: Mode | np.str_ = "cyclic",
        seed: SupportsIndex = 0,
        shard: Sequence[SupportsIndex] | None = None,
    ) -> None:
        length = check_integer(length, "length")
        batch_size = check_integer(batch_size, "batch_size")
        seed = check_integer(seed, "seed")
        shard_index, shard_count = check_shard(shard)
        mode = check_mode(mode)
        mode_id = _MODE_IDS[mode]
        if length < 1:
            raise ValueError(f"length must be >= 1 (there is nothing to sample), got {length}")
        if length > LENGTH_MAX:
            raise ValueError(f"length must be <= 2**63, got {length}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if batch_size > BATCH_SIZE_MAX:
            raise ValueError(f"batch_size {batch_size} is larger than an array can be")
        if not 0 <= seed < SEED_LIMIT:
            raise ValueError(
                f"seed must be in [0, 2**64), got {seed}; reduce it first, e.g. seed % 2**64"
            )
        global_batch_size = batch_size * shard_count
        if global_batch_size > _U64_MAX:
            raise ValueError(
                f"the global batch batch_size * shard count = {global_batch_size} is too large"
            )
        steps_per_cycle: int | None = None
        if mode == "cyclic":
            if global_batch_size > length:
                raise ValueError(
                    f"cyclic mode needs batch_size * shard count ({batch_size} * {shard_count})"
                    f" <= length ({length}): a batch never repeats an index"
                )
            steps_per_cycle = length // global_batch_size

        self._length = length
        self._batch_size = batch_size
        self._mode = mode
        self._seed = seed
        self._shard_index = shard_index
        self._shard_count = shard_count
        self._global_batch_size = global_batch_size
        self._steps_per_cycle = steps_per_cycle
        # The call's constant arguments, prepared once in one struct: a batch passes only its
        # address, the step and the output (each argument costs ctypes a conversion).
        self._request = _native.SamplerRequest(
            mode_id, 0, length, batch_size, seed, shard_index, shard_count
        )
        self._request_address = _addressof(self._request)
        self._buffer_type = ctypes.c_int64 * batch_size
        # batch() passes a fresh array of exactly this type (fill() passes an address).
        self._batch_native = _native.typed_pointer("lx_sampler_batch", 2, self._buffer_type)
        self._fill_native = _native.lib.lx_sampler_batch

    # Read-only: the native request was made from these values, so a changed one would only
    # be believed by the Python side (fill() would check `out` against a batch size the native
    # sampler does not write).
    @property
    def length(self) -> int:
        """The number of records sampled from (indices are in [0, length))."""
        return self._length

    @property
    def batch_size(self) -> int:
        """This host's batch size (its share of the global batch)."""
        return self._batch_size

    @property
    def mode(self) -> str:
        """"sequential", "iid" or "cyclic"."""
        return self._mode

    @property
    def seed(self) -> int:
        """The seed every batch is a function of, with its step."""
        return self._seed

    @property
    def shard_index(self) -> int:
        """This host's index among shard_count hosts."""
        return self._shard_index

    @property
    def shard_count(self) -> int:
        """How many hosts share each global batch."""
        return self._shard_count

    @property
    def global_batch_size(self) -> int:
        """batch_size * shard_count: the batch all hosts draw together."""
        return self._global_batch_size

    @property
    def steps_per_cycle(self) -> int | None:
        """Steps per pass over every record in cyclic mode (None in the other modes)."""
        return self._steps_per_cycle

    @property
    def shard(self) -> tuple[int, int]:
        """(index, count): this host's place among the hosts sharing each global batch."""
        return self._shard_index, self._shard_count

    def __repr__(self) -> str:
        return (
            f"Sampler(length={self._length}, batch_size={self._batch_size}, mode={self._mode!r}, "
            f"seed={self._seed}, shard={self.shard!r})"
        )

    def __reduce__(self) -> tuple[type[Sampler], tuple[int, int, str, int, tuple[int, int]]]:
        # Pickles by its arguments (the ctypes fields are rebuilt), e.g. for worker processes.
        return Sampler, (self._length, self._batch_size, self._mode, self._seed, self.shard)

    def filler(self) -> Callable[[int, int], int]:
        """fill without its checks, as a call (step, address) -> native status, for a caller
        that owns its output: a step in 0..2**64 - 1 and the address of a writable, C-contiguous
        int64 array of batch_size that the caller keeps alive (and this Sampler with it). The
        DataLoader's index ring is checked once when it is made; a step then costs about a
        microsecond less than fill (the checks, the address, a Python frame). On a nonzero
        status, call fill for the step to raise its error."""
        return partial(self._fill_native, self._request_address)

    def _fail(self, code: int, step: int) -> NoReturn:
        _native.raise_status(code, f"sampling step {step} of {self!r}")

    def batch(self, step: SupportsIndex) -> npt.NDArray[np.int64]:
        """This host's indices for ``step``: a new int64 array of shape (batch_size,)."""
        if type(step) is not int or not 0 <= step <= _U64_MAX:
            step = check_step(step)
        # A ctypes array is the cheapest fresh buffer whose address ctypes knows (passing it is
        # free, unlike asking an ndarray for its address); NumPy then wraps it without a copy.
        # The call is written out here and in fill() rather than shared: a batch of 256
        # indices costs about a microsecond, so one more Python frame is a visible share.
        buffer = self._buffer_type()
        code = self._batch_native(self._request_address, step, buffer)
        if code:
            self._fail(code, step)
        return _wrap(buffer, _INT64)

    def fill(self, step: SupportsIndex, out: npt.NDArray[np.int64]) -> None:
        """Writes this host's indices for ``step`` into ``out``.

        ``out`` must be a writable, C-contiguous int64 array of shape (batch_size,).
        """
        if type(step) is not int or not 0 <= step <= _U64_MAX:
            step = check_step(step)
        if not isinstance(out, np.ndarray):
            raise TypeError(f"out must be a numpy.ndarray, not {type(out).__name__}")
        if out.dtype != _INT64:
            raise TypeError(f"out must have dtype int64, not {out.dtype}")
        if out.shape != (self._batch_size,):
            raise ValueError(f"out must have shape ({self._batch_size},), got {out.shape}")
        flags = out.flags
        if not flags.c_contiguous:
            raise ValueError("out must be C-contiguous")
        if not flags.writeable:
            raise ValueError("out must be writable")
        if not flags.aligned:
            # The library writes int64_t, which it may only do at an 8-byte boundary.
            raise ValueError("out must be aligned to 8 bytes (it is a view at an odd offset)")
        code = self._fill_native(self._request_address, step, _addressof(_first_byte(out)))
        if code:
            self._fail(code, step)

    def iter(self, start_step: SupportsIndex = 0) -> Iterator[npt.NDArray[np.int64]]:
        """The batches of steps start_step, start_step + 1, ... (endless; each a new array)."""
        # Checked here: in the generator a bad start_step would raise only at the first next().
        return self._batches(check_step(start_step))

    def _batches(self, step: int) -> Iterator[npt.NDArray[np.int64]]:
        while True:
            yield self.batch(step)
            step += 1

    def __iter__(self) -> Iterator[npt.NDArray[np.int64]]:
        return self.iter(0)
