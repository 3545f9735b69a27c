"""A sampler's and a loader's settings are read-only, in both builds (`compiled`).

They used to be plain attributes. Assigning one changed what Python believed and nothing else:
`sampler.batch_size = 2` made fill() accept a 2-element `out` that the native sampler, made
for the original batch size, wrote past; `loader.seed = 8` went into state_dict() while the
batches still came from the old seed, so a resume from that checkpoint read other batches."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset
from loaderx.mixture import MixtureLoader
from loaderx.sampler import Sampler

from loader_cases import folder, no_thread_leaks, streams

pytestmark = pytest.mark.compiled


def refuses_every_assignment(thing: object, names: tuple[str, ...]) -> None:
    """Each name reads as before after an assignment to it raised AttributeError."""
    for name in names:
        before = getattr(thing, name)
        for value in (7, None, "x"):
            with pytest.raises(AttributeError):
                setattr(thing, name, value)
        assert getattr(thing, name) == before, name


def test_a_samplers_settings_are_read_only() -> None:
    sampler = Sampler(1000, 8, mode="cyclic", seed=1, shard=(1, 2))
    want = sampler.batch(3).copy()
    refuses_every_assignment(sampler, (
        "length", "batch_size", "mode", "seed", "shard_index", "shard_count",
        "global_batch_size", "steps_per_cycle", "shard",
    ))
    assert (sampler.batch_size, sampler.seed, sampler.shard) == (8, 1, (1, 2))
    # A 2-element out is still refused, so nothing is written past it.
    guarded = np.full(10, -1, np.int64)
    with pytest.raises(ValueError, match=r"out must have shape \(8,\)"):
        sampler.fill(3, guarded[:2])
    assert (guarded == -1).all()
    sampler.fill(3, guarded[:8])
    np.testing.assert_array_equal(guarded[:8], want)
    assert (guarded[8:] == -1).all()


def test_a_loaders_settings_are_read_only(streams: dict[str, DenseDataset]) -> None:
    with DataLoader(streams, batch_size=4, seed=1) as loader:
        first = next(loader)
        refuses_every_assignment(loader, (
            "streams", "sampler", "batch_size", "mode", "seed", "shard", "prefetch",
            "workers", "reuse_buffers", "worker_type", "start_method",
        ))
        state = loader.state_dict()
        assert state["seed"] == 1
        second = next(loader)
    with DataLoader(streams, batch_size=4, seed=1) as again:
        np.testing.assert_array_equal(next(again)["label"], first["label"])
        again.load_state_dict(state)
        np.testing.assert_array_equal(next(again)["label"], second["label"])


def test_a_mixtures_settings_are_read_only(streams: dict[str, DenseDataset]) -> None:
    label: dict[str, Any] = {"label": streams["label"]}
    with MixtureLoader([label, label], weights=[1, 3], batch_size=4, seed=2) as mixture:
        want = mixture.make(5)["label"].copy()
        refuses_every_assignment(mixture, (
            "sources", "names", "sampler", "layouts", "transform", "source_key",
            "batch_size", "prefetch", "workers", "worker_type", "start_method", "seed",
        ))
        np.testing.assert_array_equal(mixture.make(5)["label"], want)
        assert mixture.batch_size == 4 and mixture.seed == 2
