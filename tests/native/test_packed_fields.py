"""The packed gather's short path passes its arrays by their NumPy fields
(loaderx._native.calls.gather_packed -> lx_*_gather_packed_arrays), as the dense read does: it
must write exactly what the checked path writes (Zrecord.gather_packed, View.gather_packed),
be the way a loader's arrays actually take, and leave every array it refuses to the older
route (data pointers, then the checked method), with the same answers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from loaderx._native import calls as native_calls
from loaderx._native import library as _native
from loaderx._native.calls import NativeCalls
from loaderx._store.sharded_store import ShardedStore
from loaderx.dataloader import DataLoader
from loaderx.dataset import RaggedDataset

# calls.py, ragged.py and the loader are compiled with mypyc: the compiled run takes this too.
pytestmark = pytest.mark.compiled

COUNT = 120
ITEM = (3,)  # int16 rows of 3: 6-byte rows, so rows and byte offsets differ
CODECS = ("raw", "zstd", "zstd_dict")


def records() -> list[npt.NDArray[np.int16]]:
    """Sequences of 0 to 40 rows; record i's first row starts with i (when it has one)."""
    rng = np.random.default_rng(11)
    made = []
    for i, length in enumerate(rng.integers(0, 41, size=COUNT)):
        record = rng.integers(-9_000, 9_000, size=(int(length), *ITEM), dtype=np.int16)
        if length:
            record[0, 0] = i
        made.append(record)
    return made


RECORDS = records()


@pytest.fixture(scope="module", params=[(codec, layout) for codec in CODECS
                                        for layout in ("one store", "shards")],
                ids=lambda p: f"{p[0]}-{p[1]}")
def dataset(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[RaggedDataset]:
    codec, layout = request.param
    shards: dict[str, Any] = {"shard_records": 25} if layout == "shards" else {}
    made = RaggedDataset(tmp_path_factory.mktemp("packed") / "d", dtype=np.int16,
                         item_shape=ITEM, codec=codec, **shards)
    if codec == "zstd_dict":
        made.train_dict(RECORDS)
    made.append(RECORDS)
    assert isinstance(made.store, ShardedStore) == (layout == "shards")
    yield made
    made.close()


def native_owner(dataset: RaggedDataset) -> NativeCalls:
    """The object whose handle the short path calls on: the Zrecord, or a sharded store's view."""
    store = dataset.store
    if isinstance(store, ShardedStore):
        assert store.view is not None
        return store.view
    assert isinstance(store, NativeCalls)
    return store


class Counted:
    """Counts the calls of one native function on one object, and the statuses it answered,
    by standing in for the attribute the short path reads it from."""

    def __init__(self, owner: NativeCalls, attribute: str,
                 monkeypatch: pytest.MonkeyPatch) -> None:
        self.function = getattr(owner, attribute)
        self.statuses: list[int] = []
        monkeypatch.setattr(owner, attribute, self)

    def __call__(self, *args: int) -> int:
        code = int(self.function(*args))
        self.statuses.append(code)
        return code


def fields_and_typed(dataset: RaggedDataset,
                     monkeypatch: pytest.MonkeyPatch) -> tuple[Counted, Counted]:
    owner = native_owner(dataset)
    return (Counted(owner, "_gather_packed_arrays_native", monkeypatch),
            Counted(owner, "_gather_packed_native", monkeypatch))


def loader_arrays(count: int, size: int) -> tuple[Any, Any, Any]:
    """out (filled with 0xAB), offsets and rows (filled with 7) as a loader's step makes them."""
    return (np.full(size, 0xAB, dtype=np.uint8), np.full(count + 1, 7, dtype=np.uint64),
            np.full(count + 1, 7, dtype=np.int32))


def expected(indices: npt.NDArray[np.int64]) -> tuple[bytes, list[int], list[int]]:
    """The records' bytes back to back, their byte offsets and their row offsets."""
    chosen = [RECORDS[int(i)] for i in indices]
    offsets = np.cumsum([0] + [r.nbytes for r in chosen]).tolist()
    rows = np.cumsum([0] + [len(r) for r in chosen]).tolist()
    return b"".join(r.tobytes() for r in chosen), offsets, rows


BATCH = np.random.default_rng(2).integers(0, COUNT, size=64).astype(np.int64)
SMALL = BATCH[:9]


def test_the_short_path_takes_the_fields_way_here() -> None:
    assert native_calls.ARRAY_CALLS
    packed = {"lx_store_gather_packed_arrays", "lx_view_gather_packed_arrays"}
    assert packed <= _native.UNTYPED_CALLS


@pytest.mark.parametrize("with_rows", [True, False], ids=["rows", "no rows"])
def test_the_fields_way_writes_what_the_checked_path_writes(
    dataset: RaggedDataset, with_rows: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    fields, typed = fields_and_typed(dataset, monkeypatch)
    data, offsets_wanted, rows_wanted = expected(BATCH)
    out, offsets, rows = loader_arrays(len(BATCH), len(data) + 16)
    assert dataset.gather_packed(BATCH, out, offsets, rows if with_rows else None)
    assert (fields.statuses, typed.statuses) == ([_native.OK], [])
    assert out[: len(data)].tobytes() == data and (out[len(data):] == 0xAB).all()
    assert offsets.tolist() == offsets_wanted
    assert rows.tolist() == (rows_wanted if with_rows else [7] * (len(BATCH) + 1))
    # The store's own checked method, into arrays made the same way: the same bytes everywhere.
    checked = loader_arrays(len(BATCH), len(data) + 16)
    assert dataset.store.gather_packed(BATCH, dataset.row_size, checked[0], checked[1],
                                       checked[2] if with_rows else None)
    assert len(fields.statuses) == 1  # the checked method never takes the short path
    for mine, theirs in zip((out, offsets, rows), checked):
        assert mine.tobytes() == theirs.tobytes()


def test_too_small_an_out_writes_only_offsets_and_rows(
    dataset: RaggedDataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    fields, typed = fields_and_typed(dataset, monkeypatch)
    data, offsets_wanted, rows_wanted = expected(BATCH)
    out, offsets, rows = loader_arrays(len(BATCH), len(data) - 1)
    assert not dataset.gather_packed(BATCH, out, offsets, rows)
    assert (fields.statuses, typed.statuses) == ([_native.SIZE_MISMATCH], [])
    assert (out == 0xAB).all()
    assert offsets.tolist() == offsets_wanted and rows.tolist() == rows_wanted
    # The loader's next call, with an out that big, copies.
    out = np.full(int(offsets[-1]), 0xAB, dtype=np.uint8)
    assert dataset.gather_packed(BATCH, out, offsets, rows)
    assert out.tobytes() == data and fields.statuses[-1] == _native.OK


def test_arrays_the_fields_way_refuses_take_the_older_route(
    dataset: RaggedDataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    fields, typed = fields_and_typed(dataset, monkeypatch)
    indices, count = SMALL, len(SMALL)
    data, offsets_wanted, rows_wanted = expected(indices)
    # out of another dtype: the data pointers' way copies the same bytes.
    out = np.full(len(data) // 4 + 4, -1, dtype=np.int32)
    _, offsets, rows = loader_arrays(count, 0)
    assert dataset.gather_packed(indices, out, offsets, rows)
    assert out.tobytes()[: len(data)] == data
    assert offsets.tolist() == offsets_wanted and rows.tolist() == rows_wanted
    assert (fields.statuses, typed.statuses) == ([_native.INVALID_ARGUMENT], [_native.OK])
    # A 2-D out of bytes too.
    out = np.full((2, len(data)), 0xAB, dtype=np.uint8)
    assert dataset.gather_packed(indices, out, offsets, None)
    assert out.tobytes()[: len(data)] == data
    # out of 1 byte: too small, said through the older route (the records are not all empty).
    assert len(data) > 1
    out, offsets, rows = loader_arrays(count, 1)
    assert not dataset.gather_packed(indices, out, offsets, rows)
    assert int(offsets[-1]) == len(data) and out.tolist() == [0xAB]
    assert fields.statuses[-1] == _native.INVALID_ARGUMENT
    assert typed.statuses[-1] == _native.SIZE_MISMATCH
    assert len(typed.statuses) == 3


def test_arrays_no_native_way_takes_get_the_checked_paths_errors(
    dataset: RaggedDataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    fields, typed = fields_and_typed(dataset, monkeypatch)
    indices = SMALL
    data = expected(indices)[0]
    # A strided out: refused by both native ways, then the checked method names it.
    wide, offsets, rows = loader_arrays(len(indices), 2 * len(data))
    with pytest.raises(ValueError, match="out must be a writable C-contiguous"):
        dataset.gather_packed(indices, wide[::2], offsets, rows)
    assert (wide == 0xAB).all() and (offsets == 7).all() and (rows == 7).all()
    # Read-only offsets: the same.
    out, offsets, rows = loader_arrays(len(indices), len(data))
    offsets.flags.writeable = False
    with pytest.raises(ValueError, match="offsets must be writable"):
        dataset.gather_packed(indices, out, offsets, rows)
    assert (out == 0xAB).all() and (offsets == 7).all() and (rows == 7).all()
    assert fields.statuses == [_native.INVALID_ARGUMENT] * 2 and typed.statuses == []
    # Read-only indices, which from_buffer refuses, are fine by their fields.
    frozen = indices.copy()
    frozen.flags.writeable = False
    offsets = np.zeros(len(indices) + 1, dtype=np.uint64)
    assert dataset.gather_packed(frozen, out, offsets, rows)
    assert out.tobytes() == data and fields.statuses[-1] == _native.OK


def test_a_loaders_steps_take_the_fields_way(
    dataset: RaggedDataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every packed step of a DataLoader calls lx_*_gather_packed_arrays, never the typed
    call, and every batch is the dataset's own records. Only the first step's buffer, empty
    (the step's call, then its retry's first attempt), is refused: the store's checked method
    then sizes the batch."""
    fields, typed = fields_and_typed(dataset, monkeypatch)
    steps = 12
    with DataLoader({"x": dataset}, batch_size=16, seed=5, prefetch=1, workers=1) as loader:
        for step in range(steps):
            batch = next(loader)
            indices = loader.indices(step)
            data, _, rows_wanted = expected(indices)
            assert batch["x"].tobytes() == data
            assert batch["x.cu_seqlens"].tolist() == rows_wanted
    assert typed.statuses == []
    assert fields.statuses[:2] == [_native.INVALID_ARGUMENT] * 2
    assert set(fields.statuses[2:]) <= {_native.OK, _native.SIZE_MISMATCH}
    assert fields.statuses.count(_native.OK) >= steps
