"""The converting commands: convert (a .npy, an .npz, or Parquet files into datasets) and recode
(another codec)."""

from __future__ import annotations

import argparse
import os
import tempfile
import zipfile
from typing import Any, Final, TextIO

import numpy as np

from loaderx._data.arrow_convert import arrow_to_datasets
from loaderx._data.converter import from_numpy
from loaderx._data.recode import recode
from loaderx._store.schema import Codec, check_codec
from loaderx.cli.exits import EXIT_OK, Problem
from loaderx.cli.npz import check_array_names, check_intact, check_members, npz_array


def progress_option(args: argparse.Namespace) -> bool | None:
    """The converters' progress argument: --quiet turns the line off, --progress on (plain
    lines when stderr is no terminal), else they decide (a line on a terminal only)."""
    if args.quiet:
        return False
    return True if args.progress else None


# The first bytes np.load goes by: a .npy's magic, or a zip's (an .npz; an empty zip starts at its
# end record). Anything else it would unpickle, which it refuses, saying "pickled data".
ZIP_PREFIXES: Final = (b"PK\x03\x04", b"PK\x05\x06")
NUMPY_PREFIXES: Final = (b"\x93NUMPY", *ZIP_PREFIXES)


def _head(source: str) -> bytes:
    with open(source, "rb") as stream:
        return stream.read(len(NUMPY_PREFIXES[0]))


def is_numpy_file(source: str) -> bool:
    """Whether the file at source starts as a .npy or an .npz does (an empty file counts, so that
    NumPy itself says it holds no data)."""
    head = _head(source)
    return not head or head.startswith(NUMPY_PREFIXES)


def is_zip(source: str) -> bool:
    """Whether the file at source starts as a zip archive (an .npz) does."""
    return _head(source).startswith(ZIP_PREFIXES)


# A Parquet file starts (and ends) with these bytes.
PARQUET_MAGIC: Final = b"PAR1"


def is_parquet(source: str) -> bool:
    """Whether source is a folder (read as a folder of Parquet files) or a Parquet file."""
    if os.path.isdir(source):
        return True
    if not os.path.isfile(source):
        return False
    with open(source, "rb") as stream:
        return stream.read(len(PARQUET_MAGIC)) == PARQUET_MAGIC


def convert_parquet(source: str, args: argparse.Namespace, codec: Codec, out: TextIO) -> int:
    """Every column of a Parquet file, or of a folder of them, into DEST/<column>."""
    try:
        rows, folders = arrow_to_datasets(source, args.dest, codec=codec,
                                          overwrite=args.overwrite,
                                          progress=progress_option(args))
    except ImportError as error:
        raise Problem(f"{source}: reading Parquet needs pyarrow: pip install 'loaderx[arrow]' "
                      f"({error})") from None
    except (TypeError, ValueError) as error:
        # from_arrow's documented refusals: a column type it cannot store (with what to do),
        # a null, a folder without Parquet files, files whose schemas differ.
        raise Problem(f"{source}: {error}; nothing was converted") from None
    for folder in folders.values():
        print(f"{folder}: {rows:,} records ({codec})", file=out)
    return EXIT_OK


def load_source(source: str) -> Any:
    """The .npy (memory-mapped) or the open .npz at source, whatever its name says: NumPy reads
    the format from the file's first bytes."""
    if not os.path.isfile(source):
        raise Problem(f"{source}: no such file")
    if not is_numpy_file(source):
        raise Problem(f"{source}: not a NumPy (.npy/.npz) or Parquet file")
    try:
        if is_zip(source):
            # np.load leaks its open file when the archive turns out broken: look first.
            with zipfile.ZipFile(source):
                pass
        return np.load(source, mmap_mode="r")
    except (ValueError, EOFError, zipfile.BadZipFile) as error:
        raise Problem(f"{source}: not a .npy or .npz file NumPy can read ({error})") from None


def convert_npz(source: str, archive: Any, args: argparse.Namespace, codec: Codec,
                out: TextIO) -> int:
    """Every array of an open .npz into DEST/<name>, once all of them have been checked."""
    names = list(archive.files)
    if not names:
        raise Problem(f"{source}: the .npz holds no arrays; nothing was converted")
    check_array_names(source, args.dest, names)
    check_intact(source, archive)
    check_members(source, archive, args.dest, codec, args.dict_size, args.overwrite)
    for name in names:
        target = os.path.join(args.dest, name)
        with tempfile.TemporaryDirectory(prefix="loaderx-convert-") as scratch:
            array = npz_array(source, archive, name, scratch)
            count = from_numpy(target, array, codec=codec, dict_size=args.dict_size,
                               overwrite=args.overwrite, progress=progress_option(args))
            del array  # the map of a temporary copy goes before its folder
        print(f"{target}: {count:,} records ({codec})", file=out)
    return EXIT_OK


def cmd_convert(args: argparse.Namespace, out: TextIO) -> int:
    source = args.source
    codec = check_codec(args.codec)
    if is_parquet(source):
        return convert_parquet(source, args, codec, out)
    loaded = load_source(source)
    if isinstance(loaded, np.lib.npyio.NpzFile):
        with loaded as archive:
            return convert_npz(source, archive, args, codec, out)
    try:
        count = from_numpy(args.dest, loaded, codec=codec, dict_size=args.dict_size,
                           overwrite=args.overwrite, progress=progress_option(args))
    except (TypeError, ValueError) as error:
        # from_numpy's documented refusals of an array it cannot store (0-d, a string dtype,
        # too few records to train a dictionary on).
        raise Problem(str(error)) from None
    print(f"{args.dest}: {count:,} records ({codec})", file=out)
    return EXIT_OK


def cmd_recode(args: argparse.Namespace, out: TextIO) -> int:
    try:
        count = recode(args.source, args.dest, codec=check_codec(args.codec),
                       dict_size=args.dict_size, overwrite=args.overwrite,
                       progress=progress_option(args))
    except (TypeError, ValueError) as error:
        # recode's documented refusals (a source that is no dataset, a codec or dictionary
        # size it cannot use).
        raise Problem(str(error)) from None
    print(f"{args.dest}: {count:,} records ({args.codec})", file=out)
    return EXIT_OK
