"""The store contenders: each writes a (count, *shape) uint8 array and gathers a batch back.

Every adapter goes through the Python API its users call and hands back a NumPy array of shape
(batch, *shape), so the binding's call overhead, the GIL and the result's allocation are all
inside the timing. An adapter whose module is missing reports why and is skipped. `write`
builds the store at `path` from the array; `open` returns the gather callable used for timing.
Where a peer offers both a batch call and a per-record loop, the faster one (measured here)
is used, as a client tuning its pipeline would.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Callable

import numpy as np

from . import workdir

Gather = Callable[[np.ndarray], np.ndarray]


class Store:
    """One contender. Subclasses fill in write/open; `module` is what must be importable."""

    name: str = ""
    module: str = ""
    heavy: bool = False  # kept out of the default run (reachable with --only)

    def missing(self) -> str | None:
        try:
            importlib.import_module(self.module)
        except Exception as error:  # noqa: BLE001 - any import failure means "skip it"
            return f"import {self.module} failed: {type(error).__name__}: {error}"
        return None

    def write(self, path: Path, array: np.ndarray) -> None:
        raise NotImplementedError

    def open(self, path: Path, shape: tuple[int, ...]) -> Gather:
        raise NotImplementedError

    def close(self) -> None:
        """Releases whatever open() kept (file handles, environments)."""


def disk_bytes(path: Path) -> int:
    """Allocated bytes (st_blocks * 512) of a file or of every file under a folder."""
    if path.is_file():
        return path.stat().st_blocks * 512
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


def remove(path: Path) -> None:
    """Gets path out of the way; the files are deleted after the run (see workdir.py)."""
    workdir.discard(path)


# --- loaderx ---------------------------------------------------------------------------------


class Loaderx(Store):
    module = "loaderx.converter"

    def __init__(self, codec: str, dict_size: str | None = None) -> None:
        self.codec = codec
        self.dict_size = dict_size
        # zstd_dict compresses at level 19, a few MiB/s here: it runs only when asked for
        # (--only loaderx-zstd_dict, or --dict-tiers for one row per tier).
        self.heavy = codec == "zstd_dict" and dict_size is None
        suffix = f"-{dict_size}" if dict_size else ""
        self.name = f"loaderx {codec}{suffix}"
        self.dataset: object = None

    def write(self, path: Path, array: np.ndarray) -> None:
        from loaderx.converter import from_numpy

        if self.dict_size is None:
            from_numpy(str(path), array, codec=self.codec)
        else:
            from_numpy(str(path), array, codec=self.codec, dict_size=self.dict_size)

    def open(self, path: Path, shape: tuple[int, ...]) -> Gather:
        from loaderx.dataset import DenseDataset

        dataset = DenseDataset(str(path))
        self.dataset = dataset

        def gather(indices: np.ndarray) -> np.ndarray:
            rows: np.ndarray = dataset[indices]
            return rows

        return gather

    def into_reused(self, batch: int) -> Gather:
        """Gathers into one preallocated array, reused call after call."""
        dataset = self.dataset
        out = np.empty((batch, *dataset.item_shape), dtype=dataset.dtype)  # type: ignore[attr-defined]

        def gather(indices: np.ndarray) -> np.ndarray:
            dataset.gather_into(indices, out)  # type: ignore[attr-defined]
            return out

        return gather

    def compressed_bytes(self) -> int | None:
        """Stored payload bytes (what the codec produced), without allocation slack."""
        stats = self.dataset.stats()  # type: ignore[attr-defined]
        return int(stats["live_bytes"])

    def close(self) -> None:
        if self.dataset is not None:
            self.dataset.close()  # type: ignore[attr-defined]
            self.dataset = None


# --- NumPy -----------------------------------------------------------------------------------


class NpyMmap(Store):
    name = "npy-mmap"
    module = "numpy"

    def write(self, path: Path, array: np.ndarray) -> None:
        with path.open("wb") as f:  # np.save(path) would append ".npy" to the name
            np.save(f, array)

    def open(self, path: Path, shape: tuple[int, ...]) -> Gather:
        mapped: np.ndarray = np.load(path, mmap_mode="r")

        def gather(indices: np.ndarray) -> np.ndarray:
            rows: np.ndarray = mapped[indices]
            return rows

        return gather


# --- HDF5 ------------------------------------------------------------------------------------


class H5py(Store):
    module = "h5py"

    def __init__(self, compression: str | None) -> None:
        self.compression = compression
        self.name = "h5py gzip" if compression else "h5py"
        self.heavy = compression is not None
        self.file: object = None

    def write(self, path: Path, array: np.ndarray) -> None:
        import h5py

        with h5py.File(path, "w") as f:
            f.create_dataset("x", data=array, chunks=(1, *array.shape[1:]),
                             compression=self.compression)

    def open(self, path: Path, shape: tuple[int, ...]) -> Gather:
        import h5py

        f = h5py.File(path, "r")
        self.file = f
        dataset = f["x"]

        def gather(indices: np.ndarray) -> np.ndarray:
            # One read per record: h5py's fancy indexing (sorted, unique indices) measured
            # about 100x slower than this loop for 256 scattered records.
            out = np.empty((len(indices), *shape), dtype=np.uint8)
            for slot, index in enumerate(indices.tolist()):
                out[slot] = dataset[index]
            return out

        return gather

    def close(self) -> None:
        if self.file is not None:
            self.file.close()  # type: ignore[attr-defined]
            self.file = None


# --- Blosc2 ----------------------------------------------------------------------------------


class Blosc2(Store):
    name = "blosc2"
    module = "blosc2"

    def write(self, path: Path, array: np.ndarray) -> None:
        import blosc2

        # One chunk per record, blosc2's defaults otherwise (zstd, shuffle).
        blosc2.asarray(array, urlpath=str(path), mode="w", chunks=(1, *array.shape[1:]))

    def open(self, path: Path, shape: tuple[int, ...]) -> Gather:
        import blosc2

        stored = blosc2.open(str(path), mode="r")

        # A per-record loop: blosc2's fancy indexing measured slower for scattered records.
        def gather(indices: np.ndarray) -> np.ndarray:
            out = np.empty((len(indices), *shape), dtype=np.uint8)
            for slot, index in enumerate(indices.tolist()):
                out[slot] = stored[index]
            return out

        return gather


# --- TensorStore -----------------------------------------------------------------------------


class TensorStore(Store):
    module = "tensorstore"

    def __init__(self, compressor: str | None) -> None:
        self.compressor = compressor
        self.name = f"tensorstore zarr {compressor or 'raw'}"

    def spec(self, path: Path, shape: tuple[int, ...], count: int) -> dict[str, object]:
        compressor = {"id": "zstd", "level": 3} if self.compressor == "zstd" else None
        return {
            "driver": "zarr",
            "kvstore": {"driver": "file", "path": str(path)},
            "metadata": {"shape": [count, *shape], "chunks": [1, *shape], "dtype": "|u1",
                         "compressor": compressor},
        }

    def write(self, path: Path, array: np.ndarray) -> None:
        import tensorstore as ts

        spec = self.spec(path, array.shape[1:], array.shape[0])
        store = ts.open(spec, create=True, delete_existing=True).result()
        store.write(array).result()

    def open(self, path: Path, shape: tuple[int, ...]) -> Gather:
        import tensorstore as ts

        store = ts.open({"driver": "zarr", "kvstore": {"driver": "file", "path": str(path)}},
                        read=True).result()

        def gather(indices: np.ndarray) -> np.ndarray:
            return np.asarray(store[indices].read().result())

        return gather


# --- Zarr ------------------------------------------------------------------------------------


class Zarr(Store):
    name = "zarr"
    module = "zarr"
    heavy = True  # one file per record and a Python codec pipeline: slow to write and read

    def write(self, path: Path, array: np.ndarray) -> None:
        import zarr

        # zarr's default codec for v3 arrays (zstd), one chunk per record.
        z = zarr.create_array(store=str(path), shape=array.shape, chunks=(1, *array.shape[1:]),
                              dtype=array.dtype, overwrite=True)
        z[...] = array

    def open(self, path: Path, shape: tuple[int, ...]) -> Gather:
        import zarr

        z = zarr.open_array(str(path), mode="r")

        def gather(indices: np.ndarray) -> np.ndarray:
            return np.asarray(z.get_orthogonal_selection((indices,)))

        return gather


# --- Lance -----------------------------------------------------------------------------------


class Lance(Store):
    name = "lance"
    module = "lance"

    def write(self, path: Path, array: np.ndarray) -> None:
        os.environ.setdefault("LANCE_LOG", "error")
        import lance
        import pyarrow as pa

        record = int(np.prod(array.shape[1:]))
        flat = pa.array(array.reshape(-1))
        column = pa.FixedSizeListArray.from_arrays(flat, record)
        lance.write_dataset(pa.table({"x": column}), str(path), mode="overwrite")

    def open(self, path: Path, shape: tuple[int, ...]) -> Gather:
        import lance

        dataset = lance.dataset(str(path))

        def gather(indices: np.ndarray) -> np.ndarray:
            table = dataset.take(indices, columns=["x"])
            values: np.ndarray = table.column("x").combine_chunks().flatten().to_numpy()
            return values.reshape(len(indices), *shape)

        return gather


# --- ArrayRecord -----------------------------------------------------------------------------


def write_array_record(path: Path, array: np.ndarray) -> None:
    """One ArrayRecord file, zstd level 3 (the writer's default), one record per chunk."""
    from array_record.python.array_record_module import ArrayRecordWriter

    # group_size:1 makes every record its own chunk: the random-access layout.
    writer = ArrayRecordWriter(str(path), "group_size:1")
    for record in array:
        writer.write(record.tobytes())
    writer.close()


def joined(records: list[bytes], shape: tuple[int, ...]) -> np.ndarray:
    """A batch of record bytes as one (batch, *shape) uint8 array (one copy, as users do)."""
    return np.frombuffer(b"".join(records), dtype=np.uint8).reshape(len(records), *shape)


class ArrayRecord(Store):
    name = "array-record zstd"  # the writer's default codec is zstd level 3
    module = "array_record.python.array_record_module"

    def write(self, path: Path, array: np.ndarray) -> None:
        write_array_record(path, array)

    def open(self, path: Path, shape: tuple[int, ...]) -> Gather:
        from array_record.python.array_record_module import ArrayRecordReader

        reader = ArrayRecordReader(str(path))
        self.reader = reader

        def gather(indices: np.ndarray) -> np.ndarray:
            return joined(reader.read(indices.tolist()), shape)

        return gather

    def close(self) -> None:
        reader = getattr(self, "reader", None)
        if reader is not None:
            reader.close()
            self.reader = None


class GrainArrayRecord(Store):
    """Grain's ArrayRecordDataSource over the same ArrayRecord layout: what a Grain pipeline
    reads through. `__getitems__` is the batch call Grain's own batching uses."""

    name = "grain array-record zstd"
    module = "grain.python"

    def write(self, path: Path, array: np.ndarray) -> None:
        write_array_record(path, array)

    def open(self, path: Path, shape: tuple[int, ...]) -> Gather:
        import grain.python as gp

        source = gp.ArrayRecordDataSource([str(path)])
        self.source = source

        def gather(indices: np.ndarray) -> np.ndarray:
            return joined(list(source.__getitems__(indices.tolist())), shape)

        return gather

    def close(self) -> None:
        source = getattr(self, "source", None)
        if source is not None:
            del self.source  # the source closes its readers when collected


# --- bagz ------------------------------------------------------------------------------------


class Bagz(Store):
    """DeepMind's bagz: one .bag (raw) or .bagz (per-record zstd level 3) file, read through
    Reader.read_indices, either on one thread or with the reader's default parallelism."""

    module = "bagz"

    def __init__(self, codec: str, one_thread: bool) -> None:
        self.codec = codec
        self.one_thread = one_thread
        self.name = f"bagz {codec}{' 1-thread' if one_thread else ''}"

    def file(self, path: Path) -> Path:
        # The writer puts a "limits." file beside the data file, so each store gets a folder.
        return path / ("records.bagz" if self.codec == "zstd" else "records.bag")

    def compression(self) -> object:
        import bagz

        return bagz.CompressionZstd(level=3) if self.codec == "zstd" else bagz.CompressionNone()

    def write(self, path: Path, array: np.ndarray) -> None:
        import bagz

        path.mkdir(parents=True)
        options = bagz.Writer.Options(compression=self.compression())
        with bagz.Writer(str(self.file(path)), options) as writer:
            for record in array:
                writer.write(record.tobytes())

    def open(self, path: Path, shape: tuple[int, ...]) -> Gather:
        import bagz

        options = bagz.Reader.Options(compression=self.compression())
        if self.one_thread:
            options = bagz.Reader.Options(compression=self.compression(), max_parallelism=1)
        reader = bagz.Reader(str(self.file(path)), options)

        def gather(indices: np.ndarray) -> np.ndarray:
            return joined(reader.read_indices(indices), shape)

        return gather


# --- LMDB ------------------------------------------------------------------------------------


class Lmdb(Store):
    name = "lmdb"
    module = "lmdb"

    def write(self, path: Path, array: np.ndarray) -> None:
        import lmdb

        env = lmdb.open(str(path), map_size=max(1 << 30, 2 * array.nbytes), sync=False)
        with env.begin(write=True) as txn:
            for index, record in enumerate(array):
                txn.put(index.to_bytes(8, "big"), record.tobytes())
        env.close()

    def open(self, path: Path, shape: tuple[int, ...]) -> Gather:
        import lmdb

        env = lmdb.open(str(path), readonly=True, lock=False)
        self.env = env

        def gather(indices: np.ndarray) -> np.ndarray:
            with env.begin(buffers=True) as txn:
                parts = [txn.get(index.to_bytes(8, "big")) for index in indices.tolist()]
                joined = b"".join(parts)
            return np.frombuffer(joined, dtype=np.uint8).reshape(len(indices), *shape)

        return gather

    def close(self) -> None:
        env = getattr(self, "env", None)
        if env is not None:
            env.close()
            self.env = None


def dict_tier_names() -> list[str]:
    """loaderx's DICT_TIERS names (in its order), or the documented three without loaderx."""
    try:
        from loaderx.dataset import DICT_TIERS
    except Exception:  # noqa: BLE001 - the loaderx rows then report why they are skipped
        return ["small", "balanced", "max"]
    return list(DICT_TIERS)


def contenders(dict_tiers: bool) -> list[Store]:
    """Every store in table order; loaderx first, then the reference, then the peers."""
    loaderx: list[Store] = [Loaderx("raw"), Loaderx("zstd")]
    if dict_tiers:
        loaderx += [Loaderx("zstd_dict", tier) for tier in dict_tier_names()]
    else:
        loaderx.append(Loaderx("zstd_dict"))
    return [*loaderx, NpyMmap(), H5py(None), H5py("gzip"), Blosc2(), TensorStore(None),
            TensorStore("zstd"), Zarr(), Lance(), ArrayRecord(), GrainArrayRecord(),
            Bagz("raw", False), Bagz("raw", True), Bagz("zstd", False), Bagz("zstd", True),
            Lmdb()]
