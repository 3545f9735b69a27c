"""Tests for loaderx.jax on CPU JAX with two host devices: device prefetch, sharding, state."""

from __future__ import annotations

import os

# Two CPU devices, set before jax is first imported in this process (pytest imports every test
# module at collection, before any test runs; nothing else in tests/ imports jax in-process).
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

from loaderx._data.converter import from_numpy  # noqa: E402
from loaderx._loading.dataloader import DataLoader  # noqa: E402
from loaderx._data.dense import DenseDataset  # noqa: E402
from loaderx.jax import DevicePrefetch, device_prefetch, global_batch, process_shard  # noqa: E402

RECORDS = 200


@pytest.fixture(scope="module")
def streams(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, DenseDataset]]:
    base = tmp_path_factory.mktemp("jax")
    labels = np.arange(RECORDS, dtype=np.int32)
    from_numpy(base / "x", np.repeat(labels[:, None], 4, axis=1).astype(np.float32))
    from_numpy(base / "y", labels, codec="raw")
    made = {"x": DenseDataset(base / "x"), "y": DenseDataset(base / "y")}
    yield made
    for dataset in made.values():
        dataset.close()


def test_two_host_devices() -> None:
    assert jax.device_count() == 2, "XLA_FLAGS was not applied: jax was imported before"
    assert process_shard() == (0, 1)


def test_device_prefetch_yields_the_loaders_batches_on_device(
    streams: dict[str, DenseDataset],
) -> None:
    with DataLoader(streams, batch_size=8, seed=1) as loader:
        expected = [loader.indices(step) for step in range(12)]
        with device_prefetch(loader, size=3) as batches:
            for step in range(12):
                batch = next(batches)
                assert isinstance(batch["y"], jax.Array)
                assert batches.step == step + 1
                assert loader.step == step + 1 + 3  # three more already on their way
                assert np.array_equal(np.asarray(batch["y"]), expected[step])
                assert np.array_equal(np.asarray(batch["x"])[:, 0], expected[step])


def test_sharded_batches_split_rows_across_devices(streams: dict[str, DenseDataset]) -> None:
    mesh = Mesh(np.array(jax.devices()), ("data",))
    sharding = NamedSharding(mesh, PartitionSpec("data"))  # type: ignore[no-untyped-call]
    with DataLoader(streams, batch_size=8, seed=2) as loader:
        first = loader.indices(0)
        batches = DevicePrefetch(loader, size=2, sharding=sharding)
        batch = next(batches)
        shards = batch["y"].addressable_shards
        assert len(shards) == 2
        assert {shard.device for shard in shards} == set(jax.devices())
        for shard in shards:
            rows = shard.index[0]
            assert np.array_equal(np.asarray(shard.data), first[rows])
        # A jitted step over the sharded batch runs on both devices.
        total = jax.jit(lambda b: jnp.sum(b["x"][:, 0]))(batch)
        assert float(total) == float(first.sum())
        # Global arrays from process-local rows (one process here: the rows are all of them).
        made = global_batch({"y": np.arange(8, dtype=np.int32)}, sharding)
        assert made["y"].sharding == sharding
        assert np.array_equal(np.asarray(made["y"]), np.arange(8))


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, DenseDataset]]:
    """Six streams of 1 KiB rows (one dataset under six names). Each name gets its own loader
    buffers; on CPU, JAX aliased some buffers and not others (it seems to depend on their
    addresses), and with twelve buffers a missing copy failed every run, not only some."""
    base = tmp_path_factory.mktemp("jax_wide")
    from_numpy(base / "w", np.random.default_rng(5).random((RECORDS, 256), dtype=np.float32))
    dataset = DenseDataset(base / "w")
    yield {f"w{k}": dataset for k in range(6)}
    dataset.close()


def reference_batches(streams: dict[str, DenseDataset], seed: int, steps: int) -> list[Any]:
    """Each step's batch from a loader that hands out fresh arrays (the default)."""
    with DataLoader(streams, batch_size=16, seed=seed) as fresh:
        return [next(fresh) for _ in range(steps)]


def check_kept(kept: list[dict[str, Any]], expected: list[Any]) -> None:
    for step, (batch, want) in enumerate(zip(kept, expected, strict=True)):
        for name in want:
            assert np.array_equal(np.asarray(batch[name]), want[name]), (step, name)


@pytest.mark.parametrize("sharded", [False, True])
def test_batches_from_reused_buffers_keep_their_values(
    wide: dict[str, DenseDataset], sharded: bool,
) -> None:
    """With reuse_buffers=True the loader writes later steps into the arrays it handed out;
    device arrays already yielded must not change (device_put may alias a NumPy array, as it
    does on CPU, or read it after returning)."""
    sharding = None
    if sharded:
        mesh = Mesh(np.array(jax.devices()), ("data",))
        sharding = NamedSharding(mesh, PartitionSpec("data"))  # type: ignore[no-untyped-call]
    expected = reference_batches(wide, seed=6, steps=10)
    with DataLoader(wide, batch_size=16, seed=6, prefetch=1, workers=1,
                    reuse_buffers=True) as loader, \
            device_prefetch(loader, size=2, sharding=sharding) as batches:
        assert batches.copy
        kept = [next(batches) for _ in range(10)]
        for _ in range(4):  # the loader keeps writing into its two buffers per stream
            next(batches)
    check_kept(kept, expected)


def test_batches_from_reused_buffers_multi_host_path(
    wide: dict[str, DenseDataset], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The multi-host path (make_array_from_process_local_data, which may alias too) also gets
    private copies; one process here, with jax.process_count() made to answer 2."""
    mesh = Mesh(np.array(jax.devices()), ("data",))
    sharding = NamedSharding(mesh, PartitionSpec("data"))  # type: ignore[no-untyped-call]
    expected = reference_batches(wide, seed=7, steps=10)
    with DataLoader(wide, batch_size=16, seed=7, prefetch=1, workers=1,
                    reuse_buffers=True) as loader, \
            device_prefetch(loader, size=2, sharding=sharding) as batches:
        monkeypatch.setattr(jax, "process_count", lambda: 2)
        kept = [next(batches) for _ in range(10)]
        for _ in range(4):
            next(batches)
        monkeypatch.undo()
    check_kept(kept, expected)


def test_only_loaders_that_reuse_buffers_are_copied(wide: dict[str, DenseDataset]) -> None:
    with DataLoader(wide, batch_size=16) as loader:
        assert not device_prefetch(loader).copy
    assert not device_prefetch(iter([{"a": np.zeros(2)}])).copy


def swapped_values(labels: Any) -> Any:
    """Record i of the swapped float stream: two floats whose bytes differ from their swapped
    reading, so a missing or doubled swap cannot go unnoticed."""
    return (labels[:, None] * np.float32(1.5) + np.array([-3.25, 1e30], np.float32)).astype(
        np.float32)


@pytest.fixture(scope="module")
def swapped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, DenseDataset]]:
    """Streams stored in the byte order opposite to this machine's ('>f4' and '>i4' on a
    little-endian host), which jax.device_put refuses as they are."""
    base = tmp_path_factory.mktemp("jax_swapped")
    labels = np.arange(RECORDS, dtype=np.int32)
    f4 = np.dtype(np.float32).newbyteorder()
    i4 = np.dtype(np.int32).newbyteorder()
    made = {"x": DenseDataset(base / "x", dtype=f4, item_shape=(2,)),
            "y": DenseDataset(base / "y", dtype=i4, item_shape=())}
    made["x"].append(swapped_values(labels).astype(f4))
    made["y"].append((labels * 1000).astype(i4))
    assert not made["x"].dtype.isnative and not made["y"].dtype.isnative
    yield made
    for dataset in made.values():
        dataset.close()


@pytest.mark.parametrize("reuse_buffers", [False, True])
@pytest.mark.parametrize("sharded", [False, True])
def test_non_native_byte_order_is_placed_in_native_order(
    swapped: dict[str, DenseDataset], reuse_buffers: bool, sharded: bool,
) -> None:
    """A dataset stored in non-native byte order is placed with the same values in the native
    dtype, as the torch adapters and the Ray reader give it (jax.device_put alone refuses it)."""
    sharding = None
    if sharded:
        mesh = Mesh(np.array(jax.devices()), ("data",))
        sharding = NamedSharding(mesh, PartitionSpec("data"))  # type: ignore[no-untyped-call]
    with DataLoader(swapped, batch_size=8, seed=4, reuse_buffers=reuse_buffers) as loader, \
            device_prefetch(loader, size=2, sharding=sharding) as batches:
        kept = [next(batches) for _ in range(4)]
        expected = [loader.indices(step) for step in range(4)]
    for batch, indices in zip(kept, expected, strict=True):
        assert batch["x"].dtype == jnp.float32 and batch["y"].dtype == jnp.int32
        assert np.array_equal(np.asarray(batch["x"]), swapped_values(indices))
        assert np.asarray(batch["y"]).tolist() == (indices * 1000).tolist()
    if sharded:
        made = global_batch({"y": np.arange(8).astype(">i4")}, sharding)  # type: ignore[arg-type]
        assert made["y"].dtype == jnp.int32 and np.asarray(made["y"]).tolist() == list(range(8))


def test_state_names_the_next_batch_yielded(streams: dict[str, DenseDataset]) -> None:
    with DataLoader(streams, batch_size=8, seed=3) as loader:
        batches = device_prefetch(loader, size=2)
        for _ in range(5):
            next(batches)
        state = batches.state_dict()
        following = np.asarray(next(batches)["y"])
    assert state["step"] == 5
    with DataLoader(streams, batch_size=8) as loader:
        resumed = device_prefetch(loader)
        resumed.load_state_dict(state)
        assert np.array_equal(np.asarray(next(resumed)["y"]), following)


def fail_at_steps(steps: set[int]) -> Any:
    """A transform for a sequential loader of batch 8 over `y`: raises on these steps."""

    def transform(batch: dict[str, Any]) -> dict[str, Any]:
        step = int(batch["y"][0]) // 8
        if step in steps:
            raise RuntimeError(f"bad step {step}")
        return batch

    return transform


def outcomes(batches: Iterator[dict[str, Any]], calls: int) -> list[Any]:
    """What each next() gave: the batch's y as a list, or the message of the error it raised."""
    seen: list[Any] = []
    for _ in range(calls):
        try:
            seen.append(np.asarray(next(batches)["y"]).tolist())
        except RuntimeError as error:
            seen.append(str(error))
    return seen


@pytest.mark.parametrize("size", [1, 2, 3])
def test_errors_come_out_in_step_order(streams: dict[str, DenseDataset], size: int) -> None:
    """An error of step k is raised by the next() that would have returned step k, after every
    batch before it; no batch is lost, and the following next() goes on with step k+1."""
    with DataLoader(streams, batch_size=8, mode="sequential", workers=1,
                    transform=fail_at_steps({2, 3, 6})) as loader, \
            device_prefetch(loader, size=size) as batches:
        seen = outcomes(batches, 3)
        assert batches.state_dict()["step"] == 3  # the failed step 2 was taken
        seen += outcomes(batches, 5)
    rows = [list(range(8 * step, 8 * step + 8)) for step in range(8)]
    assert seen == [rows[0], rows[1], "bad step 2", "bad step 3", rows[4], rows[5],
                    "bad step 6", rows[7]]


class Interrupted:
    """An iterator of batches {"a": [k, k]} whose call number `at` raises KeyboardInterrupt
    without using up a batch (as Ctrl-C inside next(loader) would)."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.calls = 0
        self.made = 0

    def __iter__(self) -> Interrupted:
        return self

    @property
    def step(self) -> int:
        """The next step this iterator makes, as a DataLoader's step."""
        return self.made

    def __next__(self) -> dict[str, Any]:
        self.calls += 1
        if self.calls == self.at:
            raise KeyboardInterrupt
        self.made += 1
        return {"a": np.full(2, self.made - 1)}


def test_an_interrupt_while_refilling_loses_no_batch() -> None:
    """Ctrl-C in the refill after a batch was taken off the queue goes up at once; that batch
    is then the next one returned."""
    batches = device_prefetch(Interrupted(at=3), size=2)
    with pytest.raises(KeyboardInterrupt):
        next(batches)
    assert [np.asarray(next(batches)["a"]).tolist() for _ in range(5)] == [
        [0, 0], [1, 1], [2, 2], [3, 3], [4, 4]
    ]


def test_an_interrupt_while_placing_a_batch_loses_no_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C while a batch already taken from the loader is being placed on the device (the
    host copy and the transfer): the batch stays queued, is placed in its turn, and step counts
    it (it used to be dropped, with step one off)."""
    import loaderx.jax

    placed = loaderx.jax._place
    calls = [0]

    def interrupted_once(batch: Any, sharding: Any, copy: bool) -> Any:
        calls[0] += 1
        if calls[0] == 4:  # placing step 3, in the refill of the second next()
            raise KeyboardInterrupt
        return placed(batch, sharding, copy)

    monkeypatch.setattr(loaderx.jax, "_place", interrupted_once)
    loader = Interrupted(at=-1)
    batches = device_prefetch(loader, size=2)
    assert np.asarray(next(batches)["a"]).tolist() == [0, 0]
    with pytest.raises(KeyboardInterrupt):
        next(batches)
    assert loader.made == 4 and batches.step == 1
    assert [np.asarray(next(batches)["a"]).tolist() for _ in range(5)] == [
        [1, 1], [2, 2], [3, 3], [4, 4], [5, 5]
    ]


def test_bad_arguments(streams: dict[str, DenseDataset]) -> None:
    loader: Any = iter([])
    with pytest.raises(ValueError, match=r"size must be in 1\.\.4096, got 0"):
        device_prefetch(loader, size=0)
    # Capped as DataLoader's prefetch is (a larger size is a unit mix-up).
    with pytest.raises(ValueError, match=r"size must be in 1\.\.4096, got 4097"):
        device_prefetch(loader, size=4097)
    with pytest.raises(TypeError, match="size must be an int"):
        device_prefetch(loader, size=True)
    assert device_prefetch(loader, size=np.int64(4096)).size == 4096  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="jax.sharding.Sharding"):
        device_prefetch(loader, sharding="data")  # type: ignore[arg-type]
    # A finite iterator ends the prefetch when it ends.
    finite = list(device_prefetch(iter([{"a": np.full(2, k)} for k in range(3)]), size=2))
    assert [int(b["a"][0]) for b in finite] == [0, 1, 2]



def test_any_pytree_batch_is_placed_with_its_structure(streams: dict[str, DenseDataset]) -> None:
    """Tuples, lists, nested dicts and a bare array, as flax's prefetch_to_device takes them:
    each comes out with its structure, every leaf a device array holding exactly its values."""
    def shaped(batch: dict[str, Any]) -> Any:
        return [(batch["x"], batch["y"]), {"inputs": {"x": batch["x"]}, "y": batch["y"]},
                [batch["y"], np.int32(7)], batch["y"]][int(batch["y"][0]) // 8 % 4]

    with DataLoader(streams, batch_size=8, mode="sequential", workers=1) as plain:
        hosts = [shaped(next(plain)) for _ in range(8)]
    # DataLoader's transform returns a dict; other shapes come from a generator over it.
    with DataLoader(streams, batch_size=8, mode="sequential", workers=1) as loader, \
            device_prefetch((shaped(b) for b in loader), size=3) as batches:
        placed = [next(batches) for _ in range(8)]
    for host, device in zip(hosts, placed, strict=True):
        assert str(jax.tree_util.tree_structure(device)) == str(jax.tree_util.tree_structure(host))
        for want, have in zip(jax.tree_util.tree_leaves(host), jax.tree_util.tree_leaves(device),
                              strict=True):
            assert isinstance(have, jax.Array)
            assert np.asarray(have).dtype == np.asarray(want).dtype
            assert np.asarray(have).tobytes() == np.asarray(want).tobytes()
    # A tuple batch over two devices: each array laid out by the one sharding.
    mesh = Mesh(np.array(jax.devices()), ("data",))
    sharding = NamedSharding(mesh, PartitionSpec("data"))  # type: ignore[no-untyped-call]
    pairs = iter([(np.arange(8, dtype=np.int32) + k, {"w": np.ones((8, 2), np.float32) * k})
                  for k in range(3)])
    with device_prefetch(pairs, size=2, sharding=sharding) as batches:
        for k, (ids, extra) in enumerate(batches):
            assert ids.sharding == sharding and extra["w"].sharding == sharding
            assert np.asarray(ids).tolist() == list(range(k, k + 8))
            assert np.asarray(extra["w"]).tolist() == [[float(k)] * 2] * 8
    made = global_batch((np.arange(8, dtype=np.int32), [np.zeros(8, np.int8)]), sharding)
    assert isinstance(made, tuple) and made[0].sharding == sharding
    assert np.asarray(made[1][0]).tolist() == [0] * 8


def recorded_device_puts(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The arguments of every jax.device_put call from now on (each still placed)."""
    placed: list[Any] = []
    put = jax.device_put

    def recorded(*args: Any) -> Any:
        placed.append(args)
        return put(*args)

    monkeypatch.setattr(jax, "device_put", recorded)
    return placed


def test_leaves_that_are_not_arrays_raise_a_clear_type_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A string or object leaf raises TypeError naming where it sits, in its step's turn,
    before any array of that batch goes to the device; the next step goes on."""
    placed = recorded_device_puts(monkeypatch)
    bad: Any = iter([{"x": np.zeros(2), "name": "cat"},
                     (np.zeros(2), [np.array([None, 1], dtype=object)]),
                     {"x": np.zeros(2), "words": {"w": np.array(["a", "b"])}},
                     {"ok": np.arange(3), "half": np.ones(2, dtype=ml_dtypes.bfloat16)}])
    with device_prefetch(bad, size=2) as batches:
        with pytest.raises(TypeError, match=r"leaves are numeric arrays.*the leaf at "
                                            r"batch\['name'\] is str$"):
            next(batches)
        with pytest.raises(TypeError, match=r"the leaf at batch\[1\]\[0\] is ndarray of dtype "
                                            r"object$"):
            next(batches)
        with pytest.raises(TypeError, match=r"the leaf at batch\['words'\]\['w'\] is ndarray of "
                                            r"dtype <U1$"):
            next(batches)
        assert len(placed) == 0
        last = next(batches)  # bfloat16 (ml_dtypes, a 'V' kind without fields) is placed
        assert np.asarray(last["ok"]).tolist() == [0, 1, 2]
        assert last["half"].dtype == jnp.bfloat16 and np.asarray(last["half"]).tolist() == [1, 1]
        with pytest.raises(StopIteration):
            next(batches)
    mesh = Mesh(np.array(jax.devices()), ("data",))
    sharding = NamedSharding(mesh, PartitionSpec("data"))  # type: ignore[no-untyped-call]
    with pytest.raises(TypeError, match=r"global_batch places .* batch\[0\] is bytes$"):
        global_batch((b"ab", np.zeros(2)), sharding)


def test_64_bit_integers_jax_would_wrap_are_refused_naming_the_leaf(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With jax_enable_x64 off, device_put stored int64 2**40 + 5 as int32 5 without a word.
    Such a batch is refused before any of its arrays moves; 64-bit values that fit, and every
    value once x64 is on, are placed exactly."""
    assert jax.dtypes.canonicalize_dtype(np.int64) == np.int32  # x64 off, as by default
    placed = recorded_device_puts(monkeypatch)
    fits = np.array([-(2**31), 0, 2**31 - 1], dtype=np.int64)
    bad: Any = iter([{"a": np.zeros(2), "ids": np.array([1, 2**40 + 5], dtype=np.int64)},
                     {"u": np.array([2**32], dtype=">u8")},
                     {"labels": fits, "small": np.array([2**32 - 1], dtype=np.uint64)}])
    with device_prefetch(bad, size=1) as batches:
        with pytest.raises(OverflowError, match=r"the leaf at batch\['ids'\] is int64 with "
                                                r"values in \[1, 1099511627781\].*int32"):
            next(batches)
        with pytest.raises(OverflowError, match=r"batch\['u'\] is uint64 .*uint32"):
            next(batches)
        assert len(placed) == 0
        last = next(batches)
        assert np.asarray(last["labels"]).tolist() == fits.tolist()
        assert np.asarray(last["small"]).tolist() == [2**32 - 1]
    with jax.enable_x64(True):
        with device_prefetch(iter([{"ids": np.array([2**40 + 5], dtype=np.int64)}])) as wide:
            assert np.asarray(next(wide)["ids"]).tolist() == [2**40 + 5]


def test_leaving_the_block_leaves_the_loader_open_where_the_caller_left_off(
    streams: dict[str, DenseDataset],
) -> None:
    """The with block of device_prefetch does not close the loader the caller passed in, and
    moves it back over the batches that were in flight: iterating it on, or wrapping it again,
    gives exactly the batches a loader that was never wrapped gives."""
    with DataLoader(streams, batch_size=8, seed=12) as reference:
        expected = [reference.indices(step) for step in range(9)]
    with DataLoader(streams, batch_size=8, seed=12) as loader:
        with device_prefetch(loader, size=3) as batches:
            seen = [np.asarray(next(batches)["y"]) for _ in range(2)]
            assert loader.step == 5
        assert not loader.closed and loader.step == 2 and batches.closed
        with pytest.raises(StopIteration):
            next(batches)  # a closed prefetch ends, as a closed loader does
        seen.append(next(loader)["y"])
        with device_prefetch(loader, size=2) as again:
            seen += [np.asarray(next(again)["y"]) for _ in range(3)]
        seen += [next(loader)["y"] for _ in range(3)]
        state = loader.state_dict()
    for step, (have, want) in enumerate(zip(seen, expected, strict=True)):
        assert np.array_equal(have, want), step
    assert state["step"] == 9
    # A loader the caller closed inside the block: leaving it does nothing more.
    with DataLoader(streams, batch_size=8, seed=12) as loader, \
            device_prefetch(loader, size=2) as batches:
        next(batches)
        loader.close()
    assert loader.closed
    # Any other iterator is left as it is: the batches in flight are dropped.
    numbers = iter([{"a": np.full(2, k)} for k in range(6)])
    with device_prefetch(numbers, size=2) as batches:
        assert np.asarray(next(batches)["a"]).tolist() == [0, 0]
    assert next(numbers)["a"].tolist() == [3, 3]


MULTI_HOST = r"""
import os, sys
os.environ["JAX_PLATFORMS"] = "cpu"
os.environ["XLA_FLAGS"] = ""
import jax
jax.distributed.initialize(coordinator_address="127.0.0.1:" + sys.argv[2], num_processes=2,
                           process_id=int(sys.argv[1]))
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset
from loaderx.jax import device_prefetch, process_shard

sharding = NamedSharding(Mesh(np.array(jax.devices()), ("data",)), PartitionSpec("data"))
loader = DataLoader({"y": DenseDataset(sys.argv[3])}, batch_size=6, seed=8, shard=process_shard())
with loader, device_prefetch(loader, size=2, sharding=sharding) as batches:
    for step in range(3):
        batch = batches.__next__()["y"]
        assert batch.shape == (12,) and not batch.is_fully_addressable
        everything = multihost_utils.process_allgather(batch, tiled=True)
        print("step", step, process_shard(), " ".join(map(str, everything.tolist())), flush=True)
"""


def test_two_processes_build_global_batches(streams: dict[str, DenseDataset]) -> None:
    """Two JAX processes (jax.distributed on CPU, one device each): each loads its shard, and
    the global arrays hold exactly the single-host global batch of every step."""
    import socket
    import subprocess
    import sys

    from loaderx.sampler import Sampler

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    path = streams["y"].path
    children = [subprocess.Popen([sys.executable, "-c", MULTI_HOST, str(rank), port, path],
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for rank in range(2)]
    outputs = [child.communicate(timeout=240) for child in children]
    for child, (out, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0, out + err[-3000:]
    single = Sampler(RECORDS, 12, seed=8)
    for rank, (out, _) in enumerate(outputs):
        lines = [line for line in out.splitlines() if line.startswith("step")]
        assert len(lines) == 3
        for step, line in enumerate(lines):
            assert line.startswith(f"step {step} ({rank}, 2) ")
            values = [int(v) for v in line.split(") ")[1].split()]
            assert values == single.batch(step).tolist()
