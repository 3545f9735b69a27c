"""Bad inputs to Zrecord: damaged stores, oversized records, wrong types and indices, use after
close, and fork()."""

from __future__ import annotations

import ctypes
import gc
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loaderx._native import library as _native
from loaderx.errors import (
    CorruptStoreError,
    DictionaryError,
    LoaderxError,
    NotAStoreError,
    StoreFullError,
)
from loaderx._store.schema import Codec
from loaderx.zrecord import RECORD_COUNT_MAX, RECORD_SIZE_MAX, Zrecord

RECORDS = [b"first", b"", b"third" * 1000, bytes(range(256)) * 64]


def make_store(path: str, codec: Codec = "zstd") -> None:
    with Zrecord(path, create=True, codec=codec) as store:
        store.append(RECORDS)


def snapshot(store: Zrecord) -> tuple[int, dict[str, int], list[bytes]]:
    return len(store), store.stats(), store.gather(slice(None))


# --- damaged stores --------------------------------------------------------------------------------


def test_missing_store_without_create_names_the_path(tmp_path: Path) -> None:
    missing = str(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="nowhere"):
        Zrecord(missing, create=False)
    assert not os.path.exists(missing)
    os.makedirs(missing)
    with pytest.raises(FileNotFoundError, match="nowhere"):
        Zrecord(missing, create=False)


def test_corrupt_magic(store_path: str) -> None:
    make_store(store_path)
    with open(os.path.join(store_path, "meta.zr"), "r+b") as meta:
        assert meta.read(4) == b"ZREC"
        meta.seek(0)
        meta.write(b"ZREX")
    for create in (False, True):
        with pytest.raises(NotAStoreError):
            Zrecord(store_path, create=create)


def test_unknown_version(store_path: str) -> None:
    make_store(store_path)
    with open(os.path.join(store_path, "meta.zr"), "r+b") as meta:
        meta.seek(4)
        meta.write((0xBEEF).to_bytes(2, "little"))
    with pytest.raises(NotAStoreError):
        Zrecord(store_path, create=False)


@pytest.mark.parametrize("size", [0, 8, 15, (16 + 16 * RECORD_COUNT_MAX) + 1])
def test_meta_without_a_header_or_too_long_is_not_a_store(store_path: str, size: int) -> None:
    make_store(store_path)
    os.truncate(os.path.join(store_path, "meta.zr"), size)
    with pytest.raises(NotAStoreError, match="meta.zr"):
        Zrecord(store_path, create=False)


@pytest.mark.parametrize("size", [16, 16 + 16 * 4 - 1])
def test_meta_shorter_than_its_table_is_corrupt(store_path: str, size: int) -> None:
    make_store(store_path)  # four records: the table needs 16 + 4 * 16 bytes
    os.truncate(os.path.join(store_path, "meta.zr"), size)
    with pytest.raises(CorruptStoreError, match="too short for the 4 records"):
        Zrecord(store_path, create=False)


@pytest.mark.parametrize("size", [16 + 16 * 4, 4096, 16 + 16 * RECORD_COUNT_MAX])
def test_meta_grows_with_its_table_and_any_longer_size_opens(store_path: str, size: int) -> None:
    # meta.zr holds exactly the entries written; a longer file (stores made before files grew
    # on demand are full size, sparse) opens the same.
    make_store(store_path)
    meta = os.path.join(store_path, "meta.zr")
    assert os.path.getsize(meta) == 16 + 16 * 4
    os.truncate(meta, size)
    with Zrecord(store_path, create=False) as store:
        assert store.gather(slice(None)) == RECORDS


def test_missing_chunk_file(store_path: str) -> None:
    make_store(store_path)
    os.remove(os.path.join(store_path, "0.zr"))
    with pytest.raises(CorruptStoreError, match="0.zr"):
        Zrecord(store_path, create=False)


def test_chunk_shorter_than_its_table(store_path: str) -> None:
    make_store(store_path, codec="raw")
    os.truncate(os.path.join(store_path, "0.zr"), 100)
    with pytest.raises(CorruptStoreError, match="0.zr"):
        Zrecord(store_path, create=False)  # refused at open, not at the first read


def test_table_entry_pointing_outside_its_chunk(store_path: str) -> None:
    make_store(store_path, codec="raw")
    with open(os.path.join(store_path, "meta.zr"), "r+b") as meta:
        meta.seek(16 + 16 * 2)  # record 2's offset
        meta.write((0xFFFF_FF00).to_bytes(4, "little"))
    with pytest.raises(CorruptStoreError, match="record 2"):
        Zrecord(store_path, create=False)


def test_damaged_compressed_record_is_corrupt_not_a_crash(store_path: str) -> None:
    record = b"compressible text, " * 500
    with Zrecord(store_path, create=True, codec="zstd") as store:
        store.append([b"intact", record])
        stored = store.stats()["live_bytes"]
    assert stored < len(record)
    with open(os.path.join(store_path, "0.zr"), "r+b") as chunk:
        chunk.seek(len(b"intact") + 4)  # inside the second record's zstd frame
        chunk.write(b"\xff" * 16)
    with Zrecord(store_path, create=False) as store:
        assert store.gather(0) == [b"intact"]
        with pytest.raises(CorruptStoreError, match="record 1"):
            store.gather(1)


def test_logical_length_disagreeing_with_the_frame(store_path: str) -> None:
    record = b"abc" * 4000
    with Zrecord(store_path, create=True, codec="zstd") as store:
        store.append([record])
    with open(os.path.join(store_path, "meta.zr"), "r+b") as meta:
        meta.seek(16 + 8)  # record 0's logic_length
        meta.write((len(record) - 1).to_bytes(4, "little"))
    with Zrecord(store_path, create=False) as store:
        with pytest.raises(CorruptStoreError):
            store.gather(0)


def test_not_a_store_folder(tmp_path: Path) -> None:
    folder = tmp_path / "junk"
    folder.mkdir()
    (folder / "meta.zr").write_bytes(b"this is not a store" * 10)
    with pytest.raises(NotAStoreError):
        Zrecord(str(folder), create=False)


def test_dictionary_records_without_dict_file(store_path: str) -> None:
    samples = [b"shared structure " * 30 + bytes([i]) * 40 for i in range(64)]
    with Zrecord(store_path, create=True, codec="zstd_dict") as store:
        store.train_dict(samples, 4096)
        store.append(samples[:5])
        store.append([b"plain " * 100], codec="zstd")
        store.append([b"raw"], codec="raw")
    os.remove(os.path.join(store_path, "dict.zr"))
    with Zrecord(store_path, create=False) as store:
        assert not store.has_dict
        with pytest.raises(DictionaryError):
            store.gather(0)
        out = np.empty(len(samples[0]), np.uint8)
        with pytest.raises(DictionaryError):
            store.gather_into(np.array([1], dtype=np.int64), out, len(samples[0]))
        assert store.gather([5, 6]) == [b"plain " * 100, b"raw"]
        assert store.record_lengths([0]).tolist() == [len(samples[0])]


def test_retraining_an_empty_store_replaces_the_dictionary(store_path: str) -> None:
    first = [b"alpha beta gamma " * 20 + bytes([i]) for i in range(40)]
    second = [b"one two three four " * 20 + bytes([i]) for i in range(40)]
    with Zrecord(store_path, create=True, codec="zstd_dict") as store:
        store.train_dict(first, 2048)
        before = Path(store_path, "dict.zr").read_bytes()
        store.train_dict(second, 2048)
        after = Path(store_path, "dict.zr").read_bytes()
        assert before != after
        store.append(second)
        assert store.gather(slice(None)) == second
    with Zrecord(store_path, create=False) as store:
        assert store.gather(slice(None)) == second


# --- limits ------------------------------------------------------------------------------------------


def test_one_mib_plus_one_record_changes_nothing(store_path: str) -> None:
    make_store(store_path)
    with Zrecord(store_path, create=True) as store:
        before = snapshot(store)
        with pytest.raises(ValueError, match=rf"record 2 is {RECORD_SIZE_MAX + 1} bytes"):
            store.append([b"ok", b"", bytes(RECORD_SIZE_MAX + 1), b"ok"])
        with pytest.raises(ValueError):
            store.append_fixed(np.zeros(RECORD_SIZE_MAX + 1, np.uint8), RECORD_SIZE_MAX + 1)
        assert snapshot(store) == before
        # The native side refuses it as well, before writing anything.
        data = bytes(RECORD_SIZE_MAX + 3)
        offsets = np.array([0, 2, RECORD_SIZE_MAX + 3], dtype=np.uint64)
        first = ctypes.c_uint64()
        mark = object()
        try:
            handle = store._enter(mark)
            code = _native.lib.lx_store_append(
                handle, data, offsets.ctypes.data, 2, 1, ctypes.byref(first)
            )
        finally:
            store._marks.discard(mark)
        assert code == _native.RECORD_TOO_LARGE
        assert snapshot(store) == before
    with Zrecord(store_path, create=False) as store:
        assert snapshot(store) == before


def test_append_past_the_record_limit_changes_nothing(store_path: str) -> None:
    make_store(store_path)
    with Zrecord(store_path, create=True) as store:
        before = snapshot(store)
        with pytest.raises(StoreFullError):
            store.append_fixed(np.zeros(RECORD_COUNT_MAX, np.uint8), 1)
        assert snapshot(store) == before


# --- argument types and indices -------------------------------------------------------------------


@pytest.mark.parametrize(
    "records",
    [b"abc", "abc", bytearray(b"abc"), None, 5, [1, 2], ["text"], [b"ok", None], [object()],
     [np.array([object()])], iter([b"a"])],
)
def test_append_wrong_types(store_path: str, records: Any) -> None:
    with Zrecord(store_path, create=True) as store:
        store.append([b"kept"])
        with pytest.raises(TypeError):
            store.append(records)
        assert store.gather(slice(None)) == [b"kept"]


def test_other_wrong_arguments(store_path: str) -> None:
    with pytest.raises(ValueError, match="'raw', 'zstd', 'zstd_dict'"):
        Zrecord(store_path, codec="lz4")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Zrecord(42)  # type: ignore[arg-type]
    with Zrecord(store_path, create=True) as store:
        store.append([b"a" * 8, b"b" * 8])
        with pytest.raises(ValueError, match="zstd_dict"):
            store.append([b"x"], codec="gzip")  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            store.append_fixed([1, 2, 3], 1)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            store.append_fixed(np.array([object()] * 8), 8)
        with pytest.raises(TypeError):
            store.append_fixed(np.zeros(8, np.uint8), 2.0)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            store.train_dict([b"sample"], "big")  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            store.train_dict([], 1024)
        out = np.zeros((2, 8), np.uint8)
        with pytest.raises(TypeError):
            store.gather_into([0, 1], out, 8)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            store.gather_into(np.array([0, 1], dtype=np.int32), out, 8)
        with pytest.raises(ValueError):
            store.gather_into(np.array([0, 1, 2, 3])[::2], out, 8)
        with pytest.raises(ValueError):
            store.gather_into(np.array([0, 1]), out[:, ::2], 4)
        with pytest.raises(ValueError):
            store.gather_into(np.array([0, 1]), np.zeros(15, np.uint8), 8)
        readonly = np.zeros(16, np.uint8)
        readonly.flags.writeable = False
        with pytest.raises(ValueError):
            store.gather_into(np.array([0, 1]), readonly, 8)
        with pytest.raises(TypeError):
            store.gather_into(np.array([0, 1]), out, 8.0)  # type: ignore[arg-type]
        assert out.tobytes() == bytes(16)


@pytest.mark.parametrize(
    "index", [1.5, "0", None, [0.0], np.array([1.0]), {0: 1}, True, [True, 0], b"\x00"]
)
def test_non_integer_indices(store_path: str, index: Any) -> None:
    with Zrecord(store_path, create=True) as store:
        store.append([b"a", b"b"])
        with pytest.raises(TypeError):
            store.gather(index)
        with pytest.raises(TypeError):
            store.delete(index)
        with pytest.raises(TypeError):
            store.record_lengths(index)
        assert store.gather(slice(None)) == [b"a", b"b"]


@pytest.mark.parametrize("index", [2, -3, [0, 2], np.array([5]), np.array([True]), 2**64])
def test_out_of_range_indices(store_path: str, index: Any) -> None:
    with Zrecord(store_path, create=True) as store:
        store.append([b"a", b"b"])
        with pytest.raises(IndexError):
            store.gather(index)
        with pytest.raises(IndexError):
            store.delete(index)
        with pytest.raises(IndexError):
            store.gather_ragged(index)
        assert store.gather(slice(None)) == [b"a", b"b"]


def test_gather_into_refuses_out_of_range_before_copying(store_path: str) -> None:
    with Zrecord(store_path, create=True) as store:
        store.append_fixed(np.arange(40, dtype=np.uint8), 4)
        for bad in ([0, 10], [-1, 0], [3, 2**62]):
            out = np.full(8, 0xEE, np.uint8)
            with pytest.raises(IndexError):
                store.gather_into(np.array(bad, dtype=np.int64), out, 4)
            assert out.tobytes() == b"\xee" * 8
        out = np.full(8, 0xEE, np.uint8)
        store.gather_into(np.array([9, 0], dtype=np.int64), out, 4)
        assert out.tolist() == [36, 37, 38, 39, 0, 1, 2, 3]


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_gather_into_refuses_a_wrong_record_size_before_copying(
    store_path: str, codec: Codec
) -> None:
    # 2,000 records of 4 bytes, then one of 5: a copy that checked sizes as it went would have
    # filled the first 8,000 bytes of out before reaching the odd one.
    with Zrecord(store_path, create=True, codec=codec) as store:
        store.append_fixed(np.arange(8000, dtype=np.uint8), 4)
        store.append([b"fives"])
        indices = np.arange(len(store), dtype=np.int64)
        for record_size in (4, 5, 3):
            out = np.full(len(indices) * record_size, 0xEE, np.uint8)
            with pytest.raises(ValueError, match="record .* is .* bytes but its destination"):
                store.gather_into(indices, out, record_size)
            assert out.tobytes() == b"\xee" * out.nbytes
        out = np.full(8000, 0xEE, np.uint8)
        store.gather_into(indices[:-1], out, 4)
        assert out.tobytes() == np.arange(8000, dtype=np.uint8).tobytes()


# Run as an unprivileged user: root ignores permission bits.
_UNPRIVILEGED = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
_OPEN_AS_NOBODY = """
import sys
sys.path.insert(0, {root!r})
from loaderx.dataset import DenseDataset
from loaderx.zrecord import Zrecord
for opener in (lambda: DenseDataset({path!r}), lambda: Zrecord({path!r}, create=False)):
    try:
        opener()
    except PermissionError as exc:
        print(type(exc).__name__, exc)
    except Exception as exc:
        print("WRONG", type(exc).__name__, exc)
    else:
        print("WRONG opened")
"""


def test_a_store_folder_without_permissions_is_a_permission_error(
    others_can_reach: Callable[..., AbstractContextManager[None]],
) -> None:
    from loaderx.dataset import DenseDataset

    if os.geteuid() == 0 and subprocess.run(["setpriv", "--version"], capture_output=True).returncode:
        pytest.fail("setpriv (util-linux) is needed to run this test as an unprivileged user")
    # pytest's own tmp folders are private to root: use one every user may traverse, so only
    # the store folder's own mode 000 stands in the way.
    parent = tempfile.mkdtemp(prefix="loaderx-perm-", dir=tempfile.gettempdir())
    os.chmod(parent, 0o755)
    folder = os.path.join(parent, "ds")
    with DenseDataset(folder, dtype=np.int32, item_shape=(2,)) as ds:
        ds.append(np.arange(6, dtype=np.int32).reshape(3, 2))
    os.chmod(folder, 0o000)
    try:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        prefix = _UNPRIVILEGED if os.geteuid() == 0 else []
        script = _OPEN_AS_NOBODY.format(root=root, path=folder)
        with others_can_reach(root):
            done = subprocess.run(
                [*prefix, sys.executable, "-c", script], capture_output=True, text=True,
                timeout=120,
            )
    finally:
        os.chmod(folder, 0o755)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2, done.stdout
    for line in lines:
        assert line.startswith("PermissionError"), line
        assert "permission denied" in line and folder in line, line
    with DenseDataset(folder) as ds:  # untouched
        assert ds[:].tolist() == [[0, 1], [2, 3], [4, 5]]
    shutil.rmtree(parent)


# --- lifetime -------------------------------------------------------------------------------------


def test_use_after_close(store_path: str) -> None:
    store = Zrecord(store_path, create=True)
    store.append([b"a"])
    store.close()
    store.close()
    out = np.zeros(1, np.uint8)
    calls: list[Callable[[], object]] = [
        lambda: len(store),
        lambda: store.append([b"b"]),
        lambda: store.append_fixed(np.zeros(4, np.uint8), 4),
        lambda: store.gather(0),
        lambda: store.gather_into(np.zeros(1, np.int64), out, 1),
        lambda: store.gather_ragged([0]),
        lambda: store.record_lengths([0]),
        lambda: store.delete(0),
        lambda: store.compact(),
        lambda: store.stats(),
        lambda: store.sync(),
        lambda: store.train_dict([b"sample"], 1024),
        lambda: store.has_dict,
    ]
    for call in calls:
        with pytest.raises(ValueError, match="closed"):
            call()
    assert "closed" in repr(store)
    with Zrecord(store_path, create=False) as again:
        assert again.gather(slice(None)) == [b"a"]


def test_unclosed_store_is_released_when_collected(store_path: str) -> None:
    store = Zrecord(store_path, create=True)
    store.append([b"a"])
    finalizer = store._finalizer
    assert finalizer.alive
    del store
    gc.collect()
    assert not finalizer.alive  # lx_store_close ran
    with Zrecord(store_path, create=False) as again:
        assert again.gather(slice(None)) == [b"a"]


def test_errors_are_loaderx_or_builtin_classes() -> None:
    assert issubclass(NotAStoreError, LoaderxError) and issubclass(NotAStoreError, ValueError)
    assert issubclass(CorruptStoreError, LoaderxError)


# --- fork -------------------------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_forked_child_gathers_and_parent_keeps_working(store_path: str) -> None:
    records = [bytes([i % 256]) * (i * 37 % 5000) + i.to_bytes(4, "little") for i in range(600)]
    with Zrecord(store_path, create=True) as store:
        store.append(records)
        assert store.gather(slice(None)) == records  # the parent's pool is up and used
        pid = os.fork()
        if pid == 0:  # the child: any failure is its exit status
            status = 1
            try:
                picks = list(range(599, -1, -2))
                ok = store.gather(picks) == [records[i] for i in picks]
                status = 0 if ok else 2
            finally:
                os._exit(status)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
        assert store.gather(slice(None)) == records
        assert store.append([b"after fork"]) == 600
        assert store.gather(-1) == [b"after fork"]


def test_a_file_in_place_of_the_store_folder_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "not-a-folder"
    path.write_bytes(b"hello")
    with pytest.raises(NotADirectoryError, match="is a file"):
        Zrecord(path)
    assert path.read_bytes() == b"hello"


def test_an_interrupted_delete_is_finished_by_a_writable_open_only(store_path: str) -> None:
    from loaderx.errors import ReadOnlyStoreError

    with Zrecord(store_path, create=True) as store:
        store.append([b"a", b"b", b"c"])
    # A log cut short by a crash (its table untouched): a read-only open cannot finish or drop
    # it and says so; a writable open drops it and the store is as it was.
    redo = os.path.join(store_path, "redo.zr")
    with open(redo, "wb") as f:
        f.write(b"ZRDO\x01")
    with pytest.raises(ReadOnlyStoreError, match="open the store writable once"):
        Zrecord(store_path, readonly=True)
    with Zrecord(store_path) as store:
        assert store.gather(slice(None)) == [b"a", b"b", b"c"]
    assert not os.path.exists(redo)
    with Zrecord(store_path, readonly=True) as store:
        assert len(store) == 3
