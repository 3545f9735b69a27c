"""The shared-memory slots that worker processes write batches into and the consumer reads.

A slot is one file in /dev/shm (the temporary folder where there is none, as on macOS), mapped
by the consumer and by every worker process; it holds one batch, each key's array at a
64-byte-aligned offset given by the Layout. A slot's file is named by the ring's prefix and the
slot's number, so a worker opens any slot from its number alone. The consumer owns the files:
it creates them and unlinks them on close.

Left interpreted: a slot is mapped once and then written with one copy per key.
"""

from __future__ import annotations

import mmap
import os
import secrets
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

_ALIGN = 64


def _shared_folder() -> Path:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() else Path(tempfile.gettempdir())


class Layout:
    """Key, dtype, shape and offset of every array of a batch: fixed by the first step."""

    def __init__(self, batch: Mapping[str, object]) -> None:
        self.entries: list[tuple[str, np.dtype[Any], tuple[int, ...], int]] = []
        offset = 0
        for key, value in batch.items():
            if not isinstance(value, np.ndarray):
                raise TypeError(
                    f"worker processes need the transform to return NumPy arrays; key {key!r} "
                    f"is a {type(value).__name__}"
                )
            if value.dtype.hasobject:
                raise TypeError(f"key {key!r} holds Python objects ({value.dtype}), which "
                                "cannot live in shared memory")
            self.entries.append((key, value.dtype, value.shape, offset))
            offset += (value.nbytes + _ALIGN - 1) // _ALIGN * _ALIGN
        self.size = max(offset, _ALIGN)

    def check(self, batch: Mapping[str, object]) -> None:
        """ValueError naming the first key whose array differs from the first step's."""
        keys = [entry[0] for entry in self.entries]
        if list(batch) != keys:
            raise ValueError(
                f"the transform returned the keys {list(batch)}, the first step had {keys}: "
                "with worker processes every step must have the same keys, shapes and dtypes"
            )
        for key, dtype, shape, _ in self.entries:
            value = batch[key]
            if not isinstance(value, np.ndarray) or value.dtype != dtype or value.shape != shape:
                got = (f"{value.dtype} {value.shape}" if isinstance(value, np.ndarray)
                       else type(value).__name__)
                raise ValueError(
                    f"the transform returned {got} for key {key!r}, the first step had {dtype} "
                    f"{shape}: with worker processes every step must have the same shapes and "
                    "dtypes (pad to a fixed shape, or use worker_type='thread')"
                )


class SlotFiles:
    """The named files of one ring; the consumer makes them, a worker opens them by number."""

    def __init__(self, prefix: str, size: int) -> None:
        self.prefix = prefix
        self.size = size

    @staticmethod
    def new_prefix() -> str:
        return str(_shared_folder() / f"loaderx-{os.getpid()}-{secrets.token_hex(4)}")

    def path(self, slot: int) -> str:
        return f"{self.prefix}-{slot}"

    def create(self, slot: int) -> mmap.mmap:
        fd = os.open(self.path(slot), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, self.size)
            return mmap.mmap(fd, self.size)
        finally:
            os.close(fd)

    def open(self, slot: int) -> mmap.mmap:
        fd = os.open(self.path(slot), os.O_RDWR)
        try:
            return mmap.mmap(fd, self.size)
        finally:
            os.close(fd)

    def unlink_all(self) -> None:
        """Removes every slot file of the ring, found by name: also one whose creation an
        interrupt (Ctrl-C) cut short before the consumer recorded it."""
        folder, name = os.path.split(self.prefix)
        for path in Path(folder).glob(f"{name}-*"):
            try:
                path.unlink()
            except FileNotFoundError:
                pass


def write_batch(layout: Layout, memory: mmap.mmap, batch: Mapping[str, Any]) -> None:
    """Copies every array of batch into its place in a slot (checked against the layout)."""
    layout.check(batch)
    for key, dtype, shape, offset in layout.entries:
        target = np.frombuffer(memory, dtype=dtype, count=int(np.prod(shape)), offset=offset)
        np.copyto(target.reshape(shape), batch[key], casting="no")


def read_batch(layout: Layout, memory: mmap.mmap) -> dict[str, npt.NDArray[Any]]:
    """Arrays over a slot's memory, no copy: each (and each view of it) references `memory`."""
    batch: dict[str, npt.NDArray[Any]] = {}
    for key, dtype, shape, offset in layout.entries:
        flat = np.frombuffer(memory, dtype=dtype, count=int(np.prod(shape)), offset=offset)
        batch[key] = flat.reshape(shape)
    return batch


__all__ = ["Layout", "SlotFiles", "read_batch", "write_batch"]
