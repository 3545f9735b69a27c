"""Tests of loaderx.sampler: purity, ranges, uniformity, coverage, sharding, golden sequences."""

from __future__ import annotations

import ctypes
import pickle
import threading
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loaderx._native import library as _native
from loaderx.sampler import MODES, Mode, Sampler

# Fixed expected batches, also pinned in zig/src/sampler/sampler_test.zig ("golden sequences"). If
# one of these changes, every user's stream of batches changed: that must be a deliberate decision.
GOLDEN: list[tuple[str, int, int, int, int, list[int]]] = [
    # (mode, length, batch_size, seed, step, expected)
    ("iid", 1000, 8, 42, 7, [79, 758, 460, 881, 70, 709, 739, 591]),
    ("cyclic", 97, 10, 7, 3, [45, 3, 42, 72, 51, 41, 1, 31, 69, 60]),
    (
        "cyclic",
        1_000_000,
        8,
        0,
        1_000_003,
        [163993, 315260, 696460, 968734, 888749, 77215, 680314, 244117],
    ),
    (
        "iid",
        3 << 61,
        6,
        1,
        0,
        [
            1658399760228717134,
            676640250342035171,
            2348999994038307415,
            1004984340555493791,
            704235113169947429,
            2094240559883420487,
        ],
    ),
    ("sequential", 10, 4, 0, 2, [8, 9, 0, 1]),
]


@pytest.mark.parametrize(("mode", "length", "batch_size", "seed", "step", "expected"), GOLDEN)
def test_golden_sequences(
    mode: Mode, length: int, batch_size: int, seed: int, step: int, expected: list[int]
) -> None:
    sampler = Sampler(length, batch_size, mode=mode, seed=seed)
    got = sampler.batch(step)
    assert got.dtype == np.int64
    assert got.tolist() == expected
    out = np.full(batch_size, -1, dtype=np.int64)
    sampler.fill(step, out)
    assert out.tolist() == expected


@pytest.mark.parametrize("mode", MODES)
def test_same_request_same_batch_and_seeds_differ(mode: Mode) -> None:
    a = Sampler(100_000, 64, mode=mode, seed=1)
    b = Sampler(100_000, 64, mode=mode, seed=1)
    for step in (0, 1, 17, 10**12, 2**64 - 1):
        assert np.array_equal(a.batch(step), b.batch(step))
        assert np.array_equal(a.batch(step), a.batch(step))
    if mode != "sequential":  # the sequential window does not depend on the seed
        c = Sampler(100_000, 64, mode=mode, seed=2)
        assert not np.array_equal(a.batch(5), c.batch(5))
        assert not np.array_equal(a.batch(5), a.batch(6))


@pytest.mark.parametrize("mode", MODES)
def test_batch_of_a_step_equals_that_step_of_an_iteration(mode: Mode) -> None:
    sampler = Sampler(1000, 32, mode=mode, seed=9)
    iterated = [batch for _, batch in zip(range(70), sampler)]  # crosses cycles (31 steps each)
    for step, batch in enumerate(iterated):
        assert np.array_equal(batch, sampler.batch(step))
    resumed = sampler.iter(start_step=40)
    for step in range(40, 70):
        assert np.array_equal(next(resumed), iterated[step])


def test_batches_are_new_arrays() -> None:
    sampler = Sampler(1000, 16, mode="iid")
    first = sampler.batch(0)
    second = sampler.batch(1)
    kept = first.copy()
    second[:] = -1
    assert np.array_equal(first, kept)
    assert first.flags.c_contiguous and first.flags.writeable and first.shape == (16,)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("length", [1, 2, 7, 1000, 2**40 + 3, 2**63])
def test_indices_are_in_range(mode: Mode, length: int) -> None:
    batch_size = min(length, 300)
    sampler = Sampler(length, batch_size, mode=mode, seed=4)
    for step in (0, 1, 2, 999, 2**63 + 5):
        batch = sampler.batch(step)
        assert batch.min() >= 0
        assert int(batch.max()) < length


def test_iid_is_uniform_by_chi_square() -> None:
    # 200000 draws over 1000 values: chi-square has mean 999 and standard deviation about 45;
    # the band of six standard deviations is loose but a skewed generator lands far outside.
    sampler = Sampler(1000, 1000, mode="iid", seed=12)
    draws = np.concatenate([sampler.batch(step) for step in range(200)])
    counts = np.bincount(draws, minlength=1000)
    chi_square = float(((counts - 200.0) ** 2 / 200.0).sum())
    assert 999 - 270 < chi_square < 999 + 270


@pytest.mark.parametrize(
    ("length", "classes"),
    [
        # x % length over 64-bit draws puts half of all draws into the first third here.
        (3 << 61, "third"),
        # A multiply-shift without rejection makes residues 2 (mod 3) a third rarer here.
        (3 << 61, "residue"),
        # x % length over 32-bit draws puts half of all draws into the first third here.
        (3 << 30, "third"),
        (3 << 22, "third"),
    ],
)
def test_iid_has_no_modulo_bias(length: int, classes: str) -> None:
    sampler = Sampler(length, 1000, mode="iid", seed=5)
    draws = [int(i) for step in range(30) for i in sampler.batch(step)]
    if classes == "third":
        labels = [i * 3 // length for i in draws]
    else:
        labels = [i % 3 for i in draws]
    counts = np.bincount(labels, minlength=3)
    # 10000 expected per class, standard deviation about 82: a bias moves a class by >= 2500.
    assert all(abs(int(count) - 10000) < 600 for count in counts), counts


def _cycle(sampler: Sampler, cycle: int) -> npt.NDArray[np.int64]:
    steps = sampler.steps_per_cycle
    assert steps is not None
    return np.concatenate([sampler.batch(cycle * steps + k) for k in range(steps)])


# (length, batch_size) with batch_size <= length; 65537 only with batches of 16 and more, so a
# cycle stays a few thousand steps.
COVERAGE_CASES: list[tuple[int, int]] = [
    (length, batch_size)
    for length in (1, 2, 3, 7, 97, 256, 1000, 65537)
    for batch_size in (1, 3, 16, 100, 256)
    if batch_size <= length and not (length == 65537 and batch_size < 16)
]


@pytest.mark.parametrize(("length", "batch_size"), COVERAGE_CASES)
def test_cyclic_covers_each_cycle_without_repeats(length: int, batch_size: int) -> None:
    sampler = Sampler(length, batch_size, mode="cyclic", seed=11)
    assert sampler.steps_per_cycle == length // batch_size
    for cycle in (0, 1, 2, 10**9):
        indices = _cycle(sampler, cycle)
        assert len(indices) == sampler.steps_per_cycle * batch_size
        assert len(np.unique(indices)) == len(indices)
        assert indices.min() >= 0 and indices.max() < length
        if length % batch_size == 0:
            assert np.array_equal(np.sort(indices), np.arange(length))


def test_cyclic_drops_a_different_remainder_each_cycle() -> None:
    sampler = Sampler(1000, 64, mode="cyclic", seed=3)  # 15 steps, 40 records dropped a cycle
    dropped = [np.setdiff1d(np.arange(1000), _cycle(sampler, c)) for c in range(4)]
    assert all(len(d) == 40 for d in dropped)
    assert len({tuple(d.tolist()) for d in dropped}) == 4
    # Over enough cycles every record is reached.
    reached = np.zeros(1000, dtype=bool)
    for cycle in range(40):
        reached[_cycle(sampler, cycle)] = True
    assert reached.all()


def test_cyclic_cycles_and_seeds_give_different_permutations() -> None:
    a = Sampler(4096, 4096, mode="cyclic", seed=1)  # one step is one whole cycle
    b = Sampler(4096, 4096, mode="cyclic", seed=2)
    perms = [a.batch(0), a.batch(1), a.batch(2), b.batch(0)]
    for perm in perms:
        assert np.array_equal(np.sort(perm), np.arange(4096))
        # A uniform shuffle has about one fixed point.
        assert int((perm == np.arange(4096)).sum()) < 10
    assert len({perm.tobytes() for perm in perms}) == 4


def test_cyclic_at_2_pow_24_records() -> None:
    length = 1 << 24
    sampler = Sampler(length, 8192, mode="cyclic", seed=8)
    assert sampler.steps_per_cycle == 2048
    seen = np.concatenate([sampler.batch(step) for step in (0, 1, 700, 2047)])
    assert len(np.unique(seen)) == len(seen)
    assert seen.min() >= 0 and seen.max() < length
    # Step 2048 starts cycle 1: a new permutation.
    assert not np.array_equal(sampler.batch(2048), sampler.batch(0))


def test_sequential_wraps_around() -> None:
    sampler = Sampler(10, 4, mode="sequential")
    assert [sampler.batch(k).tolist() for k in range(4)] == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
        [8, 9, 0, 1],
        [2, 3, 4, 5],
    ]
    assert Sampler(3, 7, mode="sequential").batch(1).tolist() == [1, 2, 0, 1, 2, 0, 1]
    step = 2**64 - 1
    start = step * 12 % 1000
    expected = [(start + k) % 1000 for k in range(12)]
    assert Sampler(1000, 12, mode="sequential").batch(step).tolist() == expected


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("count", [1, 2, 3, 4])
def test_shards_concatenate_to_the_single_host_batch(mode: Mode, count: int) -> None:
    batch_size = 24
    single = Sampler(1000, batch_size * count, mode=mode, seed=6)
    hosts = [Sampler(1000, batch_size, mode=mode, seed=6, shard=(i, count)) for i in range(count)]
    for step in (0, 1, 41, 42, 10**15):
        parts = [host.batch(step) for host in hosts]
        assert np.array_equal(np.concatenate(parts), single.batch(step))
        if mode != "iid":  # iid draws with replacement, so hosts may share a value
            assert len(np.unique(np.concatenate(parts))) == batch_size * count


@pytest.mark.parametrize("mode", MODES)
def test_elastic_resume_keeps_the_global_batch(mode: Mode) -> None:
    # 48 indices per step, on 1, 2, 3, 4, 6 or 8 hosts.
    def global_batch(count: int, step: int) -> npt.NDArray[np.int64]:
        hosts = [
            Sampler(5000, 48 // count, mode=mode, seed=77, shard=(i, count)) for i in range(count)
        ]
        return np.concatenate([host.batch(step) for host in hosts])

    for step in (0, 3, 104, 105, 9999):
        reference = global_batch(1, step)
        for count in (2, 3, 4, 6, 8):
            assert np.array_equal(global_batch(count, step), reference)


@settings(max_examples=60, deadline=None)
@given(
    length=st.integers(1, 5000),
    batch_size=st.integers(1, 64),
    count=st.integers(1, 4),
    seed=st.integers(0, 2**64 - 1),
    step=st.integers(0, 2**64 - 1),
)
def test_cyclic_shards_never_overlap(
    length: int, batch_size: int, count: int, seed: int, step: int
) -> None:
    if batch_size * count > length:
        batch_size = max(1, length // count)
        if batch_size * count > length:
            count = 1
            batch_size = length
    hosts = [
        Sampler(length, batch_size, mode="cyclic", seed=seed, shard=(i, count))
        for i in range(count)
    ]
    union = np.concatenate([host.batch(step) for host in hosts])
    assert len(np.unique(union)) == len(union)
    assert union.min() >= 0 and union.max() < length


def test_attributes_and_repr() -> None:
    sampler = Sampler(1000, 32, mode="cyclic", seed=5, shard=(1, 3))
    assert sampler.length == 1000
    assert sampler.batch_size == 32
    assert sampler.mode == "cyclic"
    assert sampler.seed == 5
    assert sampler.shard == (1, 3)
    assert sampler.global_batch_size == 96
    assert sampler.steps_per_cycle == 10
    assert Sampler(1000, 32, mode="iid").steps_per_cycle is None
    assert Sampler(1000, 32, mode="sequential").shard == (0, 1)
    assert "mode='cyclic'" in repr(sampler)
    assert Sampler(np.int64(10), np.uint8(2), seed=np.uint64(2**64 - 1)).seed == 2**64 - 1


@pytest.mark.parametrize("mode", MODES)
def test_the_unchecked_filler_writes_what_fill_writes(mode: Mode) -> None:
    """Sampler.filler (the DataLoader's per-step fill) gives the same indices as fill, for
    every mode, a sharded host and steps up to the last one a loader can make."""
    sampler = Sampler(1000, 24, mode=mode, seed=11, shard=(1, 3))
    fill = sampler.filler()
    out = np.full(24, -1, dtype=np.int64)
    address = out.ctypes.data
    for step in (0, 1, 2, 41, 10**9, 2**64 - 1):
        assert fill(step, address) == 0
        expected = np.empty(24, dtype=np.int64)
        sampler.fill(step, expected)
        assert np.array_equal(out, expected), step


def test_pickles_by_its_arguments() -> None:
    sampler = Sampler(1000, 32, mode="iid", seed=5, shard=(1, 2))
    clone = pickle.loads(pickle.dumps(sampler))
    assert repr(clone) == repr(sampler)
    assert np.array_equal(clone.batch(3), sampler.batch(3))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"length": 0, "batch_size": 1}, ValueError, "length must be >= 1"),
        ({"length": 2**63 + 1, "batch_size": 1}, ValueError, "length must be <= 2"),
        ({"length": 10, "batch_size": 0}, ValueError, "batch_size must be >= 1"),
        ({"length": 10, "batch_size": 2**62, "mode": "iid"}, ValueError, "larger than an array"),
        ({"length": 10, "batch_size": 11}, ValueError, "cyclic mode needs"),
        ({"length": 10, "batch_size": 4, "shard": (0, 3)}, ValueError, "cyclic mode needs"),
        ({"length": 10, "batch_size": 1, "mode": "random"}, ValueError,
         "mode must be one of 'sequential', 'iid', 'cyclic', got 'random'"),
        ({"length": 10, "batch_size": 1, "mode": 2}, TypeError,
         "mode must be one of 'sequential', 'iid', 'cyclic', got 2"),
        ({"length": 10, "batch_size": 1, "seed": -1}, ValueError, "seed must be in"),
        ({"length": 10, "batch_size": 1, "seed": 2**64}, ValueError, "seed must be in"),
        ({"length": 10, "batch_size": 1, "seed": 1.5}, TypeError, "seed must be an integer"),
        ({"length": 10.0, "batch_size": 1}, TypeError, "length must be an integer"),
        ({"length": True, "batch_size": 1}, TypeError, "not bool"),
        ({"length": 10, "batch_size": "2"}, TypeError, "batch_size must be an integer"),
        ({"length": 10, "batch_size": 1, "shard": (0,)}, TypeError, "pair"),
        ({"length": 10, "batch_size": 1, "shard": 2}, TypeError, "pair"),
        ({"length": 10, "batch_size": 1, "shard": (2, 2)}, ValueError, r"in \[0, 2\)"),
        ({"length": 10, "batch_size": 1, "shard": (0, 0)}, ValueError, "count must be >= 1"),
        ({"length": 10, "batch_size": 1, "shard": (-1, 2)}, ValueError, "shard index"),
        (
            {"length": 10, "batch_size": 2**59, "mode": "iid", "shard": (0, 2**6)},
            ValueError,
            "too large",
        ),
    ],
)
def test_bad_arguments_are_clear_errors(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        Sampler(**kwargs)


def test_sequential_and_iid_allow_batches_larger_than_the_space() -> None:
    assert Sampler(3, 10, mode="iid", seed=1).batch(0).max() < 3
    assert Sampler(1, 5, mode="sequential").batch(7).tolist() == [0] * 5


def test_bad_steps() -> None:
    sampler = Sampler(100, 10)
    with pytest.raises(ValueError, match="step must be >= 0"):
        sampler.batch(-1)
    with pytest.raises(ValueError, match="step must be < 2"):
        sampler.batch(2**64)
    with pytest.raises(TypeError, match="step must be an integer"):
        sampler.batch(1.0)  # type: ignore[arg-type]
    # iter() checks its start when called, not at the first next() (it was a generator).
    with pytest.raises(ValueError, match="step must be >= 0"):
        sampler.iter(start_step=-3)
    with pytest.raises(TypeError, match="step must be an integer, not float"):
        sampler.iter(2.0)  # type: ignore[arg-type]
    batches = sampler.iter(2**64 - 1)
    assert np.array_equal(next(batches), sampler.batch(2**64 - 1))
    with pytest.raises(ValueError, match="step must be < 2"):
        next(batches)
    assert np.array_equal(sampler.batch(np.int64(4)), sampler.batch(4))
    out = np.empty(10, dtype=np.int64)
    with pytest.raises(ValueError, match="step must be >= 0"):
        sampler.fill(-1, out)


def test_fill_checks_its_destination() -> None:
    sampler = Sampler(100, 10, mode="iid")
    with pytest.raises(TypeError, match="numpy.ndarray"):
        sampler.fill(0, [0] * 10)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="dtype int64"):
        sampler.fill(0, np.empty(10, dtype=np.int32))
    with pytest.raises(TypeError, match="dtype int64"):
        sampler.fill(0, np.empty(10, dtype=">i8"))
    with pytest.raises(ValueError, match=r"shape \(10,\)"):
        sampler.fill(0, np.empty(11, dtype=np.int64))
    with pytest.raises(ValueError, match=r"shape \(10,\)"):
        sampler.fill(0, np.empty((2, 5), dtype=np.int64))
    with pytest.raises(ValueError, match="C-contiguous"):
        sampler.fill(0, np.empty(20, dtype=np.int64)[::2])
    read_only = np.empty(10, dtype=np.int64)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="writable"):
        sampler.fill(0, read_only)
    # A view into a larger buffer is fine and only its own slots are written.
    buffer = np.full(30, -7, dtype=np.int64)
    sampler.fill(3, buffer[10:20])
    assert np.array_equal(buffer[10:20], sampler.batch(3))
    assert (buffer[:10] == -7).all() and (buffer[20:] == -7).all()


def _native_fill(
    mode: int, length: int, batch_size: int, shard_index: int = 0, shard_count: int = 1
) -> tuple[int, str]:
    out = np.empty(16, dtype=np.int64)  # every case is refused before anything is written
    code = _native.lib.lx_sampler_fill(
        mode, length, batch_size, 0, 0, shard_index, shard_count, out.ctypes.data
    )
    return int(code), _native.lib.lx_last_error().decode()


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((3, 10, 1), "unknown sampler mode 3"),
        ((1, 0, 1), "length is 0"),
        ((1, 2**63 + 1, 1), "exceeds"),
        ((1, 10, 0), "batch_size is 0"),
        ((1, 10, 1, 0, 0), "shard_count is 0"),
        ((1, 10, 1, 2, 2), "shard_index 2 is not below shard_count 2"),
        ((2, 10, 4, 0, 3), "cyclic mode needs"),
        ((1, 10, 2**40, 0, 2**30), "overflows"),
    ],
)
def test_native_side_validates_too(args: tuple[int, ...], match: str) -> None:
    code, message = _native_fill(*args)
    assert code == _native.INVALID_ARGUMENT
    assert match in message


def test_native_side_refuses_a_null_buffer() -> None:
    code = _native.lib.lx_sampler_fill(1, 10, 4, 0, 0, 0, 1, None)
    assert code == _native.INVALID_ARGUMENT
    assert b"NULL" in _native.lib.lx_last_error()


def test_threads_sharing_a_sampler_get_their_own_batches() -> None:
    sampler = Sampler(100_000, 256, mode="cyclic", seed=4)
    expected = {step: sampler.batch(step).tolist() for step in range(400)}
    failures: list[int] = []

    def work(first: int) -> None:
        for step in range(first, 400, 4):
            if sampler.batch(step).tolist() != expected[step]:
                failures.append(step)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_the_batch_binding_is_the_declared_export_and_releases_the_gil() -> None:
    """Sampler.batch calls lx_sampler_batch through a binding that types its output as the
    sampler's own array type (_native.typed_pointer); it must give what the table's binding
    gives and, like every native call, release the GIL."""
    sampler = Sampler(1_000_003, 300, mode="cyclic", seed=21)
    binding = sampler._batch_native
    assert not binding._flags_ & ctypes._FUNCFLAG_PYTHONAPI  # type: ignore[attr-defined]
    assert binding.argtypes[2] is ctypes.c_int64 * 300
    out = (ctypes.c_int64 * 300)()
    assert _native.lib.lx_sampler_batch(ctypes.addressof(sampler._request), 777, out) == 0
    assert sampler.batch(777).tolist() == list(out)
    with pytest.raises(TypeError, match="not a void pointer"):
        _native.typed_pointer("lx_sampler_batch", 1, ctypes.c_int64 * 4)
