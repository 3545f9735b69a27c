"""The loader's arguments: streams of one length, a ragged stream packed, bad and wrongly typed
arguments refused by name, NumPy integers taken for ints, empty streams refused, the defaults,
the spec's collate example, steps_per_epoch and len(), and a misspelt keyword."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loaderx.converter import from_numpy
from loaderx.dataloader import DataLoader
from loaderx.mixture import MixtureLoader
from loaderx._loading.prefetch import default_workers
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.sampler import Sampler

# Fixtures are found by name in the module: imported, pytest uses them.
from loader_cases import RECORDS, check_aligned, folder, no_thread_leaks, streams

pytestmark = pytest.mark.compiled


def test_streams_must_share_one_length(folder: Path) -> None:
    with DenseDataset(folder / "data") as data, DenseDataset(folder / "short") as short:
        with pytest.raises(ValueError, match=r"data=1000.*label=999"):
            DataLoader({"data": data, "label": short})


def test_a_ragged_stream_is_packed(tmp_path: Path) -> None:
    """The rest of ragged streams is tested in test_ragged_batches.py."""
    with RaggedDataset(tmp_path / "tokens", dtype=np.int32, item_shape=()) as tokens:
        tokens.append([np.arange(3, dtype=np.int32), np.arange(5, dtype=np.int32)])
        with DataLoader({"tokens": tokens}, batch_size=2, mode="sequential") as loader:
            batch = next(loader)
        assert batch["tokens"].tolist() == [0, 1, 2, 0, 1, 2, 3, 4]
        assert batch["tokens.cu_seqlens"].tolist() == [0, 3, 8]


def test_bad_arguments_are_refused(streams: dict[str, DenseDataset]) -> None:
    with pytest.raises(ValueError, match="at least one stream"):
        DataLoader({})
    with pytest.raises(TypeError, match="DenseDataset"):
        DataLoader({"x": np.arange(4)})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="prefetch"):
        DataLoader(streams, prefetch=0)
    with pytest.raises(ValueError, match="workers"):
        DataLoader(streams, workers=0)
    with pytest.raises(TypeError, match="transform"):
        DataLoader(streams, transform=42)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        DataLoader(streams, mode="shuffled")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="^streams must be a dict of name -> DenseDataset or RaggedDataset, not list$"):
        DataLoader(list(streams.values()))  # type: ignore[arg-type]
    dataset = next(iter(streams.values()))
    with pytest.raises(TypeError, match="^stream names must be str, got 0$"):
        DataLoader({0: dataset})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="^prefetch must be an int, not float$"):
        DataLoader(streams, prefetch=2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="^workers must be in 1..1024, got 1025$"):
        DataLoader(streams, workers=1025)


def test_numpy_integers_are_taken_wherever_an_int_is(streams: dict[str, DenseDataset]) -> None:
    """Configurations often carry NumPy integers (a seed drawn with Generator.integers, sizes
    computed with NumPy). The compiled module takes them as the interpreted one does."""
    with DataLoader(streams, batch_size=8, seed=7, start_step=3, prefetch=2, workers=1, shard=(1, 2)) as plain:
        want = [next(plain) for _ in range(3)]
        want_indices = plain.indices(11)
    with DataLoader(
        streams, batch_size=np.int64(8), seed=np.uint64(7), start_step=np.int32(3),
        prefetch=np.int64(2), workers=np.int8(1), shard=[np.int64(1), np.uint8(2)],
    ) as loader:
        got = [next(loader) for _ in range(3)]
        np.testing.assert_array_equal(loader.indices(np.int64(11)), want_indices)
        settings = (loader.batch_size, loader.seed, loader.prefetch, loader.workers, loader.shard)
        assert settings == (8, 7, 2, 1, (1, 2))
        assert all(type(value) is int for value in settings[:4]) and type(loader.shard) is tuple
        assert loader.state_dict()["seed"] == 7 and type(loader.state_dict()["seed"]) is int
    for batch, expected in zip(got, want):
        for name in expected:
            np.testing.assert_array_equal(batch[name], expected[name])


@pytest.mark.parametrize(
    ("keywords", "error", "message"),
    [
        ({"batch_size": 8.0}, TypeError, "batch_size must be an integer, not float"),
        ({"seed": "7"}, TypeError, "seed must be an integer, not str"),
        ({"start_step": 1.0}, TypeError, "start_step must be an int, got float"),
        ({"start_step": -1}, ValueError, "start_step must be >= 0, got -1"),
        ({"prefetch": 2.0}, TypeError, "prefetch must be an int, not float"),
        ({"workers": np.float64(1)}, TypeError, "workers must be an int, not float64"),
        ({"shard": 3}, TypeError, r"shard must be None or a pair \(index, count\), got 3"),
        ({"shard": (0, 2.0)}, TypeError, "shard count must be an integer, not float"),
    ],
)
def test_wrongly_typed_numbers_are_refused_by_name(
    streams: dict[str, DenseDataset], keywords: dict[str, object], error: type[Exception], message: str
) -> None:
    """The same message interpreted and compiled (mypyc's own check of an int parameter names
    neither the parameter nor what it takes)."""
    with pytest.raises(error, match=f"^{message}$"):
        DataLoader(streams, **keywords)  # type: ignore[arg-type]
    with DataLoader(streams, batch_size=4) as loader:
        with pytest.raises(TypeError, match="^step must be an integer, not float$"):
            loader.indices(1.5)  # type: ignore[arg-type]


def test_empty_streams_are_refused(tmp_path: Path) -> None:
    with DenseDataset(tmp_path / "empty", dtype=np.int64, codec="raw") as empty:
        with pytest.raises(ValueError, match="^the streams are empty: there is nothing to load$"):
            DataLoader({"x": empty})


def test_defaults(streams: dict[str, DenseDataset]) -> None:
    with DataLoader(streams) as loader:
        assert loader.batch_size == 256
        assert loader.mode == "cyclic"
        assert loader.seed == 0
        assert loader.step == 0
        assert loader.workers == default_workers(consumer_helps=True) <= 4
        assert loader.length == RECORDS
        batch = next(loader)
        check_aligned(batch, Sampler(RECORDS, 256).batch(0))


# The "Records" section's loader example, exactly as the specification prints it. It names two
# datasets it does not build (dense_tokens, labelset); the test provides them and runs the rest.
SPEC_COLLATE_EXAMPLE = """\
def collate(batch):
    return {'input_ids': batch['tokens'], 'label': batch['label']}

loader = DataLoader({'tokens': dense_tokens, 'label': labelset}, batch_size=32,
                    transform=collate)
"""


def test_spec_records_collate_example(tmp_path: Path) -> None:
    tokens = np.arange(100 * 16, dtype=np.int32).reshape(100, 16)
    labels = np.arange(100, dtype=np.int64)
    from_numpy(tmp_path / "tokens", tokens)
    from_numpy(tmp_path / "label", labels, codec="raw")
    namespace: dict[str, Any] = {
        "DataLoader": DataLoader,
        "dense_tokens": DenseDataset(tmp_path / "tokens"),
        "labelset": DenseDataset(tmp_path / "label"),
    }
    exec(compile(SPEC_COLLATE_EXAMPLE, "spec Records example", "exec"), namespace)
    loader: DataLoader = namespace["loader"]
    try:
        batch = next(iter(loader))
    finally:
        loader.close()
    assert sorted(batch) == ["input_ids", "label"]
    assert batch["input_ids"].shape == (32, 16)
    # Every row lines up with its label: row i of the store is tokens[i].
    assert np.array_equal(batch["input_ids"], tokens[batch["label"]])


def test_steps_per_epoch_and_len(streams: dict[str, DenseDataset]) -> None:
    with DataLoader(streams, batch_size=64) as loader:
        assert loader.steps_per_epoch == RECORDS // 64
        with pytest.raises(TypeError, match=r"endless.*steps_per_epoch \(15 steps here\)"):
            len(loader)
        # One epoch of cyclic batches visits 15 * 64 distinct records.
        seen = np.concatenate([next(loader)["label"] for _ in range(loader.steps_per_epoch)])
        assert len(np.unique(seen)) == 15 * 64
    with DataLoader(streams, batch_size=10, shard=(1, 4), mode="iid") as loader:
        assert loader.steps_per_epoch == RECORDS // 40



@pytest.mark.parametrize("kind", ["DataLoader", "MixtureLoader"])
def test_a_loader_is_true_and_refuses_pickling_and_copies_by_name(
    streams: dict[str, DenseDataset], kind: str
) -> None:
    """bool() of an endless loader is True rather than len()'s refusal; pickle and copy
    refuse with what to do instead (before: a ctypes or weakref error from deep inside, and
    an interpreted copy.copy that shared the loader's threads)."""
    loader: DataLoader | MixtureLoader = (
        DataLoader(streams, batch_size=8, seed=2) if kind == "DataLoader"
        else MixtureLoader([streams, streams], weights=[0.5, 0.5], batch_size=8, seed=2))
    with loader:
        assert bool(loader) is True
        first = next(loader)
        refusal = rf"a loaderx {kind} cannot be pickled or copied.*state_dict\(\)"
        for attempt in (pickle.dumps, copy.copy, copy.deepcopy):
            with pytest.raises(TypeError, match=refusal):
                attempt(loader)
        assert loader.step == 1 and not loader.closed  # the refusals changed nothing
        again = (DataLoader(streams, batch_size=8, seed=2) if kind == "DataLoader"
                 else MixtureLoader([streams, streams], weights=[0.5, 0.5], batch_size=8,
                                    seed=2))
        with again:
            for key, value in next(again).items():
                np.testing.assert_array_equal(value, first[key])


@pytest.mark.parametrize(
    ("keyword", "hint"),
    [("num_workers", "use workers="), ("collate_fn", "use transform="),
     ("shuffle", "use mode="), ("drop_last", "endless"), ("batchsize", "use batch_size="),
     ("prefech", "use prefetch=")],
)
def test_a_wrong_keyword_names_the_right_one(
    streams: dict[str, DenseDataset], keyword: str, hint: str
) -> None:
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{keyword}'.*{hint}"):
        DataLoader(streams, **{keyword: 2})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unexpected keyword argument 'zzz'$"):
        DataLoader(streams, zzz=1)  # type: ignore[arg-type]


def test_an_extra_positional_argument_is_refused(streams: dict[str, DenseDataset]) -> None:
    """Twelve settings follow streams; a thirteenth used to be dropped without a word by the
    compiled loader (mypyc's argument parsing of a signature with **keywords and no *args),
    while the interpreted one raised."""
    arguments: list[Any] = [8, None, "iid", 1, 0, 2, 1, None, False, "thread", None, None]
    with DataLoader(streams, *arguments) as loader:
        assert (loader.batch_size, loader.mode, loader.seed, loader.prefetch) == (8, "iid", 1, 2)
    for extra in ([0], [0, "more"]):
        with pytest.raises(
            TypeError,
            match=rf"^DataLoader takes at most 13 positional arguments \(streams and 12 "
            rf"settings\), but {13 + len(extra)} were given; pass the settings by name$",
        ):
            DataLoader(streams, *arguments, *extra)
