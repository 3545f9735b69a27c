"""Small refusals that used to be confusing (issue 40, point 5): each raises before anything
changes, with a message that says what is wrong."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import numpy as np
import pytest

from loaderx._data import dataset_folder  # private: its look for the schema is raced
from loaderx._store.schema import has_schema  # private: the look it makes
from loaderx.cli import EXIT_PROBLEM, main
from loaderx.converter import from_numpy, recode
from loaderx.dataset import DenseDataset
from loaderx.errors import ManifestError, SchemaError


def test_a_sharded_dataset_without_its_manifest_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ds"
    from_numpy(str(path), np.arange(24, dtype=np.int32).reshape(12, 2), workers=2,
               shard_records=4)  # sharded from the start: shard-000000, shard-000001, ...
    assert not (path / "meta.zr").exists()
    os.remove(path / "shards.msgpack")
    before = sorted(os.listdir(path))
    with pytest.raises(ManifestError, match="manifest shards.msgpack is missing"):
        DenseDataset(str(path))
    with pytest.raises(ManifestError, match="shard-000000"):
        DenseDataset(str(path), readonly=True)
    # The command line said "pass create=True", which a CLI user cannot do.
    for command in ("info", "verify", "compact"):
        assert main([command, str(path)], out=io.StringIO()) == EXIT_PROBLEM
        error = capsys.readouterr().err
        assert error.startswith(f"loaderx {command}: "), error
        assert "manifest shards.msgpack is missing" in error and "create" not in error, error
    assert sorted(os.listdir(path)) == before


def test_recode_refuses_a_destination_inside_its_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "ds"
    from_numpy(str(source), np.arange(10, dtype=np.int16))
    before = sorted(os.listdir(source))
    with pytest.raises(ValueError, match="outside its source"):
        recode(str(source), str(source / "inner"))
    with pytest.raises(ValueError, match="outside its source"):  # through a link to the source
        os.symlink(source, tmp_path / "link")
        recode(str(tmp_path / "link"), str(source / "inner" / "deeper"), codec="raw")
    assert main(["recode", str(source), str(source / "inner")], out=io.StringIO()) == EXIT_PROBLEM
    assert capsys.readouterr().err == (
        f"loaderx recode: recode needs a destination outside its source ('{source}/inner' is "
        f"inside '{source}')\n"
    )
    assert sorted(os.listdir(source)) == before
    shutil.rmtree(source)


def test_torch_and_jax_refuse_what_they_cannot_take(tmp_path: Path) -> None:
    from loaderx.jax import device_prefetch
    from loaderx.torch import TorchDataset, collate

    from_numpy(str(tmp_path / "ds"), np.arange(10, dtype=np.int16))
    with DenseDataset(str(tmp_path / "ds"), readonly=True) as ds:
        with pytest.raises(TypeError, match="stream names must be strings"):
            TorchDataset({1: ds})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="iterator of batches"):
        device_prefetch(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="collate passes on the batches"):
        collate(5)
    assert collate({"x": 1}) == {"x": 1}


# Run as an unprivileged user: root ignores permission bits.
_UNPRIVILEGED = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
_OPEN_SHARDED_AS_NOBODY = """
import sys
sys.path.insert(0, {root!r})
from loaderx.dataset import DenseDataset
try:
    DenseDataset({path!r}, readonly=True)
except PermissionError as exc:
    print(type(exc).__name__, exc)
except Exception as exc:
    print("WRONG", type(exc).__name__, exc)
else:
    print("WRONG opened")
"""


def test_a_shard_folder_the_user_may_not_read_is_a_permission_error(
    others_can_reach: Callable[..., AbstractContextManager[None]],
) -> None:
    """A shard folder of mode 000 was "listed in shards.msgpack but missing from disk"."""
    if os.geteuid() == 0 and subprocess.run(["setpriv", "--version"], capture_output=True).returncode:
        pytest.fail("setpriv (util-linux) is needed to run this test as an unprivileged user")
    # pytest's own tmp folders are private to root: one every user may traverse instead.
    parent = tempfile.mkdtemp(prefix="loaderx-shard-perm-", dir=tempfile.gettempdir())
    try:
        os.chmod(parent, 0o755)
        path = os.path.join(parent, "ds")
        data = np.arange(24, dtype=np.int32).reshape(12, 2)
        from_numpy(path, data, workers=2, shard_records=4)
        shard = os.path.join(path, "shard-000001")
        os.chmod(shard, 0o000)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        prefix = _UNPRIVILEGED if os.geteuid() == 0 else []
        with others_can_reach(root):
            done = subprocess.run(
                [*prefix, sys.executable, "-c", _OPEN_SHARDED_AS_NOBODY.format(root=root, path=path)],
                capture_output=True, text=True, timeout=120,
            )
        os.chmod(shard, 0o755)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("PermissionError"), done.stdout
        assert shard in done.stdout and "missing" not in done.stdout, done.stdout
        with DenseDataset(path, readonly=True) as ds:  # untouched
            np.testing.assert_array_equal(ds[:], data)
    finally:
        shutil.rmtree(parent)


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under folder (by relative path) with its bytes; lock files left out."""
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*")) if path.is_file() and path.suffix != ".lock"
    }


@pytest.mark.parametrize("damage", ["folder", "dangling link"])
def test_maintenance_refuses_a_dataset_whose_schema_is_damaged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    """A folder in place of schema.msgpack made the dataset open as its bare store: `loaderx
    compact` compacted it and `info` called it a Zrecord store."""
    path = tmp_path / "ds"
    data = np.arange(40, dtype=np.int32).reshape(20, 2)
    from_numpy(str(path), data)
    with DenseDataset(str(path)) as ds:
        ds.delete([0, 5, 7])  # something for a compaction to reclaim
        kept = ds[:]
    schema = (path / "schema.msgpack").read_bytes()
    (path / "schema.msgpack").unlink()
    if damage == "folder":
        (path / "schema.msgpack").mkdir()
    else:
        (path / "schema.msgpack").symlink_to(tmp_path / "nothing-here")
    before = _files(path)
    for command in ("compact", "info", "verify", "stats"):
        assert main([command, str(path)], out=io.StringIO()) == EXIT_PROBLEM
        error = capsys.readouterr().err
        assert error == (
            f"loaderx {command}: {path}/schema.msgpack is a "
            f"{'folder' if damage == 'folder' else 'symbolic link to nothing'}, not a loaderx "
            "schema: the dataset is damaged and does not open; restore schema.msgpack from a "
            "copy of the dataset\n"
        ), error
    for attempt in (lambda: DenseDataset(str(path)), lambda: DenseDataset(str(path), readonly=True),
                    lambda: DenseDataset(str(path), dtype=np.int32, item_shape=(2,)),
                    lambda: recode(str(path), str(tmp_path / "copy"))):
        with pytest.raises(SchemaError, match="the dataset is damaged"):
            attempt()
    assert _files(path) == before
    assert not (tmp_path / "copy").exists()
    # Repaired, it opens with the records the deletes left (nothing was compacted meanwhile).
    if damage == "folder":
        (path / "schema.msgpack").rmdir()
    else:
        (path / "schema.msgpack").unlink()
    (path / "schema.msgpack").write_bytes(schema)
    with DenseDataset(str(path), readonly=True) as ds:
        np.testing.assert_array_equal(ds[:], kept)


def test_a_shard_whose_schema_is_a_folder_says_so(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    from_numpy(str(path), np.arange(24, dtype=np.int32).reshape(12, 2), workers=2,
               shard_records=4)
    (path / "shard-000002" / "schema.msgpack").unlink()
    (path / "shard-000002" / "schema.msgpack").mkdir()
    with pytest.raises(SchemaError, match="shard-000002/schema.msgpack is a folder"):
        DenseDataset(str(path), readonly=True)


def test_a_schema_put_in_place_between_two_looks_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A conversion swapping the dataset's folder can put schema.msgpack in place after the
    first look found nothing: a concurrent reader then said the file was "a special file, not
    a loaderx schema" (seen in tests/data/test_parallel.py's concurrent reader)."""
    from loaderx._os.paths import is_file
    from loaderx._store import schema

    source = tmp_path / "ds"
    from_numpy(str(source), np.arange(10, dtype=np.int16))
    moved = tmp_path / "aside.msgpack"
    os.rename(source / "schema.msgpack", moved)
    looks = []

    def swapped_after_first_look(path: str) -> bool:
        looks.append(path)
        found = is_file(path)
        if len(looks) == 1:
            os.rename(moved, source / "schema.msgpack")  # the swap lands right after it
        return found

    monkeypatch.setattr("loaderx._store.schema.is_file", swapped_after_first_look)
    assert schema.has_schema(str(source))  # it used to raise SchemaError ("a special file")
    assert looks[0] == str(source / "schema.msgpack")


@pytest.mark.parametrize("readonly", [True, False])
def test_a_folder_that_comes_back_while_it_is_opened_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, readonly: bool
) -> None:
    """The folder away when the open looked for its schema and back when it looked for a bare
    store: the open reads the dataset now there. Before, it raised SchemaError ("a Zrecord
    store without schema.msgpack"), a worker process reopening a folder renamed back did so in
    CI (test_process_worker_faults), and so could a reader racing a conversion's swap."""
    folder = tmp_path / "label"
    from_numpy(str(folder), np.arange(10, dtype=np.int64), codec="raw")
    away = tmp_path / "away"
    look = has_schema
    # The look that decides between a dataset and the rest: a writable open looks once before
    # (for a conversion's interrupted swap to put back).
    looks = [False] * (1 if readonly else 2)
    looks[-1] = True

    def away_for_the_deciding_look(path: str) -> bool:
        if not looks or not looks.pop(0):
            return look(path)
        folder.rename(away)
        try:
            return look(path)
        finally:
            away.rename(folder)

    monkeypatch.setattr(dataset_folder, "has_schema", away_for_the_deciding_look)
    with DenseDataset(str(folder), readonly=readonly) as ds:
        assert not looks
        assert ds[:].tolist() == list(range(10))
