"""Tests for loaderx.torch: the map-style adapter under torch's DataLoader (spawn and forkserver
workers included) and the tensor view of a loaderx DataLoader."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import torch
import torch.utils.data

from loaderx.converter import from_numpy
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset
from loaderx.torch import (
    BatchIndices,
    CollatedBatch,
    SampleIndex,
    TensorBatch,
    TorchDataset,
    TorchLoader,
    _PinnedRing,  # private: the pinned ring's reuse rules, which no public call exposes alone
    collate,
)

RECORDS = 300


def images_of(indices: npt.NDArray[np.int64]) -> npt.NDArray[np.uint8]:
    """Record i of the image stream: a 4x5 block whose values are derived from i."""
    return ((indices[:, None] * 7 + np.arange(20)[None, :]) % 251).astype(np.uint8).reshape(-1, 4, 5)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("torch")
    every = np.arange(RECORDS, dtype=np.int64)
    from_numpy(base / "image", images_of(every))
    from_numpy(base / "label", every, codec="raw")
    return base


@pytest.fixture
def adapter(folder: Path) -> TorchDataset[TensorBatch]:
    """The zero-copy path: __getitems__ returns the batch itself (collate_fn=collate)."""
    return TorchDataset({"image": DenseDataset(folder / "image"),
                         "label": DenseDataset(folder / "label")}, collated=True)


@pytest.fixture
def samples_adapter(folder: Path) -> TorchDataset[TensorBatch]:
    """torch's convention: __getitems__ returns a list of samples for the default collate."""
    return TorchDataset({"image": DenseDataset(folder / "image"),
                         "label": DenseDataset(folder / "label")})


def check(batch: object, indices: npt.NDArray[np.int64] | None = None) -> None:
    """batch is a dict of the image and label tensors of these records (whichever they are
    when indices is None)."""
    assert isinstance(batch, dict), type(batch)
    labels = batch["label"].numpy()
    assert batch["label"].dtype == torch.int64 and batch["image"].dtype == torch.uint8
    assert np.array_equal(batch["image"].numpy(), images_of(labels))
    if indices is not None:
        assert np.array_equal(labels, indices)


class CountingDataset(TorchDataset[TensorBatch]):
    """Counts how torch's DataLoader asks for data: batches (__getitems__) or samples."""

    batches = 0
    samples = 0

    def __getitems__(self, indices: BatchIndices) -> list[TensorBatch] | TensorBatch:
        self.batches += 1
        return super().__getitems__(indices)

    def __getitem__(self, index: SampleIndex) -> TensorBatch:
        self.samples += 1
        return super().__getitem__(index)


@pytest.mark.parametrize("collated", [False, True])
def test_torch_dataloader_asks_for_whole_batches(folder: Path, collated: bool) -> None:
    ds = CountingDataset({"image": DenseDataset(folder / "image"),
                          "label": DenseDataset(folder / "label")}, collated=collated)
    order = torch.Generator().manual_seed(3)
    loader = ds.loader(batch_size=32, shuffle=True, generator=order)
    seen = []
    for batch in loader:
        check(batch)
        seen.append(batch["label"].numpy())
    assert ds.batches == len(loader) == 10 and ds.samples == 0
    # One epoch of shuffle=True visits every record exactly once.
    assert np.array_equal(np.sort(np.concatenate(seen)), np.arange(RECORDS))


def test_single_samples_and_errors(adapter: TorchDataset[TensorBatch]) -> None:
    sample = adapter[17]
    assert sample["label"].item() == 17
    assert np.array_equal(sample["image"].numpy(), images_of(np.array([17]))[0])
    assert adapter[-1]["label"].item() == RECORDS - 1
    assert len(adapter) == RECORDS
    with pytest.raises(IndexError):
        adapter[RECORDS]
    with pytest.raises(TypeError, match="one int index"):
        adapter[[1, 2]]  # type: ignore[index]
    with pytest.raises(TypeError, match="sets collate_fn itself when collated=True"):
        adapter.loader(4, collate_fn=collate)
    with pytest.raises(TypeError, match="must be a DenseDataset"):
        TorchDataset({"x": np.zeros(3)})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match=r"^collated must be True or False, got 1$"):
        TorchDataset(adapter.streams, collated=1)  # type: ignore[call-overload]
    batch = adapter.__getitems__([5, 3, 5])
    assert isinstance(batch, dict)
    check(batch, np.array([5, 3, 5]))


def test_a_single_dataset_and_a_transform(folder: Path) -> None:
    """A single DenseDataset gives bare tensors, and its transform takes and returns an array."""
    def scale(batch: npt.NDArray[np.uint8]) -> npt.NDArray[np.float32]:
        return batch.astype(np.float32) / np.float32(255.0)

    expected = torch.from_numpy(images_of(np.array([0, 9])).astype(np.float32) / np.float32(255.0))
    ds = TorchDataset(DenseDataset(folder / "image"), transform=scale, collated=True)
    batch = ds.__getitems__([0, 9])
    assert isinstance(batch, torch.Tensor) and batch.dtype == torch.float32
    assert torch.equal(batch, expected)
    samples = TorchDataset(DenseDataset(folder / "image"), transform=scale).__getitems__([0, 9])
    assert isinstance(samples, list) and len(samples) == 2
    assert torch.equal(torch.stack(samples), expected)
    sample = ds[9]
    assert isinstance(sample, torch.Tensor) and torch.equal(sample, expected[1])


def test_the_adapter_pickles_by_path(adapter: TorchDataset[TensorBatch]) -> None:
    copy = pickle.loads(pickle.dumps(adapter))
    assert copy.collated
    batch = copy.__getitems__([1, 2, 3])
    assert isinstance(batch, dict)
    check(batch, np.array([1, 2, 3]))


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_worker_processes_started_without_fork(adapter: TorchDataset[TensorBatch], context: str) -> None:
    sampler = torch.utils.data.BatchSampler(
        torch.utils.data.SequentialSampler(adapter), batch_size=50, drop_last=False
    )
    loader = torch.utils.data.DataLoader(
        adapter, batch_sampler=sampler, collate_fn=collate, num_workers=2,
        multiprocessing_context=context,
    )
    batches = list(loader)
    assert len(batches) == 6
    for k, batch in enumerate(batches):
        check(batch, np.arange(50 * k, 50 * (k + 1)))


def recording(seen: list[dict[str, Any]]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A DataLoader transform that keeps every batch it passes on (run it with workers=1, so
    that the batches come in step order)."""

    def transform(batch: dict[str, Any]) -> dict[str, Any]:
        seen.append(batch)
        return batch

    return transform


def test_torch_loader_shares_the_loaders_arrays(folder: Path) -> None:
    streams = {"image": DenseDataset(folder / "image"), "label": DenseDataset(folder / "label")}
    # Each tensor at the address of the array the loader handed out: no copy was made.
    made: list[dict[str, Any]] = []
    loader = DataLoader(streams, batch_size=16, seed=4, prefetch=1, workers=1,
                        transform=recording(made))
    with TorchLoader(loader) as tensors:
        assert not tensors.copy
        kept = [next(tensors) for _ in range(3)]
        for step, batch in enumerate(kept):
            check(batch, loader.indices(step))
            for name in streams:
                assert batch[name].data_ptr() == made[step][name].ctypes.data
        assert tensors.step == 3 and tensors.steps_per_epoch == RECORDS // 16
        state = tensors.state_dict()
    assert loader.closed
    with TorchLoader(DataLoader(streams, batch_size=16)) as resumed:
        resumed.load_state_dict(state)
        check(next(resumed), loader.indices(3))


def test_torch_loader_len_points_to_steps_per_epoch(folder: Path) -> None:
    """len() of the endless TorchLoader is refused as the wrapped loader refuses it, naming
    steps_per_epoch (what a torch user wants for a scheduler's total steps), and `if loader:`
    stays true rather than meet that refusal."""
    loader = DataLoader({"label": DenseDataset(folder / "label")}, batch_size=16)
    with TorchLoader(loader) as tensors:
        with pytest.raises(TypeError, match=rf"endless.*steps_per_epoch \({RECORDS // 16} steps"):
            len(tensors)
        assert bool(tensors)


def test_torch_loader_copies_batches_of_reused_buffers(folder: Path) -> None:
    """A loader made with reuse_buffers=True writes step k + 2 into step k's arrays (prefetch=1:
    a ring of two); tensors already yielded must keep their values, byte for byte."""
    streams = {"image": DenseDataset(folder / "image"), "label": DenseDataset(folder / "label")}
    loader = DataLoader(streams, batch_size=16, seed=9, prefetch=1, workers=1, reuse_buffers=True)
    with TorchLoader(loader) as tensors:
        assert tensors.copy
        kept = [next(tensors) for _ in range(8)]
        for _ in range(4):  # the loader keeps writing into its two arrays per stream
            next(tensors)
    for step, batch in enumerate(kept):
        labels = loader.indices(step)
        assert batch["label"].numpy().tobytes() == labels.tobytes()
        assert batch["image"].numpy().tobytes() == images_of(labels).tobytes()
    assert len({batch["image"].data_ptr() for batch in kept}) == len(kept)


def test_pinned_memory_without_an_accelerator_is_a_clear_error(folder: Path) -> None:
    with DataLoader({"label": DenseDataset(folder / "label")}, batch_size=4) as loader:
        if torch.cuda.is_available():
            TorchLoader(loader, pin_memory=True).close()
        else:
            with pytest.raises(RuntimeError, match="pin_memory=True needs an accelerator"):
                TorchLoader(loader, pin_memory=True)
        with pytest.raises(TypeError, match="loaderx DataLoader"):
            TorchLoader(iter([]))  # type: ignore[arg-type]


NOT_FLAGS = [1, 0, "no", "", None, [True], np.int64(1)]


@pytest.mark.parametrize("value", NOT_FLAGS)
def test_flags_refuse_what_is_no_bool(folder: Path, value: Any) -> None:
    """collated= and pin_memory= refuse as the loader's own flags do (loaderx._store.flags):
    pin_memory="no" was taken for True and tried to pin, pin_memory=0 for False."""
    streams = {"label": DenseDataset(folder / "label")}
    with pytest.raises(TypeError) as refused:
        TorchDataset(streams, collated=value)
    assert str(refused.value) == f"collated must be True or False, got {value!r}"
    with DataLoader(streams, batch_size=4) as loader:
        with pytest.raises(TypeError) as refused:
            TorchLoader(loader, pin_memory=value)
        assert str(refused.value) == f"pin_memory must be True or False, got {value!r}"


def test_flags_take_numpy_bools(folder: Path) -> None:
    streams = {"label": DenseDataset(folder / "label")}
    assert TorchDataset(streams, collated=np.True_).collated is True
    assert TorchDataset(streams, collated=np.False_).collated is False
    with DataLoader(streams, batch_size=4) as loader:
        tensors = TorchLoader(loader, pin_memory=np.False_)
        assert tensors.pin_memory is False
        assert next(tensors)["label"].shape == (4,)
        tensors.close()


def test_the_staging_ring_reuses_its_buffers() -> None:
    # The ring's rotation, run with ordinary memory (pinning itself needs an accelerator).
    ring = _PinnedRing(2, pin=False)
    batches = [{"x": np.full((3, 2), k, dtype=np.int16)} for k in range(5)]
    staged = [ring.stage(b) for b in batches]
    assert staged[0]["x"].data_ptr() == staged[2]["x"].data_ptr() == staged[4]["x"].data_ptr()
    assert staged[1]["x"].data_ptr() == staged[3]["x"].data_ptr() != staged[0]["x"].data_ptr()
    assert (staged[4]["x"] == 4).all() and (staged[3]["x"] == 3).all()
    bigger = ring.stage({"x": np.ones((4, 2), dtype=np.int16)})  # a new shape gets a new buffer
    assert bigger["x"].shape == (4, 2)


SWAPPED_F4 = np.dtype(np.float32).newbyteorder()  # '>f4' on a little-endian host
SWAPPED_I8 = np.dtype(np.int64).newbyteorder()


def values_of(indices: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
    """Record i of the swapped float stream: three floats whose bytes are all distinct from
    their swapped reading (so a missing or doubled byte swap cannot go unnoticed)."""
    return (indices[:, None] * np.float32(1.1) + np.array([-3.75, 0.1, 1e30], np.float32)
            ).astype(np.float32)


@pytest.fixture(scope="module")
def swapped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, DenseDataset]:
    """Streams stored in the byte order opposite to this machine's, next to a native one."""
    base = tmp_path_factory.mktemp("torch_swapped")
    every = np.arange(RECORDS, dtype=np.int64)
    made = {"value": DenseDataset(base / "value", dtype=SWAPPED_F4, item_shape=(3,)),
            "label": DenseDataset(base / "label", dtype=SWAPPED_I8, item_shape=())}
    made["value"].append(values_of(every).astype(SWAPPED_F4))
    made["label"].append((every * 10**12).astype(SWAPPED_I8))
    from_numpy(base / "image", images_of(every))
    made["image"] = DenseDataset(base / "image")
    assert not made["value"].dtype.isnative and not made["label"].dtype.isnative
    return made


def check_swapped(batch: object, indices: npt.NDArray[np.int64]) -> None:
    """Native tensors holding exactly the stored values."""
    assert isinstance(batch, dict), type(batch)
    assert batch["value"].dtype == torch.float32 and batch["label"].dtype == torch.int64
    assert torch.equal(batch["value"], torch.from_numpy(values_of(indices)))
    assert torch.equal(batch["label"], torch.from_numpy(indices * 10**12))
    assert torch.equal(batch["image"], torch.from_numpy(images_of(indices)))


def test_non_native_byte_order_becomes_native_tensors(swapped: dict[str, DenseDataset]) -> None:
    ds = TorchDataset(swapped, collated=True)
    check_swapped(ds.__getitems__([4, 0, RECORDS - 1]), np.array([4, 0, RECORDS - 1]))
    sample = ds[7]
    assert sample["value"].shape == (3,) and sample["label"].shape == ()
    assert torch.equal(sample["value"], torch.from_numpy(values_of(np.array([7]))[0]))
    assert sample["label"].item() == 7 * 10**12
    batches = list(ds.loader(batch_size=64, drop_last=True))
    assert len(batches) == RECORDS // 64
    for k, batch in enumerate(batches):
        check_swapped(batch, np.arange(64 * k, 64 * (k + 1)))
    # torch's default collate over the samples gives the same batches.
    for k, batch in enumerate(TorchDataset(swapped).loader(batch_size=64, drop_last=True)):
        check_swapped(batch, np.arange(64 * k, 64 * (k + 1)))
    # A transform sees the stored dtype (as DataLoader's does); what it returns is converted too.
    passed = TorchDataset(swapped, transform=lambda b: {"seen": b["value"]}, collated=True)
    batch = passed.__getitems__([2])
    assert isinstance(batch, dict)
    seen = batch["seen"]
    assert seen.dtype == torch.float32 and torch.equal(seen, torch.from_numpy(values_of(np.array([2]))))


def test_torch_loader_converts_only_non_native_streams(swapped: dict[str, DenseDataset]) -> None:
    made: list[dict[str, Any]] = []
    loader = DataLoader(swapped, batch_size=16, seed=5, prefetch=1, workers=1,
                        transform=recording(made))
    with TorchLoader(loader) as tensors:
        kept = [next(tensors) for _ in range(3)]
    for step, batch in enumerate(kept):
        check_swapped(batch, loader.indices(step))
        # The native stream shares the loader's array; the converted ones are copies.
        assert batch["image"].data_ptr() == made[step]["image"].ctypes.data
        assert batch["value"].data_ptr() != made[step]["value"].ctypes.data
        assert batch["label"].data_ptr() != made[step]["label"].ctypes.data


def test_the_staging_ring_swaps_into_its_buffers() -> None:
    ring = _PinnedRing(2, pin=False)
    scales = (1.0, -2.5, 3.0)
    batches = [{"x": (np.arange(6, dtype=np.float32).reshape(3, 2) * k).astype(SWAPPED_F4)}
               for k in scales]
    assert not batches[0]["x"].dtype.isnative
    staged = [ring.stage(b) for b in batches]
    assert staged[0]["x"].dtype == torch.float32
    assert staged[0]["x"].data_ptr() == staged[2]["x"].data_ptr()  # buffers still reused
    # staged[0]'s buffer now holds the third batch, as the ring promises.
    for k, tensors in zip(scales[1:], staged[1:], strict=True):
        assert torch.equal(tensors["x"], torch.arange(6, dtype=torch.float32).reshape(3, 2) * k)


def test_tensor_batch_samplers(adapter: TorchDataset[TensorBatch]) -> None:
    """torch's DataLoader passes on what its batch sampler yields: 1-d tensors
    (torch.randperm(n).split(b)) and lists of 0-d tensors (a BatchSampler over a tensor)."""
    order = torch.randperm(RECORDS, generator=torch.Generator().manual_seed(11))
    splits = torch.split(order, 32)
    # torch annotates batch_sampler as yielding lists; it passes tensors on just the same.
    loader = torch.utils.data.DataLoader(
        adapter, batch_sampler=splits, collate_fn=collate  # type: ignore[arg-type]
    )
    batches = list(loader)
    assert len(batches) == len(splits) == 10
    for batch, split in zip(batches, splits, strict=True):
        check(batch, split.numpy())
    listed = torch.utils.data.DataLoader(adapter, sampler=order, batch_size=32, collate_fn=collate)
    for batch, split in zip(listed, splits, strict=True):
        check(batch, split.numpy())
    # A tensor index means what the same NumPy array means.
    check(adapter.__getitems__(torch.tensor([7, -1, 7])), np.array([7, RECORDS - 1, 7]))
    mask = torch.zeros(RECORDS, dtype=torch.bool)
    mask[[3, 200]] = True
    check(adapter.__getitems__(mask), np.array([3, 200]))
    pair = [torch.tensor(9, dtype=torch.int32), torch.tensor(2, dtype=torch.int32)]
    check(adapter.__getitems__(pair), np.array([9, 2]))


def test_tensor_single_indices(adapter: TorchDataset[TensorBatch]) -> None:
    for index, record in ((torch.tensor(3), 3), (torch.tensor(-2, dtype=torch.int16), RECORDS - 2),
                          (np.int32(5), 5)):
        sample = adapter[index]
        assert sample["label"].item() == record
        assert sample["image"].numpy().tobytes() == images_of(np.array([record]))[0].tobytes()
    with pytest.raises(TypeError, match="one int index"):
        adapter[torch.tensor([3])]
    with pytest.raises(TypeError, match="one int index"):
        adapter[True]
    with pytest.raises(TypeError, match="must be integers"):
        adapter[torch.tensor(3.0)]
    with pytest.raises(IndexError, match="out of range"):
        adapter[torch.tensor(RECORDS)]
    with pytest.raises(TypeError, match="not the single index"):
        adapter.__getitems__(torch.tensor(3))
    with pytest.raises(TypeError, match="mixing bools and integers|must be integers"):
        adapter.__getitems__([torch.tensor(1), torch.tensor(True)])


def test_torchs_default_collate_is_a_clear_error(adapter: TorchDataset[TensorBatch]) -> None:
    loader = torch.utils.data.DataLoader(adapter, batch_size=4)  # no collate_fn=collate
    with pytest.raises(TypeError, match=r"already collated .* collate_fn=loaderx\.torch\.collate"):
        next(iter(loader))
    batch = adapter.__getitems__([4, 1])
    assert isinstance(batch, CollatedBatch)
    check(batch, np.array([4, 1]))
    with pytest.raises(KeyError):
        batch["missing"]
    # torch's pin_memory and worker processes copy batches as their own type; it pickles.
    check(pickle.loads(pickle.dumps(batch)), np.array([4, 1]))


def test_flipped_and_read_only_transform_results_become_tensors(folder: Path) -> None:
    """A transform's np.flip (negative strides) made torch.from_numpy raise ValueError in both
    adapters and the staging ring, and a read-only np.broadcast_to became a tensor that shared
    it writable (torch warned of undefined behaviour). Both are now copied once."""
    def flip(batch: dict[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
        return {"image": np.flip(batch["image"], (0, 2)),
                "label": np.broadcast_to(batch["label"][:1], batch["label"].shape)}

    ds = TorchDataset({"image": DenseDataset(folder / "image"),
                       "label": DenseDataset(folder / "label")}, transform=flip, collated=True)
    indices = np.array([4, 9, 2])
    batch = ds.__getitems__(indices.tolist())
    assert isinstance(batch, dict)
    assert np.array_equal(batch["image"].numpy(), np.flip(images_of(indices), (0, 2)))
    assert batch["label"].tolist() == [4, 4, 4]
    batch["label"][1] = 7  # its own memory: the other rows keep their values
    assert batch["label"].tolist() == [4, 7, 4]
    with DataLoader({"image": DenseDataset(folder / "image")}, batch_size=8, seed=1,
                    transform=lambda b: {"image": b["image"][::-1]}) as loader, \
            DataLoader({"image": DenseDataset(folder / "image")}, batch_size=8,
                       seed=1) as plain:
        got = next(TorchLoader(loader))["image"]
        assert np.array_equal(got.numpy(), next(plain)["image"][::-1])
    ring = _PinnedRing(1, pin=False)
    flipped = np.arange(6, dtype=np.float32).reshape(3, 2)[::-1]
    assert torch.equal(ring.stage({"x": flipped})["x"], torch.from_numpy(flipped.copy()))


def shared_in_worker(batch: Any) -> dict[str, bool]:
    """A collate_fn that runs in the worker: which of the batch's tensors (a TensorBatch; typed
    Any as collate is) are in shared memory there, before torch pickles them for the main
    process."""
    tensors: TensorBatch = batch
    return {name: tensor.untyped_storage().is_shared() for name, tensor in tensors.items()}


def keep(batch: dict[str, Any]) -> dict[str, Any]:
    return batch


def widen(batch: dict[str, Any]) -> dict[str, Any]:
    return {**batch, "image": batch["image"].astype(np.float32)}


@pytest.mark.parametrize("transform", [None, keep, widen])
def test_worker_batches_are_made_in_shared_memory(folder: Path, transform: Any) -> None:
    # A worker's batch that was not in shared memory was copied there by the queue's feeder
    # thread; a spawn worker that exited while its feeder was inside that copy (the main
    # process stopped early) aborted with "terminate called without an active exception",
    # 1 run in 40 of a loop that broke after 3 batches (0 in 40 over a memmap, whose default
    # collate makes its batch in shared memory). Made there, the batch goes as a handle.
    ds = TorchDataset({"image": DenseDataset(folder / "image"),
                       "label": DenseDataset(folder / "label")}, transform=transform,
                      collated=True)
    loader = torch.utils.data.DataLoader(
        ds, batch_size=50, collate_fn=shared_in_worker, num_workers=1,
        multiprocessing_context="fork",
    )
    assert list(loader) == [{"image": True, "label": True}] * 6
    # On the main process the tensors stay ordinary ones that share the gathered arrays.
    assert not any(shared_in_worker(ds.__getitems__([1, 2])).values())


def batches_of(loader: torch.utils.data.DataLoader[Any]) -> list[tuple[Any, ...]]:
    """Every batch of loader as comparable values: (label bytes, image bytes, dtypes, shapes)."""
    return [(b["label"].numpy().tobytes(), b["image"].numpy().tobytes(), b["label"].dtype,
             b["image"].dtype, tuple(b["label"].shape), tuple(b["image"].shape)) for b in loader]


@pytest.mark.parametrize("workers", [0, 2])
def test_torchs_default_collate_over_the_samples(
    samples_adapter: TorchDataset[TensorBatch], adapter: TorchDataset[TensorBatch], workers: int,
) -> None:
    """torch's DataLoader with its default collate_fn, batch sampler and all, gives exactly the
    records asked for; and exactly the batches the collated path gives for the same order."""
    def made(ds: TorchDataset[TensorBatch], **extra: Any) -> torch.utils.data.DataLoader[Any]:
        processes: dict[str, Any] = {"num_workers": workers}
        if workers:
            processes["multiprocessing_context"] = "forkserver"
        return torch.utils.data.DataLoader(ds, batch_size=32, sampler=order, **processes, **extra)

    order = torch.randperm(RECORDS, generator=torch.Generator().manual_seed(21)).tolist()

    batches = list(made(samples_adapter))
    assert len(batches) == 10 and batches[-1]["label"].shape == (RECORDS - 9 * 32,)
    for batch in batches:
        assert type(batch) is dict and set(batch) == {"image", "label"}
        check(batch)
    assert np.concatenate([b["label"].numpy() for b in batches]).tolist() == order
    assert batches_of(made(samples_adapter)) == batches_of(made(adapter, collate_fn=collate))


def test_getitems_returns_what_getitem_returns(samples_adapter: TorchDataset[TensorBatch]) -> None:
    """__getitems__(indices) is [ds[i] for i in indices]: same keys, dtypes, shapes, values."""
    indices = [7, 0, RECORDS - 1, 7]
    samples = samples_adapter.__getitems__(indices)
    assert isinstance(samples, list) and len(samples) == len(indices)
    for index, sample in zip(indices, samples, strict=True):
        one = samples_adapter[index]
        assert isinstance(sample, dict) and isinstance(one, dict) and set(sample) == set(one)
        for name in one:
            assert sample[name].dtype == one[name].dtype and sample[name].shape == one[name].shape
            assert torch.equal(sample[name], one[name])
    assert samples_adapter.__getitems__([]) == []
    samples = samples_adapter.__getitems__([3])
    assert isinstance(samples, list)
    check(torch.utils.data.default_collate(samples), np.array([3]))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_single_dataset_gives_tensors_through_torchs_loader(folder: Path, workers: int) -> None:
    ds = TorchDataset(DenseDataset(folder / "image"))
    processes: dict[str, Any] = {"num_workers": workers}
    if workers:
        processes["multiprocessing_context"] = "forkserver"
    loader = torch.utils.data.DataLoader(ds, batch_size=64, **processes)
    batches = list(loader)
    assert all(isinstance(batch, torch.Tensor) for batch in batches)
    assert torch.cat(batches).numpy().tobytes() == images_of(np.arange(RECORDS)).tobytes()
    fast = TorchDataset(DenseDataset(folder / "image"), collated=True).loader(64, **processes)
    assert [b.numpy().tobytes() for b in fast] == [b.numpy().tobytes() for b in batches]
    # batch_size=None hands out samples as ds[i] makes them.
    unbatched = torch.utils.data.DataLoader(ds, batch_size=None, **processes)
    assert [s.numpy().tobytes() for s in unbatched] == [
        images_of(np.array([i]))[0].tobytes() for i in range(RECORDS)]


def test_a_transform_that_breaks_the_batch_into_samples_is_refused(folder: Path) -> None:
    streams = {"image": DenseDataset(folder / "image"), "label": DenseDataset(folder / "label")}
    first = TorchDataset(streams, transform=lambda b: {**b, "label": b["label"][:1]})
    with pytest.raises(ValueError, match=r"stream 'label' of shape \(1,\) for a batch of 3.*"
                                         r"needs 3 rows \(or use collated=True\)"):
        first.__getitems__([1, 2, 3])
    total = TorchDataset(streams["label"], transform=lambda b: b.sum())
    with pytest.raises(ValueError, match=r"returned an array of shape \(\) for a batch of 2"):
        total.__getitems__([1, 2])
    pair = TorchDataset(streams, transform=lambda b: (b["image"], b["label"]))
    with pytest.raises(TypeError, match="must return a dict of arrays, not tuple"):
        pair.__getitems__([1])
    # The collated path takes what it is given: one row of labels for a batch of three.
    collated = TorchDataset(streams, transform=lambda b: {**b, "label": b["label"][:1]},
                            collated=True)
    batch = collated.__getitems__([1, 2, 3])
    assert isinstance(batch, dict) and batch["label"].tolist() == [1]


def test_values_torch_cannot_hold_are_named(folder: Path) -> None:
    """A transform that returns strings, a nested dict or long doubles: torch.from_numpy's own
    TypeError named only the NumPy type, not which stream held it; both adapters now name it."""
    streams = {"image": DenseDataset(folder / "image"), "label": DenseDataset(folder / "label")}
    named = TorchDataset(streams,
                         transform=lambda b: {**b, "name": np.full(len(b["label"]), "cat")})
    with pytest.raises(TypeError, match=r"the transform's stream 'name' is of dtype <U3 "
                                        r"\(ndarray\); torch tensors hold"):
        named.__getitems__([1, 2])
    nested = TorchDataset(streams, transform=lambda b: {"inputs": {"image": b["image"]}},
                          collated=True)
    with pytest.raises(TypeError, match=r"stream 'inputs' is of dtype object \(dict\)"):
        nested.__getitems__([1, 2])
    single = TorchDataset(streams["label"], transform=lambda b: b.astype(np.longdouble))
    if np.dtype(np.longdouble).itemsize > 8:  # an 80-bit long double, which torch lacks
        with pytest.raises(TypeError, match=r"the transform's array is of dtype float"):
            single[3]
    with DataLoader(streams, batch_size=4, transform=lambda b: {**b, "tag": np.array(["a"] * 4)}
                    ) as loader, TorchLoader(loader) as tensors:
        with pytest.raises(TypeError, match=r"the batch's 'tag' is of dtype <U1 \(ndarray\); "
                                            r"torch tensors hold"):
            next(tensors)


def test_collate_says_which_path_it_belongs_to(samples_adapter: TorchDataset[TensorBatch]) -> None:
    with pytest.raises(TypeError, match="got a list of samples: make the TorchDataset with "
                                        "collated=True"):
        next(iter(torch.utils.data.DataLoader(samples_adapter, batch_size=4, collate_fn=collate)))
    tensor = torch.arange(3)
    assert collate(tensor) is tensor
    # Without collated=True, loader() takes the caller's collate_fn.
    pairs = samples_adapter.loader(4, collate_fn=lambda samples: len(samples))
    assert next(iter(pairs)) == 4
    assert "collated=False" in repr(samples_adapter)


def test_a_ring_for_a_device_stages_each_batch_in_fresh_buffers() -> None:
    # TorchLoader(pin_memory=True, device=...) moves each batch with non_blocking=True; the
    # copy may still be queued `ring` batches later, so its buffers must not be written again.
    ring = _PinnedRing(2, pin=False, fresh=True)
    batches = [{"x": np.full((3, 2), k, dtype=np.int32)} for k in range(5)]
    staged = [ring.stage(b) for b in batches]
    assert len({tensors["x"].data_ptr() for tensors in staged}) == 5
    for k, tensors in enumerate(staged):
        assert torch.equal(tensors["x"], torch.full((3, 2), k, dtype=torch.int32))
