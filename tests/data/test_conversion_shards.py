"""shard_records= in a conversion: honoured in one process as in several, and a zstd_dict shard
of a few records (a part's tail) still gets a dictionary.

Before: from_numpy(..., shard_records=100) in one process wrote a single store of every record,
and with workers=2 a part of 103 records cut into 100 + 3 failed in its worker, since the
3-record shard could not train a dictionary of its own."""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from loaderx._store.schema import Codec
from loaderx.converter import from_iterator, from_numpy
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.errors import WorkerError
from small_disks import leave_free, mounted_tmpfs


def rows(count: int) -> np.ndarray:
    # Compressible rows (values 0 to 3), so a dictionary has something to learn.
    return np.random.default_rng(7).integers(0, 4, size=(count, 64), dtype=np.uint8)


def shard_counts(path: Path) -> list[int]:
    with DenseDataset(path, readonly=True) as ds:
        return [entry["records"] for entry in ds.shard_stats()]


@pytest.mark.parametrize("codec", ["raw", "zstd", "zstd_dict"])
@pytest.mark.parametrize("workers, counts", [
    (1, [100, 100, 5]),         # one process rolls over every 100 records
    (2, [100, 2, 100, 3]),      # each worker cuts its part (102 and 103 records) itself
])
def test_from_numpy_cuts_shards_of_shard_records(
    tmp_path: Path, codec: Codec, workers: int, counts: list[int]
) -> None:
    data = rows(205)
    assert from_numpy(tmp_path / "ds", data, codec=codec, shard_records=100,
                      workers=workers) == 205
    assert shard_counts(tmp_path / "ds") == counts
    with DenseDataset(tmp_path / "ds", readonly=True) as ds:
        assert ds.codec == codec
        assert ds[:].tobytes() == data.tobytes()
        picked = np.array([204, 0, 100, 101, 102, 199], dtype=np.int64)
        assert ds[picked].tobytes() == data[picked].tobytes()


def test_parts_too_small_to_train_alone_share_the_whole_arrays_sample(tmp_path: Path) -> None:
    """12 records in two workers: parts of 6, under the 7 a dictionary needs; the sample of all
    12 trains each part's dictionary, as it does in one process."""
    data = rows(12)
    assert from_numpy(tmp_path / "ds", data, codec="zstd_dict", workers=2) == 12
    with DenseDataset(tmp_path / "ds", readonly=True) as ds:
        assert ds.codec == "zstd_dict" and ds[:].tobytes() == data.tobytes()


def test_too_few_records_for_a_dictionary_are_refused_before_any_worker(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs at least 7 of them"):
        from_numpy(tmp_path / "ds", rows(5), codec="zstd_dict", workers=2)
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize("workers", [1, 2])
def test_records_zstd_cannot_train_on_are_refused_naming_the_destination(
    tmp_path: Path, workers: int
) -> None:
    """Eight 1-byte records: zstd cannot train on them. With workers=2 that was a WorkerError
    from inside a worker; both now raise ValueError naming the destination, not a hidden
    staging folder, and the parallel conversion before any worker starts."""
    with pytest.raises(ValueError, match="dictionary training") as refused:
        from_numpy(tmp_path / "ds", np.arange(8, dtype=np.int8), codec="zstd_dict",
                   workers=workers)
    assert repr(str(tmp_path / "ds")) in str(refused.value)
    assert "loaderx-part" not in str(refused.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_every_shard_of_a_parallel_conversion_shares_one_dictionary(tmp_path: Path) -> None:
    data = rows(205)
    from_numpy(tmp_path / "ds", data, codec="zstd_dict", shard_records=100, workers=2)
    dictionaries = {p.read_bytes() for p in (tmp_path / "ds").rglob("dict.zr")}
    assert len(list((tmp_path / "ds").rglob("dict.zr"))) == 4 and len(dictionaries) == 1
    with DenseDataset(tmp_path / "ds", readonly=True) as ds:
        report = ds.verify()
        assert report.bad_count == 0 and report.bad == []
        assert ds[:].tobytes() == data.tobytes()


def test_from_iterator_in_one_process_cuts_shards_of_shard_records(tmp_path: Path) -> None:
    records = [np.arange(i % 5, dtype=np.int32) * i for i in range(23)]
    assert from_iterator(tmp_path / "ds", records, codec="zstd", shard_records=10) == 23
    with RaggedDataset(tmp_path / "ds", readonly=True) as ds:
        assert [entry["records"] for entry in ds.shard_stats()] == [10, 10, 3]
        assert len(ds) == 23
        for index, record in enumerate(records):
            got = ds[index]
            assert got.dtype == record.dtype and np.array_equal(got, record)


def test_a_bad_shard_records_is_refused_in_one_process_too(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="shard_records must be in 1"):
        from_numpy(tmp_path / "ds", rows(3), shard_records=0)
    with pytest.raises(TypeError, match="shard_records must be an int"):
        from_iterator(tmp_path / "r", [np.arange(3)], shard_records=2.5)  # type: ignore[arg-type]
    assert not (tmp_path / "ds").exists() and not (tmp_path / "r").exists()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "disk", "size=16m") as mount:
        yield mount


def _no_space(error: BaseException) -> bool:
    """Whether error is the disk running out: ENOSPC here, or a worker's, reported by name."""
    if isinstance(error, OSError):
        return error.errno == errno.ENOSPC
    return isinstance(error, WorkerError) and f"[Errno {errno.ENOSPC}]" in str(error)


def test_a_parallel_zstd_dict_conversion_on_a_full_disk_is_all_or_nothing(
    small_disk: Path,
) -> None:
    """The shared dictionary is written before any worker starts, then copied into every
    shard: wherever the disk fills (the dictionary, a worker's shard, a worker's copy of the
    dictionary) the conversion raises ENOSPC and leaves no destination and no hidden folder;
    where it fits, every record reads back."""
    data = np.random.default_rng(11).integers(0, 64, size=(3000, 256), dtype=np.uint8)
    outcomes = []
    for free in (0, 8 << 10, 16 << 10, 64 << 10, 192 << 10, 512 << 10, 1 << 20, 2 << 20,
                 15 << 20):
        filler = leave_free(small_disk, free)
        destination = small_disk / "ds"
        try:
            count = from_numpy(destination, data, codec="zstd_dict", workers=2,
                               shard_records=400)
        except (OSError, WorkerError) as error:
            assert _no_space(error), f"free {free}: {error!r}"
            assert sorted(os.listdir(small_disk)) == ["filler"], f"free {free}"
            outcomes.append(f"refused {type(error).__name__}")
        else:
            assert count == 3000
            with DenseDataset(destination, readonly=True) as ds:
                np.testing.assert_array_equal(ds[:], data)
                assert [e["records"] for e in ds.shard_stats()] == [400, 400, 400, 300] * 2
            shutil.rmtree(destination)
            outcomes.append("written")
        filler.unlink()
    # The sweep fills the disk in the calling process (the store, its schema, the dictionary),
    # in a worker (a shard, its copy of the dictionary) and not at all: each branch ran.
    assert set(outcomes) == {"refused OSError", "refused WorkerError", "written"}, outcomes
