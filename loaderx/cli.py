"""The `loaderx` command (also `python -m loaderx`): inspect, convert and check stores.

A thin layer over the public API. Every subcommand has --help; the exit status is 0 when all
is well, 1 when a problem was found (a store that cannot be opened, a failed check), 2 for
a usage error (argparse's own convention) and 130 after Ctrl-C. Subcommands whose output is
data take --json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
import zipfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, TextIO

import numpy as np
import numpy.typing as npt

from loaderx._data.dataset import DICT_TIERS, DenseDataset, RaggedDataset
from loaderx.errors import LoaderxError
from loaderx._os.paths import exists, is_file
from loaderx._store.schema import CODEC_NAMES, SCHEMA_FILE, Codec, check_codec, make_schema
from loaderx._store.layout import META_FILE, shard_number
from loaderx._store.zrecord import Zrecord

EXIT_OK: Final = 0
EXIT_PROBLEM: Final = 1
EXIT_USAGE: Final = 2
# 128 + SIGINT, as shells report a command stopped by Ctrl-C.
EXIT_INTERRUPTED: Final = 130

Store = DenseDataset | RaggedDataset | Zrecord
_BENCH_RECORDS_MAX: Final = 20_000
_READ_BYTES: Final = 1 << 24
# Record sizes are looked at this many at a time (8 MiB of lengths), so that info and stats
# of a dataset of any size take bounded memory.
_LENGTH_WINDOW: Final = 1 << 20


class Problem(Exception):
    """Something the user should hear about in one line, with exit status 1."""


# --- opening ----------------------------------------------------------------------------------


def open_store(path: str, readonly: bool = True) -> Store:
    """The dataset at path (by its schema), or the bare Zrecord store when it has none.

    Read-only unless the command writes: inspecting a store takes no writer lock, so it works
    while a training job or a conversion holds the store."""
    if not exists(path):
        raise Problem(f"{path}: no such file or folder")
    # is_file, not os.path.isfile: a store folder the user may not read is a PermissionError
    # naming it, not "no store here".
    if is_file(os.path.join(path, SCHEMA_FILE)):
        from loaderx._store.schema import read_schema

        if read_schema(path).kind == "ragged":
            return RaggedDataset(path, readonly=readonly)
        return DenseDataset(path, readonly=readonly)
    if is_file(os.path.join(path, META_FILE)):
        return Zrecord(path, readonly=readonly)
    raise Problem(f"{path}: not a loaderx dataset or Zrecord store (no {SCHEMA_FILE}, no meta.zr)")


def _record_lengths(opened: RaggedDataset | Zrecord, window: slice) -> npt.NDArray[np.uint64]:
    """The logical (decompressed) size of the records in a window."""
    if isinstance(opened, RaggedDataset):
        return opened.lengths(window).astype(np.uint64) * np.uint64(opened.row_size)
    return opened.record_lengths(window)


def _record_sizes(opened: Store) -> tuple[int, int, int]:
    """(smallest, largest, total) logical record size of a store that holds records. A dense
    dataset's are its record size; the others' are read a window at a time."""
    if isinstance(opened, DenseDataset):
        return opened.record_size, opened.record_size, opened.record_size * len(opened)
    smallest, largest, total = -1, 0, 0
    count = len(opened)
    for start in range(0, count, _LENGTH_WINDOW):
        window = _record_lengths(opened, slice(start, min(count, start + _LENGTH_WINDOW)))
        low = int(window.min())
        smallest = low if smallest < 0 else min(smallest, low)
        largest = max(largest, int(window.max()))
        total += int(window.sum(dtype=np.uint64))
    return smallest, largest, total


def _shards(opened: Store) -> list[str] | None:
    """The shard folders of a sharded dataset; None for a single store."""
    if isinstance(opened, Zrecord) or not opened.sharded:
        return None
    return [str(shard["name"]) for shard in opened.shard_stats()]


def _disk_usage(path: str) -> tuple[int, int]:
    """(apparent size, allocated bytes) of the files in a store folder and its shard folders."""
    apparent = allocated = 0
    for entry in os.scandir(path):
        if entry.is_file(follow_symlinks=False):
            info = entry.stat(follow_symlinks=False)
            apparent += info.st_size
            allocated += info.st_blocks * 512
        elif entry.is_dir(follow_symlinks=False) and shard_number(entry.name) is not None:
            inner = _disk_usage(entry.path)
            apparent += inner[0]
            allocated += inner[1]
    return apparent, allocated


# --- info, stats, head ------------------------------------------------------------------------


def info_of(path: str) -> dict[str, Any]:
    opened = open_store(path)
    try:
        stats = opened.stats()
        count = stats["records"]
        logical = _record_sizes(opened)[2] if count else 0
        shards = _shards(opened)
        apparent, allocated = _disk_usage(path)
        result: dict[str, Any] = {"path": path, "shards": shards}
        if isinstance(opened, Zrecord):
            result.update(kind="zrecord", dtype=None, item_shape=None, codec=opened.codec,
                          dict_size=None)
        else:
            result.update(kind=opened.schema.kind, dtype=str(opened.dtype),
                          item_shape=list(opened.item_shape), codec=opened.codec,
                          dict_size=opened.dict_size or None)
        result.update(
            records=count, has_dict=opened.has_dict, logical_bytes=logical,
            data_bytes=stats["live_bytes"], chunk_bytes=stats["chunk_bytes"],
            reclaimable_bytes=stats["reclaimable"], allocated_bytes=allocated,
            apparent_bytes=apparent,
            compression_ratio=round(logical / stats["live_bytes"], 4) if stats["live_bytes"] else None,
        )
        return result
    finally:
        opened.close()


def _size(count: int) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    return f"{count} B"


def _print_info(info: dict[str, Any], out: TextIO) -> None:
    rows = [
        ("kind", info["kind"]),
        ("dtype", info["dtype"] or "-"),
        ("item shape", tuple(info["item_shape"]) if info["item_shape"] is not None else "-"),
        ("codec", info["codec"]),
        ("dictionary", _size(info["dict_size"]) + (" (trained)" if info["has_dict"] else
                                                     " (not trained)") if info["dict_size"] else "-"),
        ("records", f"{info['records']:,}"),
        ("logical bytes", _size(info["logical_bytes"])),
        ("data bytes", _size(info["data_bytes"]) + " (stored records)"),
        ("allocated", _size(info["allocated_bytes"]) + " (blocks on disk)"),
        ("apparent size", _size(info["apparent_bytes"]) + " (what cp and tar copy)"),
        ("compression", f"{info['compression_ratio']:.2f}x" if info["compression_ratio"] else "-"),
    ]
    if info.get("shards") is not None:
        rows.insert(5, ("shards", ", ".join(info["shards"]) or "none"))
    for label, value in rows:
        print(f"{label:<14} {value}", file=out)


def cmd_info(args: argparse.Namespace, out: TextIO) -> int:
    info = info_of(args.path)
    if args.json:
        json.dump(info, out, indent=2)
        print(file=out)
    else:
        _print_info(info, out)
    return EXIT_OK


def cmd_stats(args: argparse.Namespace, out: TextIO) -> int:
    opened = open_store(args.path)
    try:
        stats: dict[str, Any] = dict(opened.stats())
        if stats["records"]:
            smallest, largest, total = _record_sizes(opened)
            stats.update(record_bytes_min=smallest, record_bytes_max=largest,
                         record_bytes_mean=round(total / len(opened), 2))
    finally:
        opened.close()
    if args.json:
        json.dump(stats, out, indent=2)
        print(file=out)
    else:
        for key, value in stats.items():
            print(f"{key:<18} {value:,}" if isinstance(value, int) else f"{key:<18} {value}",
                  file=out)
    return EXIT_OK


def _dense_repr(ds: DenseDataset, count: int) -> str:
    """repr(ds[:count]) under the current print options, from a few rows. NumPy summarises an
    array of more values than its threshold: it shows only the first and last `edgeitems` rows
    then, and sizes their columns from those rows alone. So a summarised head reads those rows
    and one between them (which stands for all the rest: it makes NumPy put "..." there), and
    only the shape NumPy prints is the whole head's, not that of the rows read."""
    options = np.get_printoptions()
    edge = int(options["edgeitems"])
    values = count * math.prod(ds.item_shape)
    if values <= options["threshold"] or count <= 2 * edge:
        return repr(ds[:count])  # at most `threshold` values, or 2 * edgeitems records
    rows = ds[np.r_[0 : edge + 1, count - edge : count]]
    with np.printoptions(threshold=0):  # summarised as the whole head is
        text = repr(rows)
    read = f"shape={rows.shape}"
    at = text.rindex(read)  # after the values: "array(<values>,<spacer>shape=..., dtype=...)"
    values_text = text[:at].rstrip()
    extras = f"shape={(count, *(int(n) for n in ds.item_shape))}" + text[at + len(read):]
    # NumPy's rule: the extras go on a line of their own when they would pass the line width.
    last_line = len(values_text) - (values_text.rfind("\n") + 1)
    wrap = last_line + len(extras) + 1 > int(options["linewidth"])
    return values_text + ("\n" + " " * len("array(") if wrap else " ") + extras


def _blocks(opened: RaggedDataset | Zrecord, count: int) -> Iterator[slice]:
    """Consecutive slices of 0..count holding about _READ_BYTES of records each (at least one
    record)."""
    start = 0
    while start < count:
        window = _record_lengths(opened, slice(start, min(count, start + _LENGTH_WINDOW)))
        fit = int(np.searchsorted(np.cumsum(window, dtype=np.uint64), _READ_BYTES, side="right"))
        stop = start + max(1, fit)
        yield slice(start, stop)
        start = stop


def cmd_head(args: argparse.Namespace, out: TextIO) -> int:
    """Prints the first records, reading them in blocks of about _READ_BYTES: `-n` may ask
    for more records than memory holds (a dense head reads only the rows NumPy shows)."""
    opened = open_store(args.path)
    try:
        count = min(args.n, len(opened))
        with np.printoptions(threshold=64, edgeitems=3, linewidth=100):
            if isinstance(opened, DenseDataset):
                print(_dense_repr(opened, count), file=out)
            elif isinstance(opened, RaggedDataset):
                for block in _blocks(opened, count):
                    for index, record in enumerate(opened[block], start=block.start):
                        print(f"[{index}] shape {record.shape}: {np.array2string(record)}",
                              file=out)
            else:
                for block in _blocks(opened, count):
                    for index, raw in enumerate(opened.gather(block), start=block.start):
                        shown = raw[:48]
                        more = f"... ({len(raw):,} bytes)" if len(raw) > 48 else ""
                        print(f"[{index}] {shown!r}{more}", file=out)
        print(f"({count:,} of {len(opened):,} records)", file=out)
    finally:
        opened.close()
    return EXIT_OK


def cmd_verify(args: argparse.Namespace, out: TextIO) -> int:
    """Checks every record (table entries against the chunks, checksums, frames); exit 1 and
    the list of bad records if anything is wrong."""
    opened = open_store(args.path)
    try:
        count = len(opened)
        if sys.stderr.isatty() and not args.json:
            print(f"verifying {count:,} records of {args.path} on every core...", file=sys.stderr,
                  flush=True)
        started = time.perf_counter()
        report = opened.verify()
        elapsed = time.perf_counter() - started
    finally:
        opened.close()
    if args.json:
        json.dump({
            "path": args.path, "records": report.records, "has_checksums": report.has_checksums,
            "checksummed": report.checksummed, "bad_count": report.bad_count,
            "bad": [{"index": bad.index, "reason": bad.reason} for bad in report.bad],
            "ok": report.ok,
        }, out, indent=2)
        print(file=out)
    else:
        sums = (f"{report.checksummed:,} against their checksums" if report.has_checksums
                else "no checksums in this store: table entries and frames only")
        print(f"{args.path}: {report.records:,} records checked in {elapsed:.1f} s ({sums})",
              file=out)
        for bad in report.bad:
            print(f"  bad record {bad.index}: {bad.reason}", file=out)
        if report.bad_count > len(report.bad):
            print(f"  ... {report.bad_count:,} bad records in all", file=out)
        print("OK" if report.ok else f"{report.bad_count:,} bad records", file=out)
    return EXIT_OK if report.ok else EXIT_PROBLEM


# --- convert, recode, compact -----------------------------------------------------------------


def _progress(args: argparse.Namespace) -> bool | None:
    return False if args.quiet else None


def _plain_name(name: str) -> bool:
    """True for a name that stays one entry inside the folder it is joined onto: no separator,
    no drive, not empty, '.' or '..', no NUL."""
    if name in ("", os.curdir, os.pardir) or "\0" in name or os.sep in name:
        return False
    if os.altsep is not None and os.altsep in name:
        return False
    return not os.path.splitdrive(name)[0]


def _check_array_names(source: str, dest: str, names: Sequence[str]) -> None:
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


def _npz_array(source: str, archive: Any, name: str, scratch: str) -> npt.NDArray[Any]:
    """One array of an open .npz, never loaded whole (NumPy's archive[name] reads it all into
    memory): an uncompressed member (np.savez) is memory-mapped where its data lies in the
    archive; a compressed one (np.savez_compressed) is inflated a block at a time into a
    temporary .npy in scratch and memory-mapped there."""
    member = archive.zip.getinfo(_member(archive, name))
    if member.compress_type != zipfile.ZIP_STORED:
        path = os.path.join(scratch, "array.npy")
        with archive.zip.open(member) as stream, open(path, "wb") as copy:
            while block := stream.read(_READ_BYTES):
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


def _check_members(
    source: str, archive: Any, dest: str, codec: Codec, dict_size: str | int, overwrite: bool
) -> None:
    """Every array of an .npz checked before the first is converted, so that a refused one
    (an object or 0-d array, too few records to train a dictionary on, a destination that
    exists) leaves nothing half done: its header must make a dense schema, and its folder must
    be free (or replaceable with --overwrite)."""
    from loaderx._data.converter import _check_destination, _check_trainable

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


def _load_source(source: str) -> Any:
    """The .npy (memory-mapped) or the open .npz at source, whatever its name says: NumPy reads
    the format from the file's first bytes."""
    if os.path.isdir(source):
        raise Problem(f"{source}: a folder, not a .npy or .npz file")
    if not os.path.isfile(source):
        raise Problem(f"{source}: no such file")
    try:
        return np.load(source, mmap_mode="r")
    except (ValueError, EOFError, zipfile.BadZipFile) as error:
        raise Problem(f"{source}: not a .npy or .npz file NumPy can read ({error})") from None


def _check_intact(source: str, archive: Any) -> None:
    """Every array of an .npz read once (its CRC checked, compressed data inflated) before the
    first is converted: a damaged one found while converting would leave those before it
    converted."""
    for member in archive.zip.infolist():
        try:
            with archive.zip.open(member) as stream:
                while stream.read(_READ_BYTES):
                    pass
        except (zipfile.BadZipFile, zlib.error, EOFError) as error:
            name = member.filename.removesuffix(".npy")
            raise Problem(
                f"{source}: array {name!r} is damaged ({error}); nothing was converted"
            ) from None


def _convert_npz(source: str, archive: Any, args: argparse.Namespace, codec: Codec,
                 out: TextIO) -> int:
    from loaderx._data.converter import from_numpy

    names = list(archive.files)
    if not names:
        raise Problem(f"{source}: the .npz holds no arrays; nothing was converted")
    _check_array_names(source, args.dest, names)
    _check_intact(source, archive)
    _check_members(source, archive, args.dest, codec, args.dict_size, args.overwrite)
    for name in names:
        target = os.path.join(args.dest, name)
        with tempfile.TemporaryDirectory(prefix="loaderx-convert-") as scratch:
            array = _npz_array(source, archive, name, scratch)
            count = from_numpy(target, array, codec=codec, dict_size=args.dict_size,
                               overwrite=args.overwrite, progress=_progress(args))
            del array  # the map of a temporary copy goes before its folder
        print(f"{target}: {count:,} records ({codec})", file=out)
    return EXIT_OK


def cmd_convert(args: argparse.Namespace, out: TextIO) -> int:
    from loaderx._data.converter import from_numpy

    source = args.source
    codec = check_codec(args.codec)
    loaded = _load_source(source)
    if isinstance(loaded, np.lib.npyio.NpzFile):
        with loaded as archive:
            return _convert_npz(source, archive, args, codec, out)
    count = from_numpy(args.dest, loaded, codec=codec, dict_size=args.dict_size,
                       overwrite=args.overwrite, progress=_progress(args))
    print(f"{args.dest}: {count:,} records ({codec})", file=out)
    return EXIT_OK


def _dict_size(text: str) -> str | int:
    """--dict-size's argparse type: a tier name or a byte count (its range is the converter's)."""
    if text in DICT_TIERS:
        return text
    try:
        return int(text)
    except ValueError:
        names = ", ".join(DICT_TIERS)
        raise argparse.ArgumentTypeError(f"one of {names} or a byte count, not {text!r}") from None


def int_option(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse type: an int in minimum..maximum (no maximum: unbounded), so that a bad
    number is a usage error (exit 2) said before any work, not a traceback from deep inside the
    run. The demo's options use it too."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"an integer, not {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be <= {maximum}, got {value}")
        return value

    return parse


def _seconds(text: str) -> float:
    """--seconds' argparse type: a finite number > 0. A timing round runs until that many
    seconds have passed: nan and inf would never end it, and 0 or less times one call."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number of seconds, not {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def cmd_recode(args: argparse.Namespace, out: TextIO) -> int:
    from loaderx._data.converter import recode

    count = recode(args.source, args.dest, codec=check_codec(args.codec),
                   dict_size=args.dict_size, overwrite=args.overwrite,
                   progress=_progress(args))
    print(f"{args.dest}: {count:,} records ({args.codec})", file=out)
    return EXIT_OK


def cmd_compact(args: argparse.Namespace, out: TextIO) -> int:
    opened = open_store(args.path, readonly=False)
    try:
        before = opened.stats()
        opened.compact()
        after = opened.stats()
    finally:
        opened.close()
    freed = before["chunk_bytes"] - after["chunk_bytes"]
    print(f"{args.path}: compacted, {_size(freed)} reclaimed; {after['records']:,} records, "
          f"{_size(after['chunk_bytes'])} of chunk data", file=out)
    return EXIT_OK


# --- bench ------------------------------------------------------------------------------------


def _rate(run: Callable[[], object], batch_bytes: int, seconds: float) -> float:
    """MiB/s of run() repeated for about `seconds` (after one warm-up call)."""
    run()
    calls = 0
    started = time.perf_counter()
    while True:
        run()
        calls += 1
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            return calls * batch_bytes / elapsed / (1 << 20)


def cmd_bench(args: argparse.Namespace, out: TextIO) -> int:
    opened = open_store(args.path)
    if not isinstance(opened, DenseDataset):
        kind = "ragged dataset" if isinstance(opened, RaggedDataset) else "bare Zrecord store"
        opened.close()
        raise Problem(f"{args.path}: bench compares a dense dataset with a NumPy memmap; this is a {kind}")
    try:
        return _bench_dense(opened, args, out)
    finally:
        opened.close()


def _bench_dense(ds: DenseDataset, args: argparse.Namespace, out: TextIO) -> int:
    count = min(len(ds), args.records)
    if count == 0:
        raise Problem(f"{args.path}: the dataset is empty")
    batch = min(args.batch, count)
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, count, batch, dtype=np.int64) for _ in range(64)]
    out_array = np.empty((batch, *ds.item_shape), dtype=ds.dtype)
    with tempfile.TemporaryDirectory(prefix="loaderx-bench-", dir=args.tmp) as folder:
        npy = os.path.join(folder, "records.npy")
        copy = np.lib.format.open_memmap(npy, mode="w+", dtype=ds.dtype,
                                         shape=(count, *ds.item_shape))
        step = max(1, (64 << 20) // max(1, ds.record_size))
        for start in range(0, count, step):
            copy[start : start + step] = ds[start : min(count, start + step)]
        copy.flush()
        del copy
        memmap: npt.NDArray[Any] = np.load(npy, mmap_mode="r")
        turn = [0]

        def next_indices() -> npt.NDArray[np.int64]:
            turn[0] = (turn[0] + 1) % len(batches)
            chosen: npt.NDArray[np.int64] = batches[turn[0]]
            return chosen

        contenders: dict[str, Callable[[], object]] = {
            "loaderx gather_into": lambda: ds.gather_into(next_indices(), out_array),
            "loaderx ds[idx]": lambda: ds[next_indices()],
            "numpy memmap a[idx]": lambda: memmap[next_indices()],
        }
        batch_bytes = batch * ds.record_size
        rates: dict[str, list[float]] = {name: [] for name in contenders}
        for _ in range(args.rounds):  # round-robin, so that load on the machine hits all alike
            for name, run in contenders.items():
                rates[name].append(_rate(run, batch_bytes, args.seconds))
        del memmap
    medians = {name: float(np.median(values)) for name, values in rates.items()}
    reference = medians["numpy memmap a[idx]"]
    result = {
        "path": args.path, "records": count, "batch": batch, "record_bytes": ds.record_size,
        "codec": ds.codec, "rounds": args.rounds,
        "mib_s": {name: round(value, 1) for name, value in medians.items()},
        "vs_memmap": {name: round(value / reference, 3) for name, value in medians.items()},
    }
    if args.json:
        json.dump(result, out, indent=2)
        print(file=out)
        return EXIT_OK
    print(f"{args.path}: random batches of {batch} from {count:,} records of "
          f"{_size(ds.record_size)}, codec {ds.codec}, median of {args.rounds} rounds "
          "(warm page cache)", file=out)
    for name, value in medians.items():
        print(f"  {name:<22} {value:>10,.0f} MiB/s  {value / reference:6.2f}x", file=out)
    return EXIT_OK


# --- the parser -------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loaderx",
        description="Inspect, convert and check loaderx datasets and Zrecord stores.",
        epilog="Exit status: 0 all is well, 1 a problem was found, 2 usage error, 130 "
               "interrupted (Ctrl-C).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, summary: str, run: Callable[[argparse.Namespace, TextIO], int]
                ) -> argparse.ArgumentParser:
        made = sub.add_parser(name, help=summary, description=summary)
        made.set_defaults(run=run)
        return made

    info = command("info", "kind, dtype, shape, codec, records, bytes and compression ratio", cmd_info)
    info.add_argument("path")
    info.add_argument("--json", action="store_true", help="print JSON")

    stats = command("stats", "the store's record and byte counts, record sizes", cmd_stats)
    stats.add_argument("path")
    stats.add_argument("--json", action="store_true", help="print JSON")

    head = command("head", "the first records, printed as NumPy prints them", cmd_head)
    head.add_argument("path")
    head.add_argument("-n", type=int_option(0), default=5, help="how many records (default 5)")

    verify = command("verify", "check every record (table against chunks, checksums, frames) "
                     "in parallel; exit 1 listing the bad records", cmd_verify)
    verify.add_argument("path")
    verify.add_argument("--json", action="store_true", help="print JSON")

    for name, summary, run in (
        ("convert", "a .npy (memory-mapped) or .npz file into datasets (an .npz: one per array, "
         "in DEST/<name>)", cmd_convert),
        ("recode", "a dataset into another with another codec", cmd_recode),
    ):
        made = command(name, summary, run)
        made.add_argument("source")
        made.add_argument("dest")
        made.add_argument("--codec", default="zstd", choices=CODEC_NAMES)
        made.add_argument("--dict-size", type=_dict_size, default="balanced",
                          help="zstd_dict dictionary: small, balanced, max or a byte count")
        made.add_argument("--overwrite", action="store_true",
                          help="replace an existing store at DEST (only ever a loaderx store)")
        made.add_argument("--quiet", action="store_true", help="no progress line")

    compact = command("compact", "reclaim the bytes of deleted records, in place (offline)",
                      cmd_compact)
    compact.add_argument("path")

    bench = command("bench", "this dataset's random-gather speed next to a NumPy memmap of the "
                    "same records", cmd_bench)
    bench.add_argument("path")
    bench.add_argument("--batch", type=int_option(1), default=256, help="records per batch (default 256)")
    bench.add_argument("--records", type=int_option(1), default=_BENCH_RECORDS_MAX,
                       help=f"use the first N records (default {_BENCH_RECORDS_MAX:,})")
    bench.add_argument("--rounds", type=int_option(1), default=5, help="interleaved rounds (default 5)")
    bench.add_argument("--seconds", type=_seconds, default=0.3,
                       help="seconds per contender and round (default 0.3)")
    bench.add_argument("--tmp", default=None, help="folder for the temporary .npy copy")
    bench.add_argument("--json", action="store_true", help="print JSON")
    return parser


# What Ctrl-C leaves behind, by command: the writing commands stage or move record by record,
# so an interruption never leaves a half-written store; the others write nothing.
_INTERRUPTED: Final = {
    "convert": "a destination not reported done was left as it was",
    "recode": "the destination was left as it was",
    "compact": "the store is whole (compact moves one record at a time; run it again to "
               "finish)",
}


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Runs one command; returns the exit status (argparse exits with 2 on a usage error)."""
    args = build_parser().parse_args(argv)
    stream = sys.stdout if out is None else out
    if stream is None:
        # Started with stdout closed (`loaderx info x >&-`): Python leaves sys.stdout None and
        # print() drops every line, so a command would run and report nothing.
        print(f"loaderx {args.command}: standard output is closed; nothing was done",
              file=sys.stderr)
        return EXIT_PROBLEM
    try:
        status: int = args.run(args, stream)
        stream.flush()
        return status
    except KeyboardInterrupt:
        left = _INTERRUPTED.get(args.command)
        print(f"loaderx {args.command}: interrupted" + (f"; {left}" if left else ""),
              file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`loaderx head ... | head -3`): not a problem with the store.
        # Point stdout at /dev/null so that the interpreter's final flush stays quiet.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except FileExistsError as error:
        text = str(error).replace("overwrite=True", "--overwrite")
        print(f"loaderx {args.command}: {text}", file=sys.stderr)
        return EXIT_PROBLEM
    except MemoryError as error:
        # NumPy's says how much it wanted (`head -n 100000` of 1 MiB records: 98 GiB).
        print(f"loaderx {args.command}: out of memory ({error})", file=sys.stderr)
        return EXIT_PROBLEM
    except (Problem, LoaderxError, OSError, ValueError, TypeError) as error:
        print(f"loaderx {args.command}: {error}", file=sys.stderr)
        return EXIT_PROBLEM


def entry_point() -> None:
    """The console script: exit with main()'s status."""
    sys.exit(main())


__all__ = [
    "build_parser", "entry_point", "main", "EXIT_OK", "EXIT_PROBLEM", "EXIT_USAGE",
    "EXIT_INTERRUPTED",
]
