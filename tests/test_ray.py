"""loaderx.ray on a local Ray instance (2 CPUs): the Datasink, its failure path, and the reader.

One Ray instance serves the whole module (starting one takes seconds). Rows come from
ray.data.range through a deterministic map, so every expected value is computed here again.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import ray
import ray.data
from ray.data.context import DataContext

from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.ray import read_dataset, write_dataset
from loaderx.shards import read_manifest

ROWS = 600


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    # Ray's workers cannot import this test module: ship its functions by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    context = DataContext.get_current()
    context.execution_options.preserve_order = True
    context.enable_progress_bars = False
    try:
        yield
    finally:
        ray.shutdown()


def image_of(i: int) -> npt.NDArray[np.uint8]:
    return ((np.arange(4 * 4 * 3).reshape(4, 4, 3) + 7 * i) % 251).astype(np.uint8)


def tokens_of(i: int) -> npt.NDArray[np.int32]:
    return (np.arange(i % 11, dtype=np.int32) * 3 + i).astype(np.int32)


def make_rows(batch: dict[str, npt.NDArray[Any]]) -> dict[str, Any]:
    ids = [int(i) for i in batch["id"]]
    tokens = np.empty(len(ids), dtype=object)
    tokens[:] = [tokens_of(i) for i in ids]
    return {"image": np.stack([image_of(i) for i in ids]),
            "label": np.asarray(ids, dtype=np.int64), "tokens": tokens}


def fail_at(row: int) -> Any:
    def mapper(batch: dict[str, npt.NDArray[Any]]) -> dict[str, Any]:
        if row in set(int(i) for i in batch["id"]):
            raise ValueError(f"cannot decode row {row}")
        return make_rows(batch)
    return mapper


def source(first: int = 0, blocks: int = 4) -> ray.data.Dataset:
    return ray.data.range(ROWS, override_num_blocks=blocks).map_batches(make_rows).map_batches(
        lambda b: {**b, "label": b["label"] + first})


def hidden_beside(path: Path) -> list[str]:
    return sorted(n for n in os.listdir(path.parent) if n.startswith("."))


def tree_digest(folder: Path) -> dict[str, str]:
    """Small files by content, store files by size and mtime (they are sparse and huge)."""
    found: dict[str, str] = {}
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            info = os.stat(path)
            if info.st_size < (1 << 20):
                with open(path, "rb") as f:
                    found[os.path.relpath(path, folder)] = hashlib.sha256(f.read()).hexdigest()
            else:
                found[os.path.relpath(path, folder)] = f"{info.st_size}:{info.st_mtime_ns}"
    return found


def check_columns(path: Path, labels: npt.NDArray[np.int64], ids: range) -> None:
    with DenseDataset(str(path / "image")) as images, DenseDataset(str(path / "label")) as lab, \
            RaggedDataset(str(path / "tokens")) as tokens:
        assert len(images) == len(lab) == len(tokens) == len(ids)
        np.testing.assert_array_equal(images[:], np.stack([image_of(i) for i in ids]))
        np.testing.assert_array_equal(lab[:], labels)
        for got, i in zip(tokens[:], ids, strict=True):
            assert got.dtype == np.int32
            np.testing.assert_array_equal(got, tokens_of(i))


def test_write_then_read_round_trip(tmp_path: Path) -> None:
    web = tmp_path / "web"
    written = write_dataset(source(), str(web), columns=["image", "label", "tokens"],
                            ragged=["tokens"], codec="zstd", shard_records=100)
    assert written == ROWS
    assert sorted(os.listdir(web)) == ["image", "label", "tokens"]
    assert hidden_beside(web) == []
    manifest = read_manifest(str(web / "label"))
    assert manifest is not None and len(manifest.shards) >= 6  # 4 tasks, shards of <= 100
    assert all(e.records <= 100 for e in manifest.shards)
    check_columns(web, np.arange(ROWS, dtype=np.int64), range(ROWS))

    back = read_dataset(str(web), override_num_blocks=3)
    rows = back.take_all()
    assert [int(r["label"]) for r in rows] == list(range(ROWS))
    for r in rows[::37]:
        i = int(r["label"])
        np.testing.assert_array_equal(r["image"], image_of(i))
        np.testing.assert_array_equal(r["tokens"], tokens_of(i))


def test_columns_map_to_folders_and_append_adds_shards(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    write_dataset(source(), str(corpus), columns={"image": "x", "label": "y"})
    assert sorted(os.listdir(corpus)) == ["x", "y"]
    before = read_manifest(str(corpus / "y"))
    assert before is not None
    # Like from_numpy(append=True): the rows this call added, not the new total.
    assert write_dataset(source(first=ROWS), str(corpus), columns={"image": "x", "label": "y"},
                         append=True) == ROWS
    with DenseDataset(str(corpus / "y")) as y, DenseDataset(str(corpus / "x")) as x:
        np.testing.assert_array_equal(y[:], np.arange(2 * ROWS))
        np.testing.assert_array_equal(x[ROWS:], x[:ROWS])
    after = read_manifest(str(corpus / "y"))
    assert after is not None and after.names[: len(before.shards)] == before.names
    single = read_dataset(str(corpus / "y")).take_all()
    assert [int(r["y"]) for r in single] == list(range(2 * ROWS))


def test_failing_task_leaves_a_new_destination_absent(tmp_path: Path) -> None:
    web = tmp_path / "web"
    ds = ray.data.range(ROWS, override_num_blocks=4).map_batches(fail_at(450))
    with pytest.raises(Exception, match="cannot decode row 450"):
        write_dataset(ds, str(web), columns=["image", "label"])
    assert not web.exists()
    assert hidden_beside(web) == []


def test_failing_task_leaves_an_appended_dataset_unchanged(tmp_path: Path) -> None:
    web = tmp_path / "web"
    write_dataset(source(), str(web), columns=["image", "label", "tokens"], ragged=["tokens"])
    before = tree_digest(web)
    ds = ray.data.range(ROWS, override_num_blocks=4).map_batches(fail_at(599))
    with pytest.raises(Exception, match="cannot decode row 599"):
        write_dataset(ds, str(web), columns=["image", "label", "tokens"], ragged=["tokens"],
                      append=True)
    assert tree_digest(web) == before
    assert hidden_beside(web) == []
    check_columns(web, np.arange(ROWS, dtype=np.int64), range(ROWS))


def test_bad_arguments_are_refused_before_writing(tmp_path: Path) -> None:
    web = tmp_path / "web"
    with pytest.raises(ValueError, match="plain relative name"):
        write_dataset(source(), str(web), columns={"image": "../elsewhere"})
    with pytest.raises(ValueError, match="same folder"):
        write_dataset(source(), str(web), columns={"image": "a", "label": "a"})
    with pytest.raises(ValueError, match="not written"):
        write_dataset(source(), str(web), columns=["image"], ragged=["tokens"])
    with pytest.raises(ValueError, match="zstd_dict"):
        write_dataset(source(), str(web), columns=["image"], codec="zstd_dict")
    web.mkdir()
    (web / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="append=True"):
        write_dataset(source(), str(web), columns=["image"])
    assert os.listdir(web) == ["notes.txt"]
    assert hidden_beside(web) == []
