"""Tests for ragged streams in DataLoader and MixtureLoader (loaderx._loading.ragged_batch):
packed batches (values + cu_seqlens) and padded ones (Padding: values + mask), each compared
exactly with the dataset's own ds[indices] for the indices the loader says the step read."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from loaderx.dataloader import DataLoader, Padding
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.mixture import MixtureLoader

# The step maker and DataLoader are compiled with mypyc: the compiled run takes this module too.
pytestmark = pytest.mark.compiled

TOKENS = 160
LONGEST = 4096
BATCH = 16


def token_records(count: int, seed: int, longest: int = LONGEST) -> list[npt.NDArray[np.int32]]:
    """count token sequences of 1 to `longest` tokens (both ends included); record i starts
    with i so that a row says which record it came from."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, longest + 1, size=count)
    lengths[0], lengths[1] = 1, longest
    records = []
    for i, length in enumerate(lengths):
        record = rng.integers(0, 50_000, size=int(length), dtype=np.int32)
        record[0] = i
        records.append(record)
    return records


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RaggedDataset]:
    dataset = RaggedDataset(tmp_path_factory.mktemp("tokens") / "t", dtype=np.int32)
    dataset.append(token_records(TOKENS, seed=1))
    yield dataset
    dataset.close()


@pytest.fixture(scope="module")
def labels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DenseDataset]:
    dataset = DenseDataset(tmp_path_factory.mktemp("labels") / "l", dtype=np.int64, codec="raw")
    dataset.append(np.arange(TOKENS, dtype=np.int64) * 3)
    yield dataset
    dataset.close()


def check_packed(batch: dict[str, Any], name: str, dataset: RaggedDataset,
                 indices: npt.NDArray[np.int64]) -> None:
    values, cu = batch[name], batch[name + ".cu_seqlens"]
    expected = dataset[indices]
    assert cu.dtype == np.int32 and cu.shape == (len(indices) + 1,) and int(cu[0]) == 0
    assert values.dtype == dataset.dtype and values.flags.c_contiguous
    assert values.shape == (int(cu[-1]), *dataset.item_shape)
    for i, record in enumerate(expected):
        piece = values[cu[i] : cu[i + 1]]
        assert piece.shape == record.shape and piece.tobytes() == record.tobytes()


def check_padded(batch: dict[str, Any], name: str, dataset: RaggedDataset,
                 indices: npt.NDArray[np.int64], length: int, value: Any) -> None:
    out, mask = batch[name], batch[name + ".mask"]
    assert out.shape == (len(indices), length, *dataset.item_shape) and out.dtype == dataset.dtype
    assert mask.shape == (len(indices), length) and mask.dtype == np.bool_
    for i, record in enumerate(dataset[indices]):
        kept = min(len(record), length)
        assert mask[i].tolist() == [True] * kept + [False] * (length - kept)
        assert out[i, :kept].tobytes() == record[:kept].tobytes()
        assert (out[i, kept:] == value).all()


# --- packed -------------------------------------------------------------------------------


def test_packed_token_batches_are_the_datasets_records(tokens: RaggedDataset,
                                                       labels: DenseDataset) -> None:
    """Sequences of 1 to 4,096 tokens beside a dense stream: every batch is ds[indices] back to
    back with its cu_seqlens, the dense stream as before, keys in the streams' order."""
    seen = set()
    with DataLoader({"tokens": tokens, "label": labels}, batch_size=BATCH, seed=4) as loader:
        for step in range(3 * TOKENS // BATCH):
            batch = next(loader)
            indices = loader.indices(step)
            assert list(batch) == ["tokens", "tokens.cu_seqlens", "label"]
            check_packed(batch, "tokens", tokens, indices)
            assert batch["label"].tolist() == (indices * 3).tolist()
            seen.update(indices.tolist())
    assert {0, 1} <= seen  # the 1-token and the 4,096-token records were among them


def test_kept_batches_stay_intact(tokens: RaggedDataset) -> None:
    """By default a batch is the consumer's for good: later steps never write into it."""
    with DataLoader({"tokens": tokens}, batch_size=BATCH, seed=2, prefetch=1,
                    workers=1) as loader:
        kept = [next(loader) for _ in range(12)]
        for step, batch in enumerate(kept):
            check_packed(batch, "tokens", tokens, loader.indices(step))


def test_reuse_buffers_writes_later_steps_into_the_same_memory(tmp_path: Path) -> None:
    """With reuse_buffers=True (and batches of one size) a slot's buffer is written again."""
    dataset = RaggedDataset(tmp_path / "even", dtype=np.int16)
    dataset.append([np.full(7, i, dtype=np.int16) for i in range(64)])
    with dataset, DataLoader({"x": dataset}, batch_size=8, reuse_buffers=True, prefetch=1,
                             workers=1) as loader:
        first = next(loader)["x"]
        later = [next(loader) for _ in range(6)]
        assert any(np.shares_memory(first, batch["x"]) for batch in later)
        check_packed(later[-1], "x", dataset, loader.indices(6))


def test_two_dimensional_items(tmp_path: Path) -> None:
    """Records of shape (L, 2, 3): values is (total, 2, 3); record i is values[cu[i]:cu[i+1]]."""
    rng = np.random.default_rng(3)
    records = [rng.standard_normal((int(n), 2, 3)).astype(np.float32)
               for n in rng.integers(0, 40, size=90)]
    dataset = RaggedDataset(tmp_path / "grid", dtype=np.float32, item_shape=(2, 3))
    dataset.append(records)
    with dataset, DataLoader({"grid": dataset}, batch_size=10, seed=1) as loader:
        for step in range(20):
            batch = next(loader)
            assert batch["grid"].shape[1:] == (2, 3)
            check_packed(batch, "grid", dataset, loader.indices(step))


def test_empty_records_and_batches_with_no_rows(tmp_path: Path) -> None:
    """Empty records take no rows (cu_seqlens repeats); a batch of only empty records packs
    into (0, *item_shape) values and pads to length 0 without a Padding length."""
    mixed = RaggedDataset(tmp_path / "mixed", dtype=np.uint8)
    mixed.append([np.arange(i % 4, dtype=np.uint8) for i in range(40)])  # every 4th is empty
    empty = RaggedDataset(tmp_path / "empty", dtype=np.int64, item_shape=(2,))
    empty.append([np.empty((0, 2), dtype=np.int64)] * 40)
    with mixed, empty:
        with DataLoader({"m": mixed, "e": empty}, batch_size=8, seed=6) as loader:
            for step in range(10):
                batch = next(loader)
                check_packed(batch, "m", mixed, loader.indices(step))
                check_packed(batch, "e", empty, loader.indices(step))
                assert batch["e"].shape == (0, 2) and batch["e.cu_seqlens"].tolist() == [0] * 9
        with DataLoader({"e": empty}, batch_size=8, ragged=Padding(value=-1)) as loader:
            batch = next(loader)
            assert batch["e"].shape == (8, 0, 2) and batch["e.mask"].shape == (8, 0)


def test_transform_gets_the_packed_keys(tokens: RaggedDataset) -> None:
    def lengths(batch: dict[str, Any]) -> dict[str, Any]:
        return {"lengths": np.diff(batch["tokens.cu_seqlens"])}

    with DataLoader({"tokens": tokens}, batch_size=BATCH, transform=lengths, seed=8) as loader:
        for step in range(5):
            expected = [len(record) for record in tokens[loader.indices(step)]]
            assert next(loader)["lengths"].tolist() == expected


# --- padded -------------------------------------------------------------------------------


def test_pad_to_a_fixed_length(tokens: RaggedDataset) -> None:
    with DataLoader({"tokens": tokens}, batch_size=BATCH, seed=5,
                    ragged=Padding(LONGEST, value=-7)) as loader:
        for step in range(12):
            check_padded(next(loader), "tokens", tokens, loader.indices(step), LONGEST, -7)


def test_pad_to_the_smallest_bucket_that_holds_the_batch(tmp_path: Path) -> None:
    dataset = RaggedDataset(tmp_path / "short", dtype=np.int32)
    dataset.append(token_records(120, seed=9, longest=600))
    buckets = (64, 256, 512, 1024)
    heights = set()
    with dataset, DataLoader({"t": dataset}, batch_size=4, seed=3,
                             ragged={"t": Padding(buckets=buckets)}) as loader:
        for step in range(40):
            batch = next(loader)
            indices = loader.indices(step)
            longest = max(len(record) for record in dataset[indices])
            length = min(bucket for bucket in buckets if bucket >= longest)
            check_padded(batch, "t", dataset, indices, length, 0)
            heights.add(length)
    assert len(heights) >= 2  # the batches did land in different buckets


def test_pad_to_the_longest_record_of_each_batch(tokens: RaggedDataset) -> None:
    with DataLoader({"tokens": tokens}, batch_size=BATCH, ragged=Padding(value=3)) as loader:
        for step in range(8):
            indices = loader.indices(step)
            longest = max(len(record) for record in tokens[indices])
            check_padded(next(loader), "tokens", tokens, indices, longest, 3)


def test_a_record_longer_than_the_padding_is_refused_or_truncated(tokens: RaggedDataset) -> None:
    with DataLoader({"tokens": tokens}, batch_size=BATCH, ragged=Padding(100)) as loader:
        with pytest.raises(ValueError, match="truncate=True"):
            next(loader)
    with DataLoader({"tokens": tokens}, batch_size=BATCH, seed=1,
                    ragged=Padding(buckets=(50, 100), value=-1, truncate=True)) as loader:
        for step in range(6):
            check_padded(next(loader), "tokens", tokens, loader.indices(step), 100, -1)


def test_packed_and_padded_streams_side_by_side(tokens: RaggedDataset, tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    other = RaggedDataset(tmp_path / "o", dtype=np.float64, item_shape=(3,))
    other.append([rng.standard_normal((int(n), 3)) for n in rng.integers(1, 30, size=TOKENS)])
    layout = {"o": Padding(32, value=np.nan)}
    with other, DataLoader({"tokens": tokens, "o": other}, batch_size=8, seed=2,
                           ragged=layout) as loader:
        for step in range(10):
            batch = next(loader)
            assert list(batch) == ["tokens", "tokens.cu_seqlens", "o", "o.mask"]
            check_packed(batch, "tokens", tokens, loader.indices(step))
            out, mask = batch["o"], batch["o.mask"]
            for i, record in enumerate(other[loader.indices(step)]):
                assert out[i, : len(record)].tobytes() == record.tobytes()
                assert np.isnan(out[i, len(record) :]).all() and mask[i].sum() == len(record)


# --- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"length": 0}, ValueError, "at least 1"),
    ({"length": 2.5}, TypeError, "must be an int"),
    ({"buckets": (1024, 512)}, ValueError, "must increase"),
    ({"buckets": ()}, TypeError, "non-empty"),
    ({"length": 8, "buckets": (8,)}, ValueError, "not both"),
    ({"truncate": True}, ValueError, "needs a length"),
])
def test_padding_refuses_bad_arguments(kwargs: dict[str, Any], error: type[Exception],
                                       match: str) -> None:
    with pytest.raises(error, match=match):
        Padding(**kwargs)


def test_loader_refuses_bad_ragged_arguments(tokens: RaggedDataset,
                                             labels: DenseDataset) -> None:
    streams = {"tokens": tokens, "label": labels}
    with pytest.raises(ValueError, match="not a value of the records' dtype"):
        DataLoader(streams, ragged=Padding(8, value=1.5))
    with pytest.raises(ValueError, match="not a stream"):
        DataLoader(streams, ragged={"token": "packed"})
    with pytest.raises(ValueError, match="a dense stream"):
        DataLoader(streams, ragged={"label": Padding(8)})
    with pytest.raises(TypeError, match="'packed' or a loaderx.dataloader.Padding"):
        DataLoader(streams, ragged="padded")
    with pytest.raises(ValueError, match="is also a stream"):
        DataLoader({"tokens": tokens, "tokens.cu_seqlens": labels})
    with pytest.raises(ValueError, match="worker_type='thread'"):
        DataLoader(streams, worker_type="process")
    with pytest.raises(TypeError, match=r"use ragged=Padding\(length\)"):
        DataLoader(streams, pad_to=8)  # type: ignore[arg-type]


def test_sizing_and_gathering_into_a_buffer_refuse_bad_arguments(tokens: RaggedDataset) -> None:
    indices = np.array([0, 1], dtype=np.int64)
    offsets = np.full(3, 7, dtype=np.uint64)
    rows = np.full(3, -1, dtype=np.int32)
    with pytest.raises(ValueError, match="2 records need 3"):
        tokens.record_offsets(indices, offsets[:2], rows)
    with pytest.raises(ValueError, match="2 records need 3"):
        tokens.record_offsets(indices, offsets, rows[:2])
    with pytest.raises(TypeError, match="int32"):
        tokens.record_offsets(indices, offsets, rows.astype(np.int64))
    with pytest.raises(IndexError):
        tokens.record_offsets(np.array([0, TOKENS], dtype=np.int64), offsets, rows)
    assert offsets.tolist() == [7, 7, 7] and rows.tolist() == [-1, -1, -1]  # nothing written
    tokens.record_offsets(indices, offsets, rows)
    assert rows.tolist() == [0, 1, 1 + LONGEST] and offsets.tolist() == [0, 4, 4 + 4 * LONGEST]
    out = np.empty(int(offsets[-1]), dtype=np.uint8)
    with pytest.raises(ValueError, match="2 records need 3"):
        tokens.gather_ragged_into(indices, out, offsets[:2])
    with pytest.raises(ValueError, match="out holds"):
        tokens.gather_ragged_into(indices, out[:-1], offsets)
    with pytest.raises(TypeError, match="uint64"):
        tokens.gather_ragged_into(indices, out, offsets.astype(np.int64))
    with pytest.raises(IndexError):
        tokens.gather_ragged_into(np.array([0, TOKENS], dtype=np.int64), out, offsets)
    assert tokens.gather_ragged_into(indices, out, offsets)
    assert out.view(np.int32).tolist() == np.concatenate(tokens[indices]).tolist()
    empty = np.empty(0, dtype=np.int64)
    tokens.record_offsets(empty, offsets[:1], rows[:1])
    assert offsets[0] == 0 and rows[0] == 0


def test_a_packed_gather_into_too_small_a_buffer_says_what_it_needs(tokens: RaggedDataset) -> None:
    indices = np.array([1, 0, 1], dtype=np.int64)
    offsets = np.zeros(4, dtype=np.uint64)
    rows = np.zeros(4, dtype=np.int32)
    small = np.full(5, 7, dtype=np.uint8)
    assert not tokens.gather_packed(indices, small, offsets, rows)
    assert small.tolist() == [7] * 5 and int(offsets[-1]) == 4 * (2 * LONGEST + 1)
    big = np.empty(int(offsets[-1]) + 3, dtype=np.uint8)
    assert tokens.gather_packed(indices, big, offsets, rows)
    assert rows.tolist() == [0, LONGEST, LONGEST + 1, 2 * LONGEST + 1]
    assert big[: int(offsets[-1])].view(np.int32).tolist() == np.concatenate(tokens[indices]).tolist()
    read_only = np.frombuffer(bytes(16), dtype=np.int32)
    with pytest.raises(ValueError, match="rows must be writable"):
        tokens.gather_packed(indices, big, offsets, read_only)



def test_a_packed_gather_takes_any_array_the_checked_path_takes(
    tokens: RaggedDataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The packed call's short path (loaderx._native.calls.gather_packed) takes only the arrays a
    loader passes; non-native byte order, strided or read-only arrays (and read-only indices,
    without the arrays' fields: LOADERX_ARRAY_CALLS=0) go through the checked path, with the
    same records or the same clear errors."""
    from loaderx._native.calls import ARRAY_CALLS
    from loaderx._store.ragged_into import check_packed as original

    checked: list[int] = []

    def counting(*args: Any) -> int:
        checked.append(1)
        return original(*args)

    monkeypatch.setattr("loaderx._store.shared_calls.check_packed", counting)
    wanted = np.concatenate(tokens[np.array([2, 0, 2, 1], dtype=np.int64)]).tobytes()
    cases: list[Any] = [
        np.array([2, 0, 2, 1], dtype=np.int64),                         # the short path
        np.frombuffer(np.array([2, 0, 2, 1], dtype=np.int64).tobytes(), dtype=np.int64),
        np.array([2, 0, 2, 1], dtype=">i8"),                            # equal, not identical
    ]
    for indices in cases:
        offsets = np.zeros(5, dtype=np.uint64)
        rows = np.zeros(5, dtype=np.int32)
        out = np.full(len(wanted) + 8, 0xAB, dtype=np.uint8)
        if indices.dtype.byteorder == ">":
            with pytest.raises(TypeError, match="int64"):
                tokens.gather_packed(indices, out, offsets, rows)
            assert (out == 0xAB).all()
            continue
        assert tokens.gather_packed(indices, out, offsets, rows)
        assert out[: int(offsets[-1])].tobytes() == wanted
        assert (out[int(offsets[-1]):] == 0xAB).all()
        assert rows.tolist() == (offsets // 4).astype(np.int32).tolist()
    # The big-endian indices, and the read-only ones where only from_buffer passes arrays.
    assert len(checked) == (1 if ARRAY_CALLS else 2)
    indices = np.array([2, 0, 2, 1], dtype=np.int64)
    out = np.zeros(len(wanted), dtype=np.uint8)
    with pytest.raises(ValueError, match="offsets must be a one-dimensional C-contiguous"):
        tokens.gather_packed(indices, out, np.zeros(10, dtype=np.uint64)[::2], None)
    with pytest.raises(ValueError, match="offsets has 4 entries"):
        tokens.gather_packed(indices, out, np.zeros(4, dtype=np.uint64), None)
    with pytest.raises(ValueError, match="out must be a writable"):
        tokens.gather_packed(indices, np.frombuffer(bytes(len(wanted)), dtype=np.uint8),
                             np.zeros(5, dtype=np.uint64), None)
    with pytest.raises(ValueError, match="out must be a writable"):
        tokens.gather_packed(indices, np.zeros(2 * len(wanted), dtype=np.uint8)[::2],
                             np.zeros(5, dtype=np.uint64), None)
    with pytest.raises(IndexError):
        tokens.gather_packed(np.array([0, TOKENS], dtype=np.int64), out,
                             np.zeros(3, dtype=np.uint64), None)

# --- resume, shards, sharded datasets, mixtures --------------------------------------------


def test_resume_from_a_state_dict_gives_the_same_batches(tokens: RaggedDataset) -> None:
    with DataLoader({"tokens": tokens}, batch_size=BATCH, seed=11) as loader:
        for _ in range(5):
            next(loader)
        state = loader.state_dict()
        expected = [next(loader) for _ in range(6)]
    with DataLoader({"tokens": tokens}, batch_size=BATCH, seed=0) as resumed:
        next(resumed)
        resumed.load_state_dict(state)
        for batch in expected:
            again = next(resumed)
            assert again["tokens"].tobytes() == batch["tokens"].tobytes()
            assert again["tokens.cu_seqlens"].tolist() == batch["tokens.cu_seqlens"].tolist()


def test_shards_read_their_own_part_of_each_global_batch(tokens: RaggedDataset) -> None:
    loaders = [DataLoader({"tokens": tokens}, batch_size=8, seed=3, shard=(i, 2),
                          ragged=Padding(LONGEST)) for i in range(2)]
    try:
        for step in range(6):
            parts = [loader.indices(step) for loader in loaders]
            assert not set(parts[0].tolist()) & set(parts[1].tolist())
            for loader, indices in zip(loaders, parts):
                check_padded(next(loader), "tokens", tokens, indices, LONGEST, 0)
    finally:
        for loader in loaders:
            loader.close()


def test_a_sharded_ragged_dataset(tmp_path: Path) -> None:
    dataset = RaggedDataset(tmp_path / "sharded", dtype=np.int32, shard_records=37)
    dataset.append(token_records(150, seed=12, longest=300))
    assert dataset.sharded
    with dataset, DataLoader({"t": dataset}, batch_size=BATCH, seed=2) as loader:
        for step in range(30):
            check_packed(next(loader), "t", dataset, loader.indices(step))


def test_mixture_of_ragged_sources(tmp_path: Path) -> None:
    """Rows of a mixture batch come grouped by source; a ragged stream packs them across
    sources (one gather per source), exactly as each source's ds[indices]."""
    sources = []
    for s, count in enumerate((90, 40)):
        ragged = RaggedDataset(tmp_path / f"t{s}", dtype=np.int32)
        ragged.append(token_records(count, seed=20 + s, longest=500))
        ids = DenseDataset(tmp_path / f"id{s}", dtype=np.int64, codec="raw")
        ids.append(s * 1000 + np.arange(count, dtype=np.int64))
        sources.append({"tokens": ragged, "id": ids})
    try:
        for layout in (None, Padding(512, value=-1)):
            with MixtureLoader(sources, [0.6, 0.4], batch_size=12, seed=5,
                               source_key="source", ragged=layout) as loader:
                for step in range(15):
                    batch = next(loader)
                    chosen, indices = loader.sampler.batch(step)
                    expected = [sources[c]["tokens"][int(i)] for c, i in zip(chosen, indices)]
                    assert batch["id"].tolist() == (chosen * 1000 + indices).tolist()
                    assert batch["source"].tolist() == chosen.tolist()
                    if layout is None:
                        cu = batch["tokens.cu_seqlens"]
                        assert cu.dtype == np.int32 and len(cu) == 13
                        got = [batch["tokens"][cu[i] : cu[i + 1]] for i in range(12)]
                        assert [g.tolist() for g in got] == [e.tolist() for e in expected]
                    else:
                        for i, record in enumerate(expected):
                            row = batch["tokens"][i]
                            assert row[: len(record)].tolist() == record.tolist()
                            assert (row[len(record) :] == -1).all()
                            assert batch["tokens.mask"][i].sum() == len(record)
                state = loader.state_dict()
                after = next(loader)
            with MixtureLoader(sources, [0.6, 0.4], batch_size=12, seed=0, ragged=layout,
                               source_key="source") as resumed:
                resumed.load_state_dict(state)
                again = next(resumed)
                assert again.keys() == after.keys()
                for key in after:
                    assert again[key].tobytes() == after[key].tobytes()
        with pytest.raises(TypeError, match="source 1 stream 'tokens' is a DenseDataset"):
            MixtureLoader([sources[0], {"tokens": sources[1]["id"], "id": sources[1]["id"]}],
                          [0.5, 0.5])
    finally:
        for source in sources:
            for dataset in source.values():
                dataset.close()


def test_a_mixture_refuses_a_source_key_that_is_a_ragged_streams_key(tokens: RaggedDataset) -> None:
    """source_key names the batch key of each row's source: one equal to a ragged stream's
    cu_seqlens or mask key would have replaced those offsets or that mask with source numbers
    (the sources are written last), so it is refused as a stream name is."""
    for layout, key in ((None, "tokens.cu_seqlens"), (Padding(LONGEST), "tokens.mask")):
        with pytest.raises(ValueError, match=f"source_key '{key}' is also a key of the batch"):
            MixtureLoader([{"tokens": tokens}], [1.0], batch_size=4, source_key=key,
                          ragged=layout)
    # The other ragged key is free: a padded batch holds no cu_seqlens, a packed one no mask.
    with MixtureLoader([{"tokens": tokens}], [1.0], batch_size=4, source_key="tokens.mask",
                       seed=2) as loader:
        batch = next(loader)
        assert batch["tokens.mask"].tolist() == [0, 0, 0, 0]
        check_packed(batch, "tokens", tokens, loader.sampler.batch(0)[1])



def test_a_padding_with_no_ragged_stream_is_refused(labels: DenseDataset) -> None:
    """A Padding pads the ragged streams; with none among the streams it would do nothing,
    and the batch would lack the padded arrays and masks asked for, so it is refused as a
    dict naming a dense stream is."""
    with pytest.raises(ValueError, match="no stream is ragged"):
        DataLoader({"label": labels}, batch_size=4, ragged=Padding(8))
    with pytest.raises(ValueError, match="no stream is ragged"):
        MixtureLoader([{"label": labels}], [1.0], batch_size=4, ragged=Padding())
    for packed in (None, "packed"):  # packed is every ragged stream's default: nothing to refuse
        with DataLoader({"label": labels}, batch_size=4, ragged=packed, mode="sequential") as loader:
            assert next(loader)["label"].tolist() == [0, 3, 6, 9]


def test_a_layout_is_compared_as_a_string_only(tokens: RaggedDataset) -> None:
    """ragged= takes "packed" or a Padding: an array of strings is refused by type, not taken
    for "packed" when it holds one (NumPy's == gives an array, true when its one element is)
    or refused by NumPy's ambiguous truth value when it holds two."""
    for layout in (np.array(["packed"]), np.array(["packed", "packed"])):
        with pytest.raises(TypeError, match="'packed' or a loaderx.dataloader.Padding"):
            DataLoader({"tokens": tokens}, batch_size=4, ragged=layout)
        with pytest.raises(TypeError, match=r"ragged\['tokens'\] must be 'packed'"):
            DataLoader({"tokens": tokens}, batch_size=4, ragged={"tokens": layout})
    with DataLoader({"tokens": tokens}, batch_size=2, ragged=np.str_("packed"), seed=1) as loader:
        check_packed(next(loader), "tokens", tokens, loader.indices(0))


@pytest.mark.parametrize("kwargs", [{"length": 2**63}, {"buckets": (8, 2**70)}])
def test_padding_refuses_a_length_no_array_dimension_can_have(kwargs: dict[str, Any]) -> None:
    """A padded array's length is a NumPy dimension (at most 2**63 - 1): a longer one is refused
    by Padding itself, not later by an OverflowError about a C long from the loader."""
    with pytest.raises(ValueError, match=r"at most 2\*\*63 - 1"):
        Padding(**kwargs)
    assert Padding(2**63 - 1).length == 2**63 - 1


@pytest.mark.parametrize("padding", [Padding(value=-1), Padding(buckets=(1024, 2048, 3072, 4096))],
                         ids=["longest", "buckets"])
def test_hosts_pad_to_the_length_of_the_global_batch(tokens: RaggedDataset,
                                                     padding: Padding) -> None:
    """With shard=, a length picked per batch (the longest record, or the bucket holding it) is
    picked from the whole global batch, so every host pads a step to the same length and the
    hosts' batches put together are the global batch, as dense streams are: hosts of a
    data-parallel step must hand the model arrays of one shape (a global jax.Array, or one
    compiled shape per bucket on every host)."""
    hosts = [DataLoader({"tokens": tokens}, batch_size=4, seed=3, shard=(i, 3), ragged=padding)
             for i in range(3)]
    single = DataLoader({"tokens": tokens}, batch_size=12, seed=3, ragged=padding)
    try:
        for step in range(3 * TOKENS // 12):
            whole = next(single)
            parts = [next(host) for host in hosts]
            for key in ("tokens", "tokens.mask"):
                joined = np.concatenate([part[key] for part in parts])
                assert joined.shape == whole[key].shape
                assert joined.tobytes() == whole[key].tobytes()
            length = whole["tokens"].shape[1]
            for host, part in zip(hosts, parts):
                check_padded(part, "tokens", tokens, host.indices(step), length, padding.value)
    finally:
        for loader in (*hosts, single):
            loader.close()


def test_mixture_hosts_pad_to_the_length_of_the_global_batch(tmp_path: Path) -> None:
    """A mixture's hosts pad each step to the length its whole global batch needs (their rows
    come in another order than a single host's, so the shapes and records are compared)."""
    sources = []
    for s, count in enumerate((70, 50)):
        ragged = RaggedDataset(tmp_path / f"t{s}", dtype=np.int32)
        ragged.append(token_records(count, seed=30 + s, longest=700))
        sources.append({"tokens": ragged})
    try:
        for padding in (Padding(value=-1), Padding(buckets=(16, 128, 1024), value=-1)):
            hosts = [MixtureLoader(sources, [0.5, 0.5], batch_size=3, seed=4, shard=(i, 2),
                                   source_key="source", ragged=padding) for i in range(2)]
            single = MixtureLoader(sources, [0.5, 0.5], batch_size=6, seed=4, ragged=padding)
            try:
                for step in range(20):
                    length = next(single)["tokens"].shape[1]
                    for host in hosts:
                        batch = next(host)
                        assert batch["tokens"].shape == (3, length)
                        chosen, indices = host.sampler.batch(step)
                        for i, (c, index) in enumerate(zip(chosen, indices)):
                            record = sources[c]["tokens"][int(index)]
                            assert batch["tokens"][i, : len(record)].tolist() == record.tolist()
                            assert (batch["tokens"][i, len(record) :] == -1).all()
                            assert batch["tokens.mask"][i].sum() == len(record)
            finally:
                for loader in (*hosts, single):
                    loader.close()
    finally:
        for source in sources:
            source["tokens"].close()
