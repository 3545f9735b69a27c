"""Every loader's load_state_dict checks the whole state first: a refused state (malformed,
unknown keys, other data) raises and changes nothing, so the loader goes on with exactly the
batches it would have given without the call (issue 40, point 3)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loaderx.converter import from_numpy
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset
from loaderx.errors import StateMismatchError
from loaderx.mixture import MixtureLoader


def _bad_states(good: dict[str, Any]) -> list[object]:
    """Malformed, unknown and mismatched variants of a good state."""
    fingerprint = dict(good["fingerprint"])
    other = {**fingerprint, "global_batch_size": fingerprint["global_batch_size"] + 1}
    not_a_string_key: dict[object, object] = {1: 2}
    not_a_string_key.update(good)
    return [
        None, 5, "state", [], {},
        {**good, "format": "torch"},
        {**good, "version": 99},
        {key: value for key, value in good.items() if key != "step"},
        {key: value for key, value in good.items() if key != "fingerprint"},
        {**good, "step": -1}, {**good, "step": 1.5}, {**good, "step": True}, {**good, "step": "3"},
        {**good, "seed": -1}, {**good, "seed": 2**64}, {**good, "seed": None},
        {**good, "fingerprint": None}, {**good, "fingerprint": []},
        {**good, "fingerprint": other},
        {**good, "fingerprint": {**fingerprint, "extra": 1}},
        {**good, "unknown": 1},
        {**good, "epoch": 0},
        not_a_string_key,
        {**good, "step": 2**64 + 1}, {**good, "seed": 1.0},
        {**good, "fingerprint": {k: v for k, v in fingerprint.items() if k != "mode"}},
        {**good, "fingerprint": {**fingerprint, "lengths": str(fingerprint["lengths"])}},
        {**good, "fingerprint": {**fingerprint, "mode": None}},
        {**good, "fingerprint": {**fingerprint, "global_batch_size": -8}},
    ]


@pytest.fixture
def dataset(tmp_path: Path) -> Iterator[DenseDataset]:
    data = np.arange(400 * 3, dtype=np.int32).reshape(400, 3)
    from_numpy(str(tmp_path / "ds"), data, codec="raw")
    with DenseDataset(str(tmp_path / "ds"), readonly=True) as ds:
        yield ds


def _check(
    make: Callable[[], Any], batch_of: Callable[[Any], np.ndarray], more: Sequence[object] = ()
) -> None:
    """For every bad state (and `more` of them): a fresh loader takes two steps, refuses the
    state, and then gives the same batches as a twin loader that was never asked."""
    reference = make()
    expected = [batch_of(next(reference)) for _ in range(6)]
    good = reference.state_dict()
    reference.close()
    for bad in [*_bad_states(good), *more]:
        loader = make()
        try:
            got = [batch_of(next(loader)) for _ in range(2)]
            with pytest.raises((TypeError, ValueError, StateMismatchError)):
                loader.load_state_dict(bad)
            got += [batch_of(next(loader)) for _ in range(4)]
            for want, have in zip(expected, got, strict=True):
                np.testing.assert_array_equal(have, want, err_msg=f"after refusing {bad!r}")
        finally:
            loader.close()


def _mixture_state(dataset: DenseDataset) -> dict[str, Any]:
    with MixtureLoader([{"x": dataset}, {"x": dataset}], [0.5, 0.5], batch_size=8) as other:
        return other.state_dict()


def _dataloader_state(dataset: DenseDataset) -> dict[str, Any]:
    with DataLoader({"x": dataset}, batch_size=8) as other:
        return other.state_dict()


def test_dataloader_refuses_and_changes_nothing(dataset: DenseDataset) -> None:
    _check(lambda: DataLoader({"x": dataset}, batch_size=8, seed=3, prefetch=2),
           lambda batch: batch["x"].copy(), more=[_mixture_state(dataset)])


def test_dataloader_with_worker_processes_refuses_and_changes_nothing(
    dataset: DenseDataset,
) -> None:
    """The processes keep running at their steps: a refused state restarts none of them."""
    _check(lambda: DataLoader({"x": dataset}, batch_size=8, seed=3, prefetch=2,
                              worker_type="process", workers=1),
           lambda batch: batch["x"].copy(), more=[_mixture_state(dataset)])


def test_mixture_loader_refuses_and_changes_nothing(dataset: DenseDataset) -> None:
    def make() -> MixtureLoader:
        return MixtureLoader([{"x": dataset}, {"x": dataset}], [0.5, 0.5], batch_size=8, seed=3,
                             prefetch=2)

    with make() as loader:
        past_end = {**loader.state_dict(), "step": loader.sampler.step_end + 1}
    _check(make, lambda batch: batch["x"].copy(), more=[_dataloader_state(dataset), past_end])


def test_torch_loader_refuses_and_changes_nothing(dataset: DenseDataset) -> None:
    from loaderx.torch import TorchLoader

    _check(lambda: TorchLoader(DataLoader({"x": dataset}, batch_size=8, seed=3, prefetch=2)),
           lambda batch: batch["x"].numpy().copy())


def test_device_prefetch_refuses_and_keeps_its_batches(dataset: DenseDataset) -> None:
    from loaderx.jax import DevicePrefetch

    _check(lambda: DevicePrefetch(DataLoader({"x": dataset}, batch_size=8, seed=3), size=3),
           lambda batch: np.asarray(batch["x"]).copy())


def test_a_good_state_still_loads_everywhere(dataset: DenseDataset) -> None:
    from loaderx.jax import DevicePrefetch

    with DataLoader({"x": dataset}, batch_size=8, seed=3) as source:
        expected = [next(source)["x"].copy() for _ in range(5)]
    loader = DataLoader({"x": dataset}, batch_size=8, seed=3)
    prefetch = DevicePrefetch(loader, size=3)
    next(prefetch)
    next(prefetch)
    state = prefetch.state_dict()
    assert state["step"] == 2
    next(prefetch)
    prefetch.load_state_dict(state)  # the queue's batches (from step 3 on) are dropped
    np.testing.assert_array_equal(np.asarray(next(prefetch)["x"]), expected[2])
    prefetch.close()
    loader.close()  # closing the prefetch leaves the loader open


def test_unknown_keys_are_named(dataset: DenseDataset) -> None:
    from loaderx.jax import DevicePrefetch
    from loaderx.torch import TorchLoader

    # DevicePrefetch leaves the loader it wraps open, so every inner loader is closed here too
    inner = DataLoader({"x": dataset}, batch_size=8)
    for make in (lambda: DataLoader({"x": dataset}, batch_size=8),
                 lambda: MixtureLoader([{"x": dataset}], [1.0], batch_size=8),
                 lambda: TorchLoader(DataLoader({"x": dataset}, batch_size=8)),
                 lambda: DevicePrefetch(inner)):
        loader = make()
        try:
            state = {**loader.state_dict(), "epoch": 0, "rng": None}
            with pytest.raises(ValueError, match=r"keys this loaderx does not know \(epoch, rng\)"):
                loader.load_state_dict(state)
        finally:
            loader.close()
    inner.close()
