"""The loader's state_dict: a new loader resumes exactly, another dataset's state is refused
naming the difference and leaves the loader where it was, the last step's state loads back,
a state names the length sampled, and another host count with the same global batch is
allowed."""

from __future__ import annotations

import json
from pathlib import Path

import msgpack
import numpy as np
import pytest

from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset

# Fixtures are found by name in the module: imported, pytest uses them.
from loader_cases import folder, no_thread_leaks, streams, take

pytestmark = pytest.mark.compiled


def test_state_dict_resumes_exactly_in_a_new_loader(streams: dict[str, DenseDataset]) -> None:
    with DataLoader(streams, batch_size=24, seed=11, mode="cyclic") as loader:
        take(loader, 37)
        state = loader.state_dict()
        expected = [b["label"].copy() for b in take(loader, 50)]
    assert state["seed"] == 11 and state["step"] == 37
    # The state is plain data: it survives JSON (what a checkpoint file may be).
    import json

    restored = json.loads(json.dumps(state))
    with DataLoader(streams, batch_size=24, seed=0, prefetch=2, workers=1) as loader:
        take(loader, 5)
        loader.load_state_dict(restored)
        assert loader.seed == 11 and loader.step == 37
        got = [b["label"] for b in take(loader, 50)]
    for want, have in zip(expected, got, strict=True):
        assert np.array_equal(want, have)


def test_state_of_other_data_is_refused_naming_the_difference(
    streams: dict[str, DenseDataset], folder: Path
) -> None:
    from loaderx.errors import StateMismatchError

    with DataLoader(streams, batch_size=24, seed=3) as loader:
        next(loader)
        state = loader.state_dict()
    with DataLoader(streams, batch_size=25, seed=3) as other:
        with pytest.raises(StateMismatchError, match="global_batch_size: saved 24, now 25"):
            other.load_state_dict(state)
        assert other.step == 0  # nothing changed
    with DataLoader(streams, batch_size=24, seed=3, mode="iid") as other:
        with pytest.raises(StateMismatchError, match="mode: saved 'cyclic', now 'iid'"):
            other.load_state_dict(state)
    short = DenseDataset(folder / "short")
    with DataLoader({"data": short, "label": short}, batch_size=24) as other:
        with pytest.raises(StateMismatchError, match="lengths: saved .*1000.*, now .*999"):
            other.load_state_dict(state)
    short.close()
    with DataLoader(streams, batch_size=24) as other:
        with pytest.raises(TypeError, match="is a dict"):
            other.load_state_dict([1, 2])  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="not a loaderx loader state"):
            other.load_state_dict({"seed": 1, "step": 2})
        with pytest.raises(ValueError, match=r"step must be an int in \[0, 2\*\*64\], got -1"):
            other.load_state_dict({**state, "step": -1})


def test_a_refused_state_leaves_the_loader_running_where_it_was(folder: Path) -> None:
    """A state whose seed or step is past the 64-bit range is refused before anything changes:
    the same loader goes on with the batches it would have returned."""
    streams = {"data": DenseDataset(folder / "data")}
    with DataLoader(streams, batch_size=24, seed=3) as loader, \
            DataLoader(streams, batch_size=24, seed=3) as reference:
        expected = [next(reference)["data"].copy() for _ in range(4)]
        assert np.array_equal(next(loader)["data"], expected[0])
        state = loader.state_dict()
        for key, value, bounds in (("seed", 1 << 64, r"\)"), ("step", (1 << 64) + 1, r"\]")):
            with pytest.raises(ValueError, match=rf"{key} must be an int in \[0, 2\*\*64{bounds}"):
                loader.load_state_dict({**state, key: value})
        assert not loader.closed and loader.step == 1
        assert [np.array_equal(next(loader)["data"], want) for want in expected[1:]] == [True] * 3


def test_the_last_step_is_2_64_minus_1_and_its_state_loads_back(folder: Path) -> None:
    """Steps are unsigned 64-bit: past step 2**64 - 1 next() refuses, without moving the step,
    and the state there (step 2**64) loads back instead of being refused."""
    streams = {"data": DenseDataset(folder / "data")}
    last = (1 << 64) - 1
    with DataLoader(streams, batch_size=24, mode="sequential", start_step=last - 1) as loader:
        take(loader, 2)
        for _ in range(2):
            with pytest.raises(ValueError, match=f"past its last step, {last} "):
                next(loader)
            assert loader.step == 1 << 64
        state = loader.state_dict()
        assert state["step"] == 1 << 64
        assert json.loads(json.dumps(state)) == state
        with pytest.raises(OverflowError):  # as the README says: msgpack stops at 2**64 - 1
            msgpack.packb(state)
    with DataLoader(streams, batch_size=24, mode="sequential") as other:
        other.load_state_dict(state)
        assert other.step == 1 << 64
        with pytest.raises(ValueError, match="past its last step"):
            next(other)
    with pytest.raises(ValueError, match=r"start_step must be <= 18446744073709551616 \(steps are"):
        DataLoader(streams, batch_size=24, start_step=(1 << 64) + 1)


def test_a_state_names_the_length_sampled_not_the_length_now(folder: Path) -> None:
    """A dataset that grows under a loader (its own appends or another process's) must not let
    the loader's state pass for the grown data: resuming there would read other records."""
    from loaderx.errors import StateMismatchError

    path = folder / "growing"
    data = DenseDataset(path, dtype=np.int64, item_shape=())
    data.append(np.arange(1000, dtype=np.int64))
    with DataLoader({"y": data}, batch_size=32, seed=4) as loader:
        next(loader)
        data.append(np.arange(1000, 1100, dtype=np.int64))
        state = loader.state_dict()
        want = next(loader)["y"].copy()
    assert state["fingerprint"]["lengths"] == {"y": 1000}
    assert want.max() < 1000
    with DataLoader({"y": data}, batch_size=32) as grown:
        with pytest.raises(StateMismatchError, match="lengths: saved .*1000.*, now .*1100"):
            grown.load_state_dict(state)
        assert grown.step == 0
    data.close()


def test_state_allows_another_host_count_with_the_same_global_batch(
    streams: dict[str, DenseDataset],
) -> None:
    with DataLoader(streams, batch_size=12, seed=5, shard=(0, 2)) as first, DataLoader(
        streams, batch_size=12, seed=5, shard=(1, 2)
    ) as second:
        take(first, 9)
        take(second, 9)
        state = first.state_dict()
        halves = [np.concatenate([a["label"], b["label"]]) for a, b in zip(
            take(first, 4), take(second, 4), strict=True)]
    with DataLoader(streams, batch_size=24, seed=0) as single:
        single.load_state_dict(state)
        for half in halves:
            assert np.array_equal(next(single)["label"], half)
