"""Tests for loaderx.mixture: the closed forms, per-batch counts, exact resume, shards, starvation."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from loaderx.converter import from_numpy
from loaderx.dataset import DenseDataset
from loaderx.errors import StateMismatchError
from loaderx.mixture import MixtureLoader, MixtureSampler, shares
from loaderx._loading.mixture_sampler import (  # private: the slot arithmetic, checked by brute force
    SLOTS,
    _ROTATION,
    _floor_sum,
)

LENGTHS = (300, 70, 11)
# Record i of source s holds s * 1000 + i in every stream, so a row tells where it came from.
OFFSET = 1000


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[dict[str, DenseDataset]]]:
    base = tmp_path_factory.mktemp("mixture")
    made = []
    for s, length in enumerate(LENGTHS):
        values = s * OFFSET + np.arange(length, dtype=np.int64)
        from_numpy(base / f"id{s}", values, codec="raw")
        from_numpy(base / f"x{s}", np.repeat(values[:, None], 3, axis=1).astype(np.int32))
        made.append({"id": DenseDataset(base / f"id{s}"), "x": DenseDataset(base / f"x{s}")})
    yield made
    for source in made:
        for dataset in source.values():
            dataset.close()


def test_floor_sum_matches_the_sum() -> None:
    draw = random.Random(5)
    for _ in range(500):
        n, m, a, b = draw.randrange(200), draw.randrange(1, 60), draw.randrange(120), draw.randrange(120)
        assert _floor_sum(n, m, a, b) == sum((a * i + b) // m for i in range(n))
    assert _floor_sum(10**15, SLOTS, _ROTATION, 7) > 0  # big positions stay exact (Python ints)


def test_positions_before_have_a_closed_form() -> None:
    sampler = MixtureSampler(list(LENGTHS), [0.5, 0.3, 0.2], 16, seed=9)
    positions = np.arange(20_000)
    slots = (positions * _ROTATION + sampler._offset) % SLOTS
    owner = np.searchsorted(sampler._bounds, slots, side="right") - 1
    for p in (0, 1, 15, 16, 999, 12_345, 19_999):
        for source in range(3):
            assert sampler._before(p, source) == int((owner[:p] == source).sum())


def test_shares_are_exact_and_never_zero() -> None:
    assert shares([1, 1]) == [SLOTS // 2, SLOTS // 2]
    tiny = shares([1.0, 1e-12, 1e-12])
    assert sum(tiny) == SLOTS and tiny[1] == tiny[2] == 1
    with pytest.raises(ValueError, match="weights\\[1\\] is 0"):
        shares([1, 0])
    with pytest.raises(ValueError, match="finite and > 0"):
        shares([1, float("nan")])


def test_weights_whose_sum_overflows_still_fill_the_slots() -> None:
    # 1e308 + 1e308 is inf in floats: every quota was 0, the shares summed to 4, not 2^24, and
    # batch() failed in NumPy. Such weights are finite, so they mean what 1:1 means.
    assert shares([1e308, 1e308]) == shares([1, 1])
    assert sum(shares([1.7e308, 1e308, 5e-324])) == SLOTS
    sampler = MixtureSampler([10, 10], [1e308, 1e308], 8, seed=1)
    assert np.array_equal(sampler.batch(3)[0], MixtureSampler([10, 10], [1, 1], 8, seed=1).batch(3)[0])


def test_a_weight_too_large_for_a_float_is_a_value_error() -> None:
    # 10**400 is a finite int, but float() of it raised a bare OverflowError.
    too_large = "weights\\[0\\] \\(int\\) is too large for a float; weights must be finite, > 0 and at most"
    with pytest.raises(ValueError, match=too_large):
        shares([10**400, 1])
    with pytest.raises(ValueError, match=too_large):
        MixtureSampler([10, 10], [10**400, 1], 8)
    assert shares([10**300, 10**300]) == shares([1, 1])  # ints a float holds work as before


def test_weights_must_be_numbers(sources: list[dict[str, DenseDataset]]) -> None:
    # float() took "2", b"2" and True, so weights=["1", "2"] mixed 1:2 without a word.
    for bad, kind in (("2", "str"), (b"2", "bytes"), (True, "bool"), (np.True_, "bool"), (None, "NoneType")):
        with pytest.raises(TypeError, match=f"^weights\\[1\\] must be a number, not {kind}$"):
            shares([1, bad])  # type: ignore[list-item]
        with pytest.raises(TypeError, match=f"^weights\\[1\\] must be a number, not {kind}$"):
            MixtureSampler([10, 10], [1, bad], 8)  # type: ignore[list-item]
    with pytest.raises(TypeError, match="^weights\\[0\\] must be a number, not str$"):
        MixtureLoader(sources, ["1", "2", "3"], 8)  # type: ignore[list-item]
    numbers = [np.float32(0.5), np.int64(3), np.array(1.5)]  # NumPy numbers still work
    assert shares(numbers) == shares([0.5, 3, 1.5])  # type: ignore[arg-type]


def test_weights_given_as_text_or_bytes_are_refused(sources: list[dict[str, DenseDataset]]) -> None:
    # b"\x03\x01" is a sequence of ints, so weights=b"..." mixed 3:1 without a word although a
    # bytes weight is refused; a str of digits only failed on its first character.
    for bad, kind in ((b"\x03\x01", "bytes"), (bytearray(b"\x03\x01"), "bytearray"),
                      ("31", "str")):
        message = f"^weights must be a sequence of numbers, one per source, not {kind}$"
        with pytest.raises(TypeError, match=message):
            shares(bad)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=message):
            MixtureSampler([10, 10], bad, 8)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="^weights must be a sequence of numbers, one per "
                                        "source, not bytes$"):
        MixtureLoader(sources[:2], b"\x03\x01", 8)  # bytes is a Sequence[int]: mypy takes it


def test_per_batch_counts_follow_the_weights() -> None:
    """Counts are deterministic, not sampled: each batch is within 3 rows of G * w_i, and the
    running total within 8 rows of its share, for 40 random mixtures (fixed seed).

    For comparison, a multinomial draw (what sampling each row independently gives) would
    deviate by sqrt(G w (1 - w)) per batch, 8 rows for G = 256 and w = 0.5, and its running
    total would drift as the square root of the step count.
    """
    rng = np.random.default_rng(20261130)
    for _ in range(40):
        count = int(rng.integers(2, 7))
        weights = rng.dirichlet(np.full(count, 0.7))
        batch = int(rng.choice([8, 32, 256, 1000]))
        sampler = MixtureSampler([1000] * count, list(weights), batch, seed=int(rng.integers(2**63)))
        quota = batch * np.array(sampler.shares) / SLOTS
        assert np.allclose(quota, batch * weights, atol=batch * count / SLOTS)
        counts = np.array([sampler.counts(k) for k in range(1500)])
        assert (counts.sum(axis=1) == batch).all()
        assert np.abs(counts - quota).max() <= 3.0
        assert np.abs(np.cumsum(counts - quota, axis=0)).max() <= 8.0
        sources, _ = sampler.batch(77)
        assert np.array_equal(np.bincount(sources, minlength=count), counts[77])


def _worst_deviation(batch: int) -> float:
    """The largest |count - batch * share / SLOTS| of any source in any batch of `batch` rows.

    A batch's slots are {A * j + c : j < batch} mod SLOTS, a rotation of those of step 0, and a
    source is an interval of slots: over all steps, seeds and weights the worst count is that of
    the worst circular interval over the slots of step 0.
    """
    slots = np.sort(np.arange(batch, dtype=np.int64) * _ROTATION % SLOTS)
    rank = np.arange(batch)
    after = rank + 1 - batch * slots / SLOTS  # excess of [0, slot] over its share
    before = rank - batch * slots / SLOTS  # excess of [0, slot)
    return float(max(after.max(), 0.0) - min(before.min(), 0.0))


def test_the_per_batch_bound_grows_with_the_log_of_the_batch() -> None:
    # The README's bound: 3 rows up to 168, 2 + log2(G) / 2 beyond. It once said 3 rows for
    # every batch size, which a batch of 256 rows already exceeds.
    for batch in range(1, 169):
        assert _worst_deviation(batch) <= 3.0
    for batch in (169, 256, 1000, 4096, 65_536, 10**6, 2**22 + 1):
        assert _worst_deviation(batch) <= 2.0 + math.log2(batch) / 2
    assert _worst_deviation(256) > 3.0
    # A batch that shows it: 126 rows of source 0 where 256 * w0 is 122.95.
    w0 = 8057472 / SLOTS
    sampler = MixtureSampler([1000, 1000], [w0, 1 - w0], 256, seed=485)
    assert sampler.counts(20145).tolist() == [126, 130]


def test_no_source_is_starved() -> None:
    # Source 2 has a third of a row per batch: it comes in about a third of the batches, never
    # more than 5 apart (the rotation's gaps take at most three lengths), and each source's
    # cycle visits all of its records once.
    sampler = MixtureSampler(list(LENGTHS), [0.96, 0.03, 0.01], 32, seed=4)
    seen: dict[int, list[int]] = {0: [], 1: [], 2: []}
    steps_with_2 = []
    for step in range(400):
        sources, indices = sampler.batch(step)
        for source in range(3):
            seen[source].extend(indices[sources == source].tolist())
        if (sources == 2).any():
            steps_with_2.append(step)
    assert max(np.diff([0, *steps_with_2])) <= 5
    assert abs(len(steps_with_2) - 400 * 32 * sampler.shares[2] / SLOTS) <= 3
    for source, length in enumerate(LENGTHS):
        order = seen[source]
        assert len(order) >= length
        for cycle in range(len(order) // length):
            assert sorted(order[cycle * length : (cycle + 1) * length]) == list(range(length))


def test_batches_are_pure_and_resume_exactly(sources: list[dict[str, DenseDataset]]) -> None:
    weights = [0.5, 0.3, 0.2]
    with MixtureLoader(sources, weights, batch_size=24, seed=7, source_key="source") as loader:
        batches = [next(loader) for _ in range(40)]
    for batch in batches:
        ids = batch["id"]
        assert np.array_equal(ids // OFFSET, batch["source"])
        assert np.array_equal(batch["x"], np.repeat(ids[:, None], 3, axis=1))
    for start in (0, 1, 13, 39):
        with MixtureLoader(sources, weights, 24, seed=7, start_step=start, workers=1) as resumed:
            assert np.array_equal(next(resumed)["id"], batches[start]["id"])
    with MixtureLoader(sources, weights, 24, seed=7, start_step=25) as loader:
        state = json.loads(json.dumps(loader.state_dict()))
    with MixtureLoader(sources, weights, 24, seed=0) as loader:
        loader.load_state_dict(state)
        for step in range(25, 40):
            assert np.array_equal(next(loader)["id"], batches[step]["id"])
    far = 10**12  # any step, without replaying the ones before it
    sampler = MixtureSampler(list(LENGTHS), weights, 24, seed=7)
    assert np.array_equal(sampler.batch(far)[1], sampler.batch(far)[1])


def test_numpy_integers_are_taken_and_a_refused_state_changes_nothing(
    sources: list[dict[str, DenseDataset]],
) -> None:
    """prefetch, workers and start_step take NumPy integers as DataLoader's do, and bad ones
    are named; a state whose seed is past 64 bits is refused with the loader still running."""
    weights = [0.5, 0.3, 0.2]
    with MixtureLoader(sources, weights, 24, seed=7) as reference:
        expected = [next(reference)["id"].copy() for _ in range(6)]
    with MixtureLoader(sources, weights, 24, seed=7, start_step=np.int64(2),
                       prefetch=np.int32(3), workers=np.int64(1)) as loader:
        assert (loader.prefetch, loader.workers) == (3, 1)
        assert np.array_equal(next(loader)["id"], expected[2])
        state = loader.state_dict()
        with pytest.raises(ValueError, match=r"seed must be an int in \[0, 2\*\*64\)"):
            loader.load_state_dict({**state, "seed": 1 << 64})
        assert not loader.closed and loader.step == 3
        assert [np.array_equal(next(loader)["id"], want) for want in expected[3:]] == [True] * 3
    with pytest.raises(ValueError, match="prefetch must be in 1.."):
        MixtureLoader(sources, weights, 24, prefetch=0)
    with pytest.raises(TypeError, match="start_step must be an int, got float"):
        MixtureLoader(sources, weights, 24, start_step=1.5)  # type: ignore[arg-type]


def test_the_last_step_keeps_positions_in_int64(sources: list[dict[str, DenseDataset]]) -> None:
    """Record positions (step * global batch) are int64: the step that would reach 2**63 is
    refused clearly by next(), which does not move the step, and by load_state_dict, which
    leaves the loader running."""
    weights = [0.5, 0.3, 0.2]
    end = (1 << 63) // 24
    with MixtureLoader(sources, weights, 12, shard=(1, 2), start_step=end - 1) as loader:
        assert next(loader)["id"].shape == (12,)
        for _ in range(2):
            with pytest.raises(ValueError, match=rf"past its last step, {end - 1} .*below 2\*\*63"):
                next(loader)
            assert loader.step == end
        state = loader.state_dict()
    with MixtureLoader(sources, weights, 12, shard=(0, 2)) as other:
        with pytest.raises(ValueError, match=rf"step must be in \[0, {end}\]"):
            other.load_state_dict({**state, "step": end + 1})
        assert not other.closed and other.step == 0
        other.load_state_dict(state)
        assert other.step == end
    with pytest.raises(ValueError, match=rf"step must be < {end} "):
        MixtureSampler(LENGTHS, weights, 24).batch(end)


def test_shards_split_the_global_batch(sources: list[dict[str, DenseDataset]]) -> None:
    weights = [0.2, 0.5, 0.3]

    def global_rows(count: int, step: int) -> list[int]:
        rows: list[int] = []
        for index in range(count):
            sampler = MixtureSampler(list(LENGTHS), weights, 24 // count, 3, (index, count))
            sources_, indices = sampler.batch(step)
            rows.extend((sources_ * OFFSET + indices).tolist())
        return sorted(rows)

    for step in (0, 5, 1234):
        single = global_rows(1, step)
        assert global_rows(2, step) == single
        assert global_rows(3, step) == single
    with MixtureLoader(sources, weights, 12, seed=3, shard=(1, 2)) as host:
        sampler = MixtureSampler(list(LENGTHS), weights, 12, 3, (1, 2))
        sources_, indices = sampler.batch(0)
        assert np.array_equal(next(host)["id"], sources_ * OFFSET + indices)


def test_mixture_errors(sources: list[dict[str, DenseDataset]]) -> None:
    with MixtureLoader(sources, [1, 1, 1], 8) as loader:
        state = loader.state_dict()
        with pytest.raises(TypeError, match="endless.*steps_per_epoch"):
            len(loader)
        assert loader.steps_per_epoch == sum(LENGTHS) // 8
    with MixtureLoader(sources, [2, 1, 1], 8) as other:
        with pytest.raises(StateMismatchError, match="shares"):
            other.load_state_dict(state)
    with pytest.raises(ValueError, match="3 sources but 2 weights"):
        MixtureLoader(sources, [1, 1], 8)
    with pytest.raises(ValueError, match="must be a dict with the streams"):
        MixtureLoader([sources[0], {"id": sources[1]["id"]}], [1, 1], 8)
    with pytest.raises(ValueError, match="holds int32 \\(3,\\), source 0 holds int64"):
        MixtureLoader([sources[0], {"id": sources[1]["x"], "x": sources[1]["x"]}], [1, 1], 8)
    with pytest.raises(TypeError, match="non-empty list"):
        MixtureLoader(sources[0], [1], 8)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="also a stream name"):
        MixtureLoader(sources, [1, 1, 1], 8, source_key="id")


@pytest.mark.parametrize("value", [1, b"source", ["source"], np.int64(0)])
def test_a_source_key_that_is_no_str_is_refused(
    sources: list[dict[str, DenseDataset]], value: object
) -> None:
    """source_key=1 was taken and became the batch's key 1 (None means "no source key")."""
    with pytest.raises(TypeError) as refused:
        MixtureLoader(sources, [1, 1, 1], 8, source_key=value)  # type: ignore[arg-type]
    assert str(refused.value) == f"source_key must be a str or None, got {value!r}"


def test_a_source_key_given_as_a_numpy_str_is_taken(
    sources: list[dict[str, DenseDataset]],
) -> None:
    with MixtureLoader(sources, [1, 1, 1], 8, source_key=np.str_("source")) as loader:
        assert loader.source_key == "source" and type(loader.source_key) is str
        assert set(next(loader)) == {"id", "x", "source"}
    with MixtureLoader(sources, [1, 1, 1], 8, source_key=None) as loader:
        assert loader.source_key is None and set(next(loader)) == {"id", "x"}


def test_numpy_integers_work_as_in_dataloader(sources: list[dict[str, DenseDataset]]) -> None:
    weights = [0.5, 0.3, 0.2]
    with MixtureLoader(sources, weights, batch_size=12, seed=7, shard=(1, 2)) as plain:
        want = [next(plain)["id"] for _ in range(5)]
    with MixtureLoader(
        sources, weights, batch_size=np.int64(12), seed=np.uint64(7),
        shard=(np.int64(1), np.int32(2)),
    ) as numpy_ints:
        assert numpy_ints.batch_size == 12 and type(numpy_ints.batch_size) is int
        for expected in want:
            assert np.array_equal(next(numpy_ints)["id"], expected)
    with pytest.raises(TypeError, match="batch_size must be an integer, not float"):
        MixtureLoader(sources, weights, batch_size=12.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="seed must be an integer, not bool"):
        MixtureLoader(sources, weights, seed=True)


def test_lengths_may_be_numpy_integers() -> None:
    # NumPy lengths (from an array) were refused as "source 0 has np.int64(300) records; each needs >= 1".
    plain = MixtureSampler(list(LENGTHS), [0.5, 0.3, 0.2], 16, seed=9)
    numpy_lengths = MixtureSampler([np.int64(n) for n in LENGTHS], [0.5, 0.3, 0.2], 16, seed=9)
    assert numpy_lengths.lengths == list(LENGTHS)
    assert all(type(length) is int for length in numpy_lengths.lengths)
    for step in (0, 7, 1234):
        for got, want in zip(numpy_lengths.batch(step), plain.batch(step)):
            assert np.array_equal(got, want)
    with pytest.raises(TypeError, match="source 1's length must be an integer, not float"):
        MixtureSampler([300, 70.0], [1, 1], 16)  # type: ignore[list-item]
    with pytest.raises(ValueError, match="source 1 has 0 records; each needs >= 1"):
        MixtureSampler([300, 0], [1, 1], 16)
    with pytest.raises(ValueError, match="source 0 has 9223372036854775809 records"):
        MixtureSampler([2**63 + 1], [1], 16)


def test_a_source_of_2_pow_63_records() -> None:
    # The largest length, as for the Sampler: ordinals // 2**63 overflowed int64 (OverflowError).
    sampler = MixtureSampler([2**63, 5], [0.9, 0.1], 64, seed=2**64 - 1)
    for step in (0, 12_345, sampler.step_end - 1):
        sources, indices = sampler.batch(step)
        big = indices[sources == 0]
        assert len(big) > 50 and (big >= 0).all() and len(set(big.tolist())) == len(big)
        assert ((indices[sources == 1] >= 0) & (indices[sources == 1] < 5)).all()


def test_bad_steps_raise_what_the_sampler_raises() -> None:
    # A float or bool step raised ValueError("step must be an int >= 0, got 2.0"), where the
    # Sampler and DataLoader.indices raise TypeError naming the type.
    sampler = MixtureSampler(list(LENGTHS), [0.5, 0.3, 0.2], 16, seed=9)
    with pytest.raises(TypeError, match="step must be an integer, not float"):
        sampler.batch(2.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="step must be an integer, not bool"):
        sampler.counts(True)
    with pytest.raises(ValueError, match="step must be >= 0, got -1"):
        sampler.batch(-1)
    with pytest.raises(ValueError, match="step must be < 576460752303423488"):
        sampler.batch(2**59)
    for got, want in zip(sampler.batch(np.uint64(5)), sampler.batch(5)):  # type: ignore[arg-type]
        assert np.array_equal(got, want)


def test_a_transform_must_return_a_batch_dict(sources: list[dict[str, DenseDataset]]) -> None:
    with MixtureLoader(sources, [1, 1, 1], 8, transform=lambda b: 5) as loader:  # type: ignore[arg-type, return-value]
        with pytest.raises(TypeError, match="must return a batch dict, it returned int"):
            next(loader)


def test_a_state_names_the_lengths_sampled_not_the_lengths_now(tmp_path: Path) -> None:
    first = DenseDataset(tmp_path / "a", dtype=np.int64, item_shape=())
    first.append(np.arange(500, dtype=np.int64))
    second = DenseDataset(tmp_path / "b", dtype=np.int64, item_shape=())
    second.append(np.arange(10_000, 10_500, dtype=np.int64))
    sources_ = [{"y": first}, {"y": second}]
    with MixtureLoader(sources_, [0.5, 0.5], batch_size=64, seed=1) as loader:
        next(loader)
        first.append(np.arange(500, 700, dtype=np.int64))
        state = loader.state_dict()
    assert state["fingerprint"]["lengths"] == [{"y": 500}, {"y": 500}]
    with MixtureLoader(sources_, [0.5, 0.5], batch_size=64) as grown:
        with pytest.raises(StateMismatchError, match="lengths: saved .*500.*, now .*700"):
            grown.load_state_dict(state)
    first.close()
    second.close()
