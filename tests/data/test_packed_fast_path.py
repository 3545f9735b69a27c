"""RaggedDataset.gather_packed's compiled short path (loaderx._native.calls.gather_packed): the
arrays a loader passes go straight to the native call, on one store and through a sharded
dataset's view; everything else, and every native refusal, goes to the store's own checked
method, with the same records or the same clear errors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from loaderx._native.calls import ARRAY_CALLS
from loaderx.dataset import RaggedDataset

# ragged.py and calls.py are compiled with mypyc: the compiled run takes this module too.
pytestmark = pytest.mark.compiled

COUNT = 90


class Subclass(np.ndarray):
    """An ndarray subclass, which the short path leaves to the checked one."""


def records() -> list[npt.NDArray[np.int32]]:
    """Token sequences of 0 to 70 tokens; record i starts with i (when it has a token)."""
    rng = np.random.default_rng(3)
    made = []
    for i, length in enumerate(rng.integers(0, 71, size=COUNT)):
        record = rng.integers(0, 50_000, size=int(length), dtype=np.int32)
        if length:
            record[0] = i
        made.append(record)
    return made


@pytest.fixture(scope="module", params=["one store", "shards"])
def tokens(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[RaggedDataset]:
    shards: dict[str, Any] = {"shard_records": 17} if request.param == "shards" else {}
    dataset = RaggedDataset(tmp_path_factory.mktemp("packed") / "t", dtype=np.int32, **shards)
    dataset.append(records())
    yield dataset
    dataset.close()


def count_checked_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that grows by one at every call of the store's own (checked) packed gather."""
    from loaderx._store import shared_calls

    original = shared_calls.gather_packed
    calls: list[int] = []

    def counting(*args: Any) -> bool:
        calls.append(1)
        return original(*args)

    monkeypatch.setattr(shared_calls, "gather_packed", counting)
    return calls


def loader_arrays(count: int, size: int) -> tuple[Any, Any, Any]:
    """out (filled with 0xAB), offsets and rows as a loader's step makes them."""
    return (np.full(size, 0xAB, dtype=np.uint8), np.zeros(count + 1, dtype=np.uint64),
            np.zeros(count + 1, dtype=np.int32))


def test_a_loaders_arrays_take_the_short_path_with_exact_records(
    tokens: RaggedDataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked = count_checked_calls(monkeypatch)
    indices = np.array([5, 0, 89, 5, 40, 17, 16], dtype=np.int64)
    wanted = [tokens[int(i)] for i in indices]
    size = sum(r.nbytes for r in wanted)
    out, offsets, rows = loader_arrays(len(indices), size + 8)
    assert tokens.gather_packed(indices, out, offsets, rows)
    assert offsets.tolist() == np.cumsum([0] + [r.nbytes for r in wanted]).tolist()
    assert rows.tolist() == np.cumsum([0] + [len(r) for r in wanted]).tolist()
    assert out[:size].tobytes() == b"".join(r.tobytes() for r in wanted)
    assert (out[size:] == 0xAB).all()
    # Without rows, and into an out too small: False with nothing copied, offsets say the size.
    small = np.full(size - 1, 0xCD, dtype=np.uint8)
    assert not tokens.gather_packed(indices, small, offsets)
    assert int(offsets[-1]) == size and (small == 0xCD).all()
    assert checked == []


def test_other_arrays_and_refusals_take_the_checked_path(
    tokens: RaggedDataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked = count_checked_calls(monkeypatch)
    indices = np.array([3, 1, 2], dtype=np.int64)
    wanted = b"".join(tokens[int(i)].tobytes() for i in indices)
    out, offsets, rows = loader_arrays(3, len(wanted))
    # Read-only indices go by their fields (tests/native/test_packed_fields.py), which from_buffer
    # refuses: without the fields way (LOADERX_ARRAY_CALLS=0) they take the checked path.
    read_only = np.frombuffer(indices.tobytes(), dtype=np.int64)
    assert tokens.gather_packed(read_only, out, offsets, rows)
    assert out.tobytes() == wanted
    assert len(checked) == (0 if ARRAY_CALLS else 1)
    # An ndarray subclass is not the exact type a loader passes: the checked path reads it.
    out, offsets, rows = loader_arrays(3, len(wanted))
    assert tokens.gather_packed(indices.view(Subclass), out, offsets, rows)
    assert out.tobytes() == wanted
    assert len(checked) == (1 if ARRAY_CALLS else 2)
    # An index out of range: the native call refuses, the checked path names the index.
    with pytest.raises(IndexError, match="90"):
        tokens.gather_packed(np.array([1, 90], dtype=np.int64), *loader_arrays(2, 1024))
    assert len(checked) == (2 if ARRAY_CALLS else 3)
    # rows of the wrong type: declined before any byte moves, then a clear error.
    out, offsets, _ = loader_arrays(3, len(wanted))
    with pytest.raises(TypeError, match="int32"):
        tokens.gather_packed(indices, out, offsets, np.zeros(4, dtype=np.int64))
    assert (out == 0xAB).all()


def test_a_closed_dataset_raises_on_the_short_path(tmp_path: Path) -> None:
    dataset = RaggedDataset(tmp_path / "closed", dtype=np.int32)
    dataset.append(records()[:5])
    out, offsets, rows = loader_arrays(2, 4096)
    dataset.close()
    with pytest.raises(ValueError, match="closed"):
        dataset.gather_packed(np.array([0, 1], dtype=np.int64), out, offsets, rows)
    assert (out == 0xAB).all()


def test_a_sharded_dataset_reads_new_shards_after_the_view_is_replaced(tmp_path: Path) -> None:
    """An append that opens a shard replaces the view the short path read through: the next
    gather reads through the new one, records of the new shard included."""
    dataset = RaggedDataset(tmp_path / "grow", dtype=np.int32, shard_records=10)
    made = records()
    dataset.append(made[:15])
    indices = np.array([14, 0, 9], dtype=np.int64)
    out, offsets, rows = loader_arrays(3, 4096)
    assert dataset.gather_packed(indices, out, offsets, rows)
    dataset.append(made[15:40])
    indices = np.array([39, 14, 25, 0], dtype=np.int64)
    out, offsets, rows = loader_arrays(4, 4096)
    assert dataset.gather_packed(indices, out, offsets, rows)
    wanted = b"".join(made[int(i)].tobytes() for i in indices)
    assert out[: len(wanted)].tobytes() == wanted
    dataset.close()
