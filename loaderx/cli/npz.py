"""The .npz reader of `convert`: every array checked first, then each memory-mapped, not loaded.

Nothing is converted until every array of the archive has passed (names, CRCs, headers,
destinations), so a refused archive leaves nothing half done."""

from __future__ import annotations

import math
import os
import zipfile
import zlib
from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from loaderx._data.destination import check_destination as _check_destination
from loaderx._data.dictionary_sample import check_trainable as _check_trainable
from loaderx._store.schema import Codec, make_schema
from loaderx.cli.exits import Problem
from loaderx.cli.stores import READ_BYTES


def _plain_name(name: str) -> bool:
    """True for a name that stays one entry inside the folder it is joined onto: no separator,
    no drive, not empty, '.' or '..', no NUL."""
    if name in ("", os.curdir, os.pardir) or "\0" in name or os.sep in name:
        return False
    if os.altsep is not None and os.altsep in name:
        return False
    return not os.path.splitdrive(name)[0]


def check_array_names(source: str, dest: str, names: Sequence[str]) -> None:
    """An .npz's array names become folders in dest: refuse, before anything is written, an
    archive whose names would reach outside dest ('../x', '/abs/x') or are no folder name."""
    bad = [name for name in names if not _plain_name(name)]
    if bad:
        listed = ", ".join(repr(name) for name in bad)
        raise Problem(
            f"{source}: array names {listed} are not plain folder names (each array becomes "
            f"{dest}/<name>, and these would not); nothing was converted"
        )


def _member(archive: Any, name: str) -> str:
    """The archive member that holds the array `name` of an open .npz."""
    return name + ".npy" if name + ".npy" in archive.zip.namelist() else name


def _read_header(stream: Any) -> tuple[tuple[int, ...], bool, np.dtype[Any]]:
    """(shape, fortran order, dtype) from a .npy header; the stream is left at the data."""
    version = np.lib.format.read_magic(stream)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(stream)
    return np.lib.format.read_array_header_2_0(stream)


def _member_header(archive: Any, name: str) -> tuple[tuple[int, ...], np.dtype[Any]]:
    """(shape, dtype) of one array of an open .npz, from its .npy header alone."""
    with archive.zip.open(_member(archive, name)) as stream:
        shape, _, dtype = _read_header(stream)
    return shape, dtype


# A zip local file header: 30 bytes, then the name and the extra field (lengths at 26 and 28).
_LOCAL_HEADER_BYTES: Final = 30


def npz_array(source: str, archive: Any, name: str, scratch: str) -> npt.NDArray[Any]:
    """One array of an open .npz, never loaded whole (NumPy's archive[name] reads it all into
    memory): an uncompressed member (np.savez) is memory-mapped where its data lies in the
    archive; a compressed one (np.savez_compressed) is inflated a block at a time into a
    temporary .npy in scratch and memory-mapped there."""
    member = archive.zip.getinfo(_member(archive, name))
    if member.compress_type != zipfile.ZIP_STORED:
        path = os.path.join(scratch, "array.npy")
        with archive.zip.open(member) as stream, open(path, "wb") as copy:
            while True:  # CPython gh-130279: tests/repo/test_interruptible_loops.py
                block = stream.read(READ_BYTES)
                if not block:
                    break
                copy.write(block)
        loaded: npt.NDArray[Any] = np.load(path, mmap_mode="r")
        return loaded
    with open(source, "rb") as file:
        file.seek(member.header_offset)
        local = file.read(_LOCAL_HEADER_BYTES)
        name_bytes = int.from_bytes(local[26:28], "little")
        extra_bytes = int.from_bytes(local[28:30], "little")
        file.seek(member.header_offset + _LOCAL_HEADER_BYTES + name_bytes + extra_bytes)
        shape, fortran, dtype = _read_header(file)
        offset = file.tell()
    if math.prod(shape) == 0:
        return np.empty(shape, dtype=dtype)  # nothing to map (mmap refuses an empty range)
    return np.memmap(source, dtype=dtype, mode="r", offset=offset, shape=shape,
                     order="F" if fortran else "C")


def check_members(
    source: str, archive: Any, dest: str, codec: Codec, dict_size: str | int, overwrite: bool
) -> None:
    """Every array of an .npz checked before the first is converted, so that a refused one
    (an object or 0-d array, too few records to train a dictionary on, a destination that
    exists) leaves nothing half done: its header must make a dense schema, and its folder must
    be free (or replaceable with --overwrite)."""
    for name in archive.files:
        try:
            shape, dtype = _member_header(archive, name)
        except ValueError as error:
            raise Problem(
                f"{source}: array {name!r} is not one NumPy can read ({error}); nothing was "
                "converted"
            ) from None
        if not shape:
            raise Problem(
                f"{source}: array {name!r} is 0-d (each array needs an axis 0 of records); "
                "nothing was converted"
            )
        try:
            make_schema("dense", dtype, shape[1:], codec, dict_size)
            _check_trainable(codec, shape[0])
        except (TypeError, ValueError) as error:
            raise Problem(f"{source}: array {name!r}: {error}; nothing was converted") from None
        _check_destination(os.path.join(dest, name), overwrite)


def check_intact(source: str, archive: Any) -> None:
    """Every array of an .npz read once (its CRC checked, compressed data inflated) before the
    first is converted: a damaged one found while converting would leave those before it
    converted."""
    for member in archive.zip.infolist():
        try:
            with archive.zip.open(member) as stream:
                while True:  # CPython gh-130279: tests/repo/test_interruptible_loops.py
                    if not stream.read(READ_BYTES):
                        break
        except (zipfile.BadZipFile, zlib.error, EOFError) as error:
            name = member.filename.removesuffix(".npy")
            raise Problem(
                f"{source}: array {name!r} is damaged ({error}); nothing was converted"
            ) from None
