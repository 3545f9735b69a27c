"""Lock files and store files are never opened through a link: a lock file replaced by a link
is refused and nothing is made where it points, and no store file is created, appended to,
read or written through one.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from loaderx.errors import CorruptStoreError, ReadOnlyStoreError
from loaderx.zrecord import Zrecord

from lock_cases import ident_of, record


@pytest.mark.parametrize("name", ["open.lock", "maintenance.lock", "writer.lock"])
@pytest.mark.parametrize("target_exists", [False, True])
def test_a_lock_file_replaced_by_a_link_is_refused_and_nothing_is_made_where_it_points(
    tmp_path: Path, name: str, target_exists: bool
) -> None:
    """The lock files were created (O_CREAT) and flocked through a symlink in their place:
    opening the store made or locked the file the link named, anywhere outside the store."""
    store_path = str(tmp_path / "store")
    with Zrecord(store_path, create=True) as store:
        store.append([record(0), record(1)])
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "target"
    if target_exists:
        target.write_bytes(b"not the store's")
    os.unlink(os.path.join(store_path, name))
    os.symlink(target, os.path.join(store_path, name))
    refused = rf"{name.replace('.', '[.]')} is a symbolic link \(to '.*target'\), not the store's lock file"
    if name == "writer.lock":
        # Taken from the first write on: reading needs no writer lock.
        with Zrecord(store_path) as store:
            assert [ident_of(r) for r in store.gather(slice(None))] == [0, 1]
            with pytest.raises(CorruptStoreError, match=refused) as info:
                store.append([record(2)])
            assert repr(store_path) in str(info.value)
            assert store.stats()["records"] == 2
    else:
        with pytest.raises(CorruptStoreError, match=refused) as info:
            Zrecord(store_path)
        assert repr(store_path) in str(info.value)
        if name == "open.lock":
            # A read-only handle does not lock through the link either.
            with pytest.raises(CorruptStoreError, match=refused):
                Zrecord(store_path, readonly=True)
    assert os.listdir(outside) == (["target"] if target_exists else [])
    if target_exists:
        assert target.read_bytes() == b"not the store's"
    os.unlink(os.path.join(store_path, name))
    with Zrecord(store_path) as store:
        assert store.append([record(2)]) == 2
        assert [ident_of(r) for r in store.gather(slice(None))] == [0, 1, 2]
    assert not os.path.islink(os.path.join(store_path, name))


def _create(path: str) -> None:
    with Zrecord(path, create=True) as store:
        store.append([record(i) for i in range(8)])


def _delete(path: str) -> None:
    with Zrecord(path) as store:
        store.delete([0])


def _train_dict(path: str) -> None:
    with Zrecord(path) as store:
        store.train_dict([record(i) * 40 for i in range(200)], 2048)


@pytest.mark.parametrize(
    ("name", "made_first", "action"),
    [
        ("0.zr", False, _create),  # a fresh store's first chunk
        ("meta.zr.tmp", False, _create),  # written, then renamed to meta.zr
        ("sums.zr.tmp", False, _create),  # written, then renamed to sums.zr
        ("redo.zr", True, _delete),  # a delete's log
        ("dict.zr.tmp", True, _train_dict),  # written, then renamed to dict.zr
    ],
)
def test_a_store_file_it_creates_is_never_made_through_a_link(
    tmp_path: Path, name: str, made_first: bool, action: Callable[[str], None]
) -> None:
    """The files a store creates were created (O_CREAT, some with O_TRUNC) through a symlink
    in their place: the file the link named, outside the store, was made or emptied and
    written (a renamed temporary even left meta.zr or sums.zr a link out of the store)."""
    store_path = str(tmp_path / "store")
    if made_first:
        _create(store_path)
    else:
        os.mkdir(store_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside / "target", os.path.join(store_path, name))
    if name == "0.zr":
        with pytest.raises(CorruptStoreError, match=r"0[.]zr is a symbolic link \(to '.*target'\), "
                           "not the store's chunk file"):
            action(store_path)
    else:
        # A temporary or a log is the store's to replace: the link goes, the file is made here.
        action(store_path)
    assert os.listdir(outside) == []
    assert [n for n in os.listdir(store_path) if os.path.islink(os.path.join(store_path, n))] == (
        ["0.zr"] if name == "0.zr" else []
    )


def test_an_append_does_not_write_a_chunk_through_a_link(tmp_path: Path) -> None:
    store_path = str(tmp_path / "store")
    _create(store_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.move(os.path.join(store_path, "0.zr"), outside / "target")
    os.symlink(outside / "target", os.path.join(store_path, "0.zr"))
    size = (outside / "target").stat().st_size
    digest = hashlib.sha256((outside / "target").read_bytes()).hexdigest()
    with Zrecord(store_path) as store:
        with pytest.raises(CorruptStoreError, match=r"0[.]zr is a symbolic link"):
            store.append([record(8)])
        assert store.stats()["records"] == 8
    assert (outside / "target").stat().st_size == size
    assert hashlib.sha256((outside / "target").read_bytes()).hexdigest() == digest


@pytest.mark.parametrize(
    "name, what", [("meta.zr", "table file"), ("sums.zr", "checksum file"), ("0.zr", "chunk file"),
                   ("dict.zr", "dictionary file"), ("redo.zr", "delete log")],
)
@pytest.mark.parametrize("readonly", [False, True])
def test_an_existing_store_file_is_never_read_or_written_through_a_link(
    tmp_path: Path, name: str, what: str, readonly: bool
) -> None:
    """meta.zr, sums.zr, dict.zr, redo.zr and a chunk being read were opened through a symlink
    in their place: the store read (and an append wrote) the file the link named, outside."""
    store_path = str(tmp_path / "store")
    if name == "dict.zr":
        with Zrecord(store_path, create=True, codec="zstd_dict") as store:
            store.train_dict([record(i) for i in range(64)], 1024)
            store.append([record(i) for i in range(8)])
    else:
        _create(store_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    inside = os.path.join(store_path, name)
    if name == "redo.zr":
        (outside / "target").write_bytes(b"\0" * 64)  # not a log: never read, never replayed
    else:
        shutil.move(inside, outside / "target")
    os.symlink(outside / "target", inside)
    digest = hashlib.sha256((outside / "target").read_bytes()).hexdigest()
    refused = rf"{re.escape(name)} is a symbolic link \(to '.*target'\), not the store's {what}"
    expected: type[Exception] = CorruptStoreError
    if readonly and name == "redo.zr":  # refused before the log is looked at: it needs a writer
        expected, refused = ReadOnlyStoreError, "left redo.zr; open the store writable once"
    with pytest.raises(expected, match=refused):
        with Zrecord(store_path, readonly=readonly) as store:
            store.gather(list(range(8)))  # a chunk is opened by its first read
    assert hashlib.sha256((outside / "target").read_bytes()).hexdigest() == digest
    assert os.listdir(outside) == ["target"]
