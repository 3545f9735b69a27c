"""A loader's checkpoint names the content of its data: a dataset rewritten with other records
of the same count is refused; the same records reopened, read-only, copied with `cp -a` or
split into other shards are accepted."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loaderx.converter import from_numpy
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset
from loaderx.errors import StateMismatchError
from loaderx.mixture import MixtureLoader

COUNT = 400


def values(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 1000, (COUNT, 6), dtype=np.int32)


def saved_state(folder: Path, steps: int = 3) -> dict[str, Any]:
    with DenseDataset(folder) as ds, DataLoader({"x": ds}, batch_size=32, seed=7) as loader:
        for _ in range(steps):
            next(loader)
        return loader.state_dict()


def resume(folder: Path, state: dict[str, Any], readonly: bool = False) -> np.ndarray:
    """The next batch after loading state into a loader over folder."""
    with DenseDataset(folder, readonly=readonly) as ds, DataLoader({"x": ds}, batch_size=32) as loader:
        loader.load_state_dict(state)
        return np.array(next(loader)["x"])


def expected_next(folder: Path, steps: int = 3) -> np.ndarray:
    """The batch the saved run would have read next (a loader started at that step)."""
    with DenseDataset(folder) as ds, DataLoader({"x": ds}, batch_size=32, seed=7,
                                                start_step=steps) as loader:
        return np.array(next(loader)["x"])


def test_same_length_other_content_is_refused(tmp_path: Path) -> None:
    from_numpy(tmp_path / "ds", values(1), codec="zstd", progress=False)
    state = saved_state(tmp_path / "ds")
    assert state["fingerprint"]["data"]["x"].startswith("sums-blake2b:")
    from_numpy(tmp_path / "ds", values(2), codec="zstd", overwrite=True, progress=False)
    with DenseDataset(tmp_path / "ds") as ds, DataLoader({"x": ds}, batch_size=32) as loader:
        with pytest.raises(StateMismatchError, match="data: saved"):
            loader.load_state_dict(state)
        assert loader.step == 0  # nothing changed


def test_one_changed_record_is_refused(tmp_path: Path) -> None:
    data = values(1)
    from_numpy(tmp_path / "ds", data, codec="raw", progress=False)
    state = saved_state(tmp_path / "ds")
    changed = data.copy()
    changed[123, 4] += 1
    from_numpy(tmp_path / "ds", changed, codec="raw", overwrite=True, progress=False)
    with pytest.raises(StateMismatchError, match="data: saved"):
        resume(tmp_path / "ds", state)


def test_reopened_read_only_copied_and_resharded_data_is_accepted(tmp_path: Path) -> None:
    data = values(3)
    from_numpy(tmp_path / "ds", data, codec="zstd", progress=False)
    state = saved_state(tmp_path / "ds")
    want = expected_next(tmp_path / "ds")
    np.testing.assert_array_equal(resume(tmp_path / "ds", state), want)
    np.testing.assert_array_equal(resume(tmp_path / "ds", state, readonly=True), want)
    subprocess.run(["cp", "-a", str(tmp_path / "ds"), str(tmp_path / "copy")], check=True)
    np.testing.assert_array_equal(resume(tmp_path / "copy", state), want)
    # The same records written again, in shards: the same content, the same identity.
    from_numpy(tmp_path / "sharded", data, codec="zstd", shard_records=150, workers=2,
               progress=False)
    with DenseDataset(tmp_path / "sharded") as ds:
        assert ds.sharded
    np.testing.assert_array_equal(resume(tmp_path / "sharded", state), want)


def test_an_append_keeps_the_records_identity_but_the_length_refuses_the_state(
    tmp_path: Path,
) -> None:
    """The loader samples from the length it was made with: a state saved before an append
    names that length, and a loader over the grown dataset samples other indices."""
    from_numpy(tmp_path / "ds", values(4), codec="zstd", progress=False)
    with DenseDataset(tmp_path / "ds") as ds:
        before = ds.content_identity()
    state = saved_state(tmp_path / "ds")
    with DenseDataset(tmp_path / "ds") as ds:
        ds.append(values(5)[:10])
        assert ds.content_identity(COUNT) == before  # the first records are unchanged
        assert ds.content_identity() != before
        with DataLoader({"x": ds}, batch_size=32) as loader:
            with pytest.raises(StateMismatchError, match=f"lengths: saved .*{COUNT}.*, now .*{COUNT + 10}"):
                loader.load_state_dict(state)


def test_a_delete_changes_the_identity(tmp_path: Path) -> None:
    from_numpy(tmp_path / "ds", values(6), codec="raw", progress=False)
    with DenseDataset(tmp_path / "ds") as ds:
        before = ds.content_identity(COUNT - 1)
        ds.delete(5)  # swap-last: record 5 is now the old last one
        assert len(ds) == COUNT - 1 and ds.content_identity() != before


def test_a_state_saved_before_identities_still_loads(tmp_path: Path) -> None:
    data = values(8)
    from_numpy(tmp_path / "ds", data, codec="zstd", progress=False)
    state = saved_state(tmp_path / "ds")
    del state["fingerprint"]["data"]  # what an earlier loaderx saved
    np.testing.assert_array_equal(resume(tmp_path / "ds", state), expected_next(tmp_path / "ds"))


def test_the_mixture_refuses_a_rewritten_source(tmp_path: Path) -> None:
    for name, seed in (("a", 10), ("b", 11)):
        from_numpy(tmp_path / name, values(seed), codec="zstd", progress=False)

    def state_of_mixture() -> dict[str, Any]:
        with DenseDataset(tmp_path / "a") as a, DenseDataset(tmp_path / "b") as b:
            with MixtureLoader([{"x": a}, {"x": b}], [1.0, 1.0], batch_size=16) as loader:
                next(loader)
                return loader.state_dict()

    state = state_of_mixture()
    assert state == {**state_of_mixture(), "step": state["step"]}
    from_numpy(tmp_path / "b", values(12), codec="zstd", overwrite=True, progress=False)
    with DenseDataset(tmp_path / "a") as a, DenseDataset(tmp_path / "b") as b:
        with MixtureLoader([{"x": a}, {"x": b}], [1.0, 1.0], batch_size=16) as loader:
            with pytest.raises(StateMismatchError, match="data: saved"):
                loader.load_state_dict(state)


def test_a_recode_is_other_data_only_when_it_changes_the_stored_bytes(tmp_path: Path) -> None:
    """The identity digests each record's checksum of its stored bytes and codec byte. Records
    zstd shrinks are other bytes once recoded, and the state is refused; records it cannot
    shrink are stored as they are under either codec, so the recoded dataset holds the very
    same bytes and the state loads (docs/loading.md used to say every recode was refused)."""
    from loaderx.converter import recode

    compressible = np.repeat(np.arange(COUNT, dtype=np.int64)[:, None], 64, axis=1)
    from_numpy(tmp_path / "big", compressible, codec="zstd", progress=False)
    state = saved_state(tmp_path / "big")
    recode(tmp_path / "big", tmp_path / "big-raw", codec="raw")
    with pytest.raises(StateMismatchError, match="data: saved"):
        resume(tmp_path / "big-raw", state)

    from_numpy(tmp_path / "small", values(1), codec="zstd", progress=False)
    state = saved_state(tmp_path / "small")
    recode(tmp_path / "small", tmp_path / "small-raw", codec="raw")
    np.testing.assert_array_equal(resume(tmp_path / "small-raw", state),
                                  expected_next(tmp_path / "small"))
