"""The dense read's fast path passes NumPy arrays by their fields, in 32-bit halves, through
untyped ctypes calls (loaderx/array_fields.py). It must be on here (so the suite exercises it),
its probe must be able to fail, and the older way (LOADERX_ARRAY_CALLS=0) must read the same
bytes and decline the same arrays."""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loaderx._native import library as _native
from loaderx._native import array_fields
from loaderx._native import calls as native_calls
from loaderx.dataset import DenseDataset


def test_the_fast_path_passes_arrays_by_their_fields_here() -> None:
    assert array_fields.WORKS and native_calls.ARRAY_CALLS
    assert array_fields.calls_work(_native.lib)


def test_the_flag_bits_are_numpys() -> None:
    try:
        multiarray = importlib.import_module("numpy._core.multiarray")
    except ImportError:  # NumPy 1.x
        multiarray = importlib.import_module("numpy.core.multiarray")
    _flagdict: dict[str, int] = getattr(multiarray, "_flagdict")
    assert _flagdict["C_CONTIGUOUS"] == array_fields.C_CONTIGUOUS
    assert _flagdict["ALIGNED"] == array_fields.ALIGNED
    assert _flagdict["WRITEABLE"] == array_fields.WRITEABLE


def test_the_library_reads_what_numpy_says_of_each_probe_array() -> None:
    facts = _native.ArrayFacts()
    for array in array_fields.probe_arrays():
        at = array_fields.fields_address(array)
        assert _native.lib.lx_read_array_facts(at & 0xFFFF_FFFF, at >> 32, ctypes.byref(facts)) == 0
        assert facts.data == array.__array_interface__["data"][0]
        assert facts.ndim == array.ndim
        assert facts.length == (array.shape[0] if array.ndim else 0)
        assert facts.stride == (array.strides[0] % (1 << 64) if array.ndim else 0)
        assert bool(facts.flags & array_fields.C_CONTIGUOUS) == array.flags.c_contiguous
        assert bool(facts.flags & array_fields.WRITEABLE) == array.flags.writeable
        assert bool(facts.flags & array_fields.ALIGNED) == array.flags.aligned


def test_the_probe_fails_when_the_fields_are_not_where_it_looks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(array_fields, "OFFSET", array_fields.OFFSET + 8)
    assert not array_fields.calls_work(_native.lib)


def test_the_probe_fails_when_halves_lose_bits() -> None:
    class Truncating:
        """A library whose lx_join_halves drops the top bit, as a broken binding would."""

        def lx_join_halves(self, low: int, high: int) -> int:
            return ((high << 32) | low) & 0x7FFF_FFFF_FFFF_FFFF

    assert not array_fields.calls_work(Truncating())


def test_halves_reach_the_library_with_every_bit() -> None:
    for value in (0, 1, 0x8000_0000, 0xFFFF_FFFF, 0x7FFF_FFFF_8000_0001, 0xFFFF_FFFF_FFFF_FFFF):
        assert _native.lib.lx_join_halves(value & 0xFFFF_FFFF, value >> 32) == value


def _reads_and_declines(folder: Path) -> dict[str, Any]:
    """What the fast paths of a store and of a view of shards take, and the bytes they and the
    public reads give, in a subprocess with each setting of LOADERX_ARRAY_CALLS."""
    script = textwrap.dedent(
        f"""
        import json
        import numpy as np
        from loaderx._native import calls as native_calls
        from loaderx.dataset import DenseDataset
        dense = DenseDataset({str(folder / "dense")!r})
        sharded = DenseDataset({str(folder / "sharded")!r})
        indices = np.random.default_rng(3).integers(0, len(dense), 300)
        out = np.zeros((300, 8), np.uint8)
        store, shards = dense.store, sharded.store
        took = [store.gather_fixed(indices, out, 8)]
        first = out.copy()
        out[:] = 0
        took.append(shards.gather_fixed(indices, out, 8))
        frozen = np.zeros((300, 8), np.uint8)
        frozen.flags.writeable = False
        unaligned = np.zeros(8 * 300 + 1, np.uint8)[1:].view(np.int64)
        unaligned[:] = indices
        read_only_indices = indices.copy()
        read_only_indices.flags.writeable = False
        one = np.zeros((1, 8), np.uint8)
        took += [
            store.gather_fixed(indices, frozen, 8),
            shards.gather_fixed(indices, out[:, ::-1], 8),
            shards.gather_fixed(unaligned, out, 8),
            store.gather_fixed(read_only_indices, out, 8),
            store.gather_fixed(indices, out.reshape(150, 16), 8),
            shards.gather_fixed(indices[:1], one, 8),
            store.gather_fixed(read_only_indices[:1], one, 8),
        ]
        one_record = one.tolist()
        public = []
        for ds in (dense, sharded):
            for index in (indices, unaligned, read_only_indices):
                into = np.zeros((300, 8), np.uint8)
                ds.gather_into(index, into)
                public.append(np.array_equal(into, ds[index]) and np.array_equal(into, first))
            for low, high in ((0, 1), (1, 3)):  # a batch of one, and of two
                into = np.zeros((high - low, 8), np.uint8)
                ds.gather_into(indices[low:high], into)
                public.append(np.array_equal(into, ds[indices[low:high]])
                              and np.array_equal(into, first[low:high]))
        print(json.dumps({{"array_calls": native_calls.ARRAY_CALLS, "took": took,
                           "first": first.tolist(), "last": out.tolist(), "public": public,
                           "frozen": int(frozen.sum()), "one": one_record}}))
        """
    )
    results = {}
    for setting in ("1", "0"):
        env = {**os.environ, "LOADERX_ARRAY_CALLS": setting}
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              env=env, timeout=120)
        assert done.returncode == 0, done.stderr
        results[setting] = json.loads(done.stdout)
    return results


def test_both_ways_read_the_same_bytes(tmp_path: Path) -> None:
    records = np.random.default_rng(5).integers(0, 256, (5000, 8), dtype=np.uint8)
    for name, shard_records in (("dense", None), ("sharded", 700)):
        with DenseDataset(str(tmp_path / name), dtype=np.uint8, item_shape=(8,), codec="raw",
                          shard_records=shard_records) as ds:
            ds.append(records)
    results = _reads_and_declines(tmp_path)
    indices = np.random.default_rng(3).integers(0, 5000, 300)
    # Fields take a read-only index array, which from_buffer refuses. Where the library cannot
    # prove out's size from its rows (a batch of one, rows other than the records) a second
    # call passes NumPy's nbytes: the last row, a read-only index array of one, shows that
    # call at work. Misaligned indices neither way: the library may read int64_t only at its
    # alignment, so the general path copies them (test_misaligned_arrays.py). A read-only or
    # strided out: never.
    assert results["1"]["array_calls"] is True
    assert results["1"]["took"] == [True, True, False, False, False, True, True, True, True]
    assert results["0"]["array_calls"] is False
    assert results["0"]["took"] == [True, True, False, False, False, False, True, True, False]
    for setting, got in results.items():
        assert np.array_equal(np.array(got["first"], np.uint8), records[indices]), setting
        assert np.array_equal(np.array(got["last"], np.uint8), records[indices]), setting
        assert got["public"] == [True] * 10, setting
        assert got["frozen"] == 0, setting
        assert np.array_equal(np.array(got["one"], np.uint8), records[indices[:1]]), setting
