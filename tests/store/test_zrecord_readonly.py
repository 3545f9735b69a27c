"""Read-only opens: every write refused before anything is touched, nothing created, a
concurrent writer seen, datasets and sharded datasets read-only, and reads from a read-only
tmpfs mount and as an unprivileged user (both for real).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import numpy as np
import pytest

from loaderx.converter import from_numpy
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.errors import ReadOnlyStoreError
from loaderx.zrecord import Zrecord

from lock_cases import REPO, finish, folder_digest, ident_of, python, record


def test_readonly_refuses_every_write_before_touching_anything(store_path: str) -> None:
    with Zrecord(store_path, create=True) as store:
        store.append([record(i) for i in range(5)])
    before = folder_digest(store_path)
    with Zrecord(store_path, readonly=True) as store:
        assert store.readonly
        for call in (
            lambda: store.append([record(9)]),
            lambda: store.append_fixed(np.zeros(8, np.uint8), 8),
            lambda: store.delete([0]),
            lambda: store.compact(),
            lambda: store.train_dict([b"x" * 100] * 40, 1024),
            lambda: store.sync(),
        ):
            with pytest.raises(ReadOnlyStoreError, match="readonly=True"):
                call()
        assert [ident_of(r) for r in store.gather(slice(None))] == list(range(5))
        assert store.stats()["records"] == 5
    assert folder_digest(store_path) == before


def test_readonly_never_creates(tmp_path: Path) -> None:
    missing = str(tmp_path / "nothing")
    with pytest.raises(FileNotFoundError, match="pass create=True to create one"):
        Zrecord(missing, readonly=True)
    assert not os.path.exists(missing)
    # create=True with readonly=True: the advice must not be the create=True already passed.
    with pytest.raises(FileNotFoundError, match=r"meta.zr is missing\); readonly=True never "
                                                "creates one: open it without readonly"):
        Zrecord(missing, create=True, readonly=True)
    assert not os.path.exists(missing)
    with pytest.raises(FileNotFoundError):
        DenseDataset(missing, readonly=True)
    assert not os.path.exists(missing)


def test_readonly_reader_sees_a_concurrent_writer(store_path: str) -> None:
    writer = Zrecord(store_path, create=True)
    writer.append([record(0)])
    reader = Zrecord(store_path, readonly=True)
    writer.append([record(1), record(2)])
    assert [ident_of(r) for r in reader.gather(slice(None))] == [0, 1, 2]
    reader.close()
    writer.close()


def test_readonly_dataset(tmp_path: Path) -> None:
    path = str(tmp_path / "ds")
    data = np.arange(60, dtype=np.int32).reshape(10, 6)
    with DenseDataset(path, dtype=np.int32, item_shape=(6,)) as ds:
        ds.append(data)
    with DenseDataset(path, readonly=True) as ds:
        assert ds.readonly
        np.testing.assert_array_equal(ds[:], data)
        with pytest.raises(ReadOnlyStoreError):
            ds.append(data[:1])
        with pytest.raises(ReadOnlyStoreError):
            ds.delete(0)
        assert len(ds) == 10
    # The same schema may be named while opening read-only; nothing is created or changed.
    with DenseDataset(path, dtype=np.int32, item_shape=(6,), readonly=True) as ds:
        np.testing.assert_array_equal(ds[[9, 0]], data[[9, 0]])
    # Where there is none, naming the schema read-only creates nothing, and the message says why
    # (it used to say "pass dtype= (and item_shape=) to create one", which the caller had done).
    missing = str(tmp_path / "missing")
    for cls in (DenseDataset, RaggedDataset):
        with pytest.raises(FileNotFoundError, match="readonly=True opens an existing one and never"):
            cls(missing, dtype=np.int32, item_shape=(6,), readonly=True)
    assert not os.path.exists(missing)


@pytest.fixture
def read_only_mount() -> Iterator[str]:
    """A small tmpfs, world-readable, that the test fills and then remounts read-only."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount_point = tempfile.mkdtemp(prefix="loaderx-ro-")
    os.chmod(mount_point, 0o755)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=0755", "tmpfs", mount_point], check=True)
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", mount_point], check=True)
        os.rmdir(mount_point)


def test_readonly_on_a_read_only_filesystem(read_only_mount: str) -> None:
    path = os.path.join(read_only_mount, "store")
    old = os.path.join(read_only_mount, "old")
    with Zrecord(path, create=True) as store:
        store.append([record(i) for i in range(50)])
    with Zrecord(old, create=True) as store:
        store.append([record(i) for i in range(3)])
    # A store written before lock files existed has none; a read-only open must not need them.
    os.remove(os.path.join(old, "open.lock"))
    os.remove(os.path.join(old, "writer.lock"))
    os.remove(os.path.join(old, "maintenance.lock"))
    subprocess.run(["mount", "-o", "remount,ro", read_only_mount], check=True)
    with Zrecord(path, readonly=True) as store:
        assert [ident_of(r) for r in store.gather(slice(None))] == list(range(50))
        with pytest.raises(ReadOnlyStoreError):
            store.append([record(50)])
    with Zrecord(old, readonly=True) as store:
        assert [ident_of(r) for r in store.gather(slice(None))] == [0, 1, 2]
    with pytest.raises(PermissionError, match="readonly=True"):
        Zrecord(path)


def test_recode_reads_its_source_from_a_read_only_filesystem(
    read_only_mount: str, tmp_path: Path
) -> None:
    from loaderx.converter import from_numpy, recode
    from loaderx.dataset import RaggedDataset

    dense = np.arange(600, dtype=np.int32).reshape(100, 6)
    ragged = [np.arange(n, dtype=np.int16) for n in (4, 0, 9, 1)]
    from_numpy(os.path.join(read_only_mount, "dense"), dense, codec="raw")
    path = os.path.join(read_only_mount, "ragged")
    with RaggedDataset(path, dtype=np.int16, item_shape=(), codec="zstd") as rs:
        rs.append(ragged)
    subprocess.run(["mount", "-o", "remount,ro", read_only_mount], check=True)
    recode(os.path.join(read_only_mount, "dense"), str(tmp_path / "dense"), codec="zstd")
    recode(os.path.join(read_only_mount, "ragged"), str(tmp_path / "ragged"), codec="raw")
    with DenseDataset(tmp_path / "dense", readonly=True) as ds:
        assert ds.codec == "zstd"
        np.testing.assert_array_equal(ds[:], dense)
    with RaggedDataset(tmp_path / "ragged", readonly=True) as rs:
        assert rs.codec == "raw"
        for want, have in zip(ragged, rs[:], strict=True):
            np.testing.assert_array_equal(have, want)


def test_readonly_for_a_user_who_cannot_write(
    tmp_path: Path, others_can_reach: Callable[..., AbstractContextManager[None]]
) -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("switching to an unprivileged user needs root and setpriv")
    base = tempfile.mkdtemp(prefix="loaderx-nobody-")
    try:
        os.chmod(base, 0o755)
        path = os.path.join(base, "ds")
        data = np.arange(200, dtype=np.uint16).reshape(20, 10)
        with DenseDataset(path, dtype=np.uint16, item_shape=(10,)) as ds:
            ds.append(data)
        subprocess.run(["chmod", "-R", "a-w", path], check=True)
        code = f"""
            import numpy as np
            from loaderx.dataset import DenseDataset
            from loaderx.errors import ReadOnlyStoreError
            with DenseDataset({path!r}, readonly=True) as ds:
                np.testing.assert_array_equal(ds[:], np.arange(200, dtype=np.uint16).reshape(20, 10))
                try:
                    ds.append(ds[:1])
                except ReadOnlyStoreError:
                    print("refused", flush=True)
            try:
                DenseDataset({path!r})
            except PermissionError as exc:
                print("writable open:", exc, flush=True)
        """
        with others_can_reach(REPO):
            out = finish(python(code, user="nobody"))
        assert out.splitlines()[0] == "refused"
        assert out.splitlines()[1].startswith("writable open:")
        assert "readonly=True" in out.splitlines()[1]
    finally:
        subprocess.run(["chmod", "-R", "u+w", base], check=True)
        shutil.rmtree(base)


def test_readonly_sharded_dataset(tmp_path: Path) -> None:
    path = str(tmp_path / "sharded")
    data = np.arange(250, dtype=np.int64).reshape(25, 10)
    with DenseDataset(path, dtype=np.int64, item_shape=(10,), shard_records=10) as ds:
        ds.append(data)
        assert ds.sharded
    names = sorted(os.listdir(path))
    with DenseDataset(path, readonly=True, shard_records=10) as ds:
        assert ds.readonly and ds.sharded
        np.testing.assert_array_equal(ds[:], data)
        for call in (lambda: ds.append(data[:1]), lambda: ds.delete(0), ds.compact, ds.sync):
            with pytest.raises(ReadOnlyStoreError, match="readonly=True"):
                call()
        np.testing.assert_array_equal(ds[[24, 0, 13]], data[[24, 0, 13]])
    assert sorted(os.listdir(path)) == names


def test_a_sharded_stores_options_are_read_only(tmp_path: Path) -> None:
    # ds.store of a sharded dataset: `ds.store.readonly = False` used to be accepted, then an
    # append went as far as a shard's own refusal; `ds.store.path = ...` changed its repr.
    from_numpy(tmp_path / "sh", np.arange(100, dtype=np.int64), shard_records=30)
    before_open = sharded_digest(tmp_path / "sh")
    with DenseDataset(tmp_path / "sh", readonly=True) as ds:
        store = ds.store
        assert type(store).__name__ == "ShardedStore"
        for name in ("path", "schema", "shard_records", "readonly", "verify_reads"):
            before = getattr(store, name)
            with pytest.raises(AttributeError):
                setattr(store, name, False)
            assert getattr(store, name) == before
        assert store.readonly and getattr(store, "shard_records") == ds.shard_records
        with pytest.raises(ReadOnlyStoreError):
            ds.append(np.array([5], np.int64))
        assert len(ds) == 100 and ds[[0, 99]].tolist() == [0, 99]
    assert sharded_digest(tmp_path / "sh") == before_open


def sharded_digest(root: Path) -> dict[str, object]:
    """folder_digest of the dataset's folder and of each shard's."""
    return {
        entry.name: folder_digest(str(entry)) if entry.is_dir() else entry.read_bytes()
        for entry in sorted(root.iterdir())
    }
