"""write_file_atomically: all or nothing, and an error that names its file."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from loaderx._os.paths import write_file_atomically  # private: the helper under test
from small_disks import leave_free, mounted_tmpfs


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "disk", "size=1m") as mount:
        yield mount


def test_it_replaces_the_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "f.msgpack"
    target.write_bytes(b"old")
    write_file_atomically(str(target), b"new contents")
    assert target.read_bytes() == b"new contents"
    assert os.listdir(tmp_path) == ["f.msgpack"]


def test_a_full_disk_names_the_file_and_keeps_the_old_one(small_disk: Path) -> None:
    """A write or fsync error carries no file name of its own ("No space left on device" was
    all a user saw when a conversion's schema did not fit); it now names the file."""
    target = small_disk / "schema.msgpack"
    target.write_bytes(b"old")
    filler = leave_free(small_disk, 0)
    with pytest.raises(OSError) as raised:
        write_file_atomically(str(target), b"x" * (256 << 10))
    assert raised.value.errno == errno.ENOSPC
    assert raised.value.filename == str(target)
    assert str(target) in str(raised.value)
    assert target.read_bytes() == b"old"
    assert sorted(os.listdir(small_disk)) == ["filler", "schema.msgpack"]
    filler.unlink()
