"""Tests of loaderx.zrecord.Zrecord: round trips per codec, index forms, delete, compact, stats."""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from loaderx.errors import DictionaryError
from loaderx._store.schema import Codec
from loaderx.zrecord import CODECS, RECORD_SIZE_MAX, Zrecord

pytestmark = pytest.mark.compiled

MiB = 1 << 20


def compressible(rng: np.random.Generator, size: int) -> bytes:
    """Bytes from a 16-symbol alphabet: zstd takes them to about half their size."""
    return rng.integers(0, 16, size, dtype=np.uint8).tobytes()


def swap_last_delete(model: list[bytes], indices: list[int]) -> None:
    """The spec's delete: unique targets in descending order, each filled by the last record."""
    for index in sorted({i % len(model) for i in indices}, reverse=True):
        model[index] = model[-1]
        model.pop()


def read_all(store: Zrecord) -> list[bytes]:
    return store.gather(slice(None))


# --- round trips -------------------------------------------------------------------------------


def mixed_records(rng: np.random.Generator, sizes: list[int]) -> list[bytes]:
    """Alternately compressible and incompressible records of the given sizes."""
    return [compressible(rng, n) if k % 2 else rng.bytes(n) for k, n in enumerate(sizes)]


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_round_trip_random_sizes_up_to_one_mib(
    store_path: str, rng: np.random.Generator, codec: Codec
) -> None:
    sizes = [0, RECORD_SIZE_MAX, 1, RECORD_SIZE_MAX - 1, 0]
    sizes += [int(n) for n in rng.integers(0, RECORD_SIZE_MAX + 1, 6)]
    sizes += [int(n) for n in rng.integers(0, 4096, 20)]
    records = mixed_records(rng, sizes)
    with Zrecord(store_path, create=True, codec=codec) as store:
        assert store.append(records[:7]) == 0
        assert store.append(records[7:]) == 7
        assert len(store) == len(records)
        assert read_all(store) == records
        assert store.record_lengths(slice(None)).tolist() == sizes
    with Zrecord(store_path, create=False) as store:
        assert len(store) == len(records)
        assert read_all(store) == records
        data, offsets = store.gather_ragged([3, 0, 1])
        assert offsets.tolist() == [0, sizes[3], sizes[3], sizes[3] + sizes[1]]
        assert data.tobytes() == records[3] + records[0] + records[1]


def test_zstd_dict_train_append_reopen(store_path: str, rng: np.random.Generator) -> None:
    # Small, similar records: a shared header plus a little noise, the dictionary's use case.
    header = rng.bytes(600)
    records = [header + compressible(rng, int(n)) + header[:200] for n in rng.integers(0, 300, 120)]
    records += [b"", rng.bytes(5000)]  # an empty and an incompressible record ride along
    with Zrecord(store_path, create=True, codec="zstd_dict") as store:
        assert not store.has_dict
        store.train_dict(records[:100], 16 * 1024)
        assert store.has_dict
        assert os.path.isfile(os.path.join(store_path, "dict.zr"))
        assert store.append(records) == 0
        assert read_all(store) == records
        stored = store.stats()["live_bytes"]
    logical = sum(len(r) for r in records)
    assert stored < logical // 2
    with Zrecord(store_path, create=False) as store:
        assert store.has_dict
        assert read_all(store) == records
        assert store.gather([-1, 0, 5]) == [records[-1], records[0], records[5]]


def test_zstd_dict_append_without_dictionary_is_refused(store_path: str) -> None:
    with Zrecord(store_path, create=True, codec="zstd") as store:
        store.append([b"kept"])
        with pytest.raises(DictionaryError):
            store.append([b"x" * 1000, b"y" * 10], codec="zstd_dict")
        assert len(store) == 1
        assert read_all(store) == [b"kept"]
    with Zrecord(store_path, create=True, codec="zstd_dict") as store:
        with pytest.raises(DictionaryError):
            store.append([b"z" * 100])
        with pytest.raises(DictionaryError):
            store.append_fixed(np.zeros(64, np.uint8), 16)
        assert len(store) == 1


def test_retraining_a_used_dictionary_is_refused(store_path: str, rng: np.random.Generator) -> None:
    samples = [b"common prefix " * 20 + compressible(rng, 50) for _ in range(50)]
    with Zrecord(store_path, create=True, codec="zstd_dict") as store:
        store.train_dict(samples, 4096)
        store.append(samples[:3])
        with pytest.raises(DictionaryError):
            store.train_dict(samples, 4096)
        assert read_all(store) == samples[:3]


def test_plain_zstd_records_in_a_store_with_a_dictionary(
    store_path: str, rng: np.random.Generator
) -> None:
    samples = [b"abcdefgh" * 30 + compressible(rng, 64) for _ in range(60)]
    with Zrecord(store_path, create=True, codec="zstd") as store:
        store.train_dict(samples, 4096)
        store.append(samples[:10])
        store.append(samples[10:20], codec="zstd_dict")
        store.append(samples[20:30], codec="raw")
        assert read_all(store) == samples[:30]


# --- codec accounting --------------------------------------------------------------------------


def test_incompressible_records_fall_back_to_raw(store_path: str, rng: np.random.Generator) -> None:
    records = [rng.bytes(int(n)) for n in rng.integers(1, 40_000, 30)] + [rng.bytes(MiB)]
    logical = sum(len(r) for r in records)
    with Zrecord(store_path, create=True, codec="zstd") as store:
        store.append(records)
        stats = store.stats()
        assert stats == {
            "records": len(records),
            "live_bytes": logical,
            "chunk_bytes": logical,
            "reclaimable": 0,
        }
        assert read_all(store) == records


def test_compressible_records_shrink(store_path: str, rng: np.random.Generator) -> None:
    records = [compressible(rng, 12 * 1024) for _ in range(40)] + [bytes(MiB)]
    logical = sum(len(r) for r in records)
    with Zrecord(store_path, create=True, codec="zstd") as store:
        store.append(records)
        stats = store.stats()
        assert stats["records"] == len(records)
        assert stats["live_bytes"] < logical * 0.6
        assert stats["chunk_bytes"] == stats["live_bytes"]
        assert stats["reclaimable"] == 0
        assert read_all(store) == records


def test_raw_codec_stores_logical_bytes(store_path: str) -> None:
    records = [b"a" * 10_000, b"", b"b" * 3]
    with Zrecord(store_path, create=True, codec="raw") as store:
        store.append(records)
        assert store.stats()["live_bytes"] == 10_003
        assert read_all(store) == records


def test_codec_names() -> None:
    assert CODECS == {"raw": 0, "zstd": 1, "zstd_dict": 2}


# --- inputs of append --------------------------------------------------------------------------


def test_append_accepts_bytes_like_records(store_path: str) -> None:
    matrix = np.arange(24, dtype=np.uint16).reshape(4, 6)
    column = matrix[:, 1]  # a non-contiguous view
    big_endian = np.arange(3, dtype=">u4")
    records: list[Any] = [
        b"bytes",
        bytearray(b"bytearray"),
        memoryview(b"0123456789")[2:8],
        memoryview(b"0123456789")[::2],  # non-contiguous memoryview
        matrix,
        column,
        np.float32(1.5),
        big_endian,
        np.zeros(0, dtype=np.float64),
    ]
    expected = [
        b"bytes",
        b"bytearray",
        b"234567",
        b"02468",
        matrix.tobytes(),
        column.tobytes(),
        np.float32(1.5).tobytes(),
        big_endian.tobytes(),
        b"",
    ]
    with Zrecord(store_path, create=True, codec="raw") as store:
        assert store.append(records) == 0
        assert read_all(store) == expected
        assert store.append(np.arange(12, dtype=np.uint8).reshape(3, 4)) == len(expected)
        assert store.gather([-3, -1]) == [bytes([0, 1, 2, 3]), bytes([8, 9, 10, 11])]


def test_append_of_nothing_returns_the_length(store_path: str) -> None:
    with Zrecord(store_path, create=True) as store:
        assert store.append([]) == 0
        store.append([b"x"])
        assert store.append([]) == 1
        assert store.append_fixed(np.zeros(0, np.uint8), 8) == 1
        assert len(store) == 1


def test_append_fixed_and_gather_into(store_path: str, rng: np.random.Generator) -> None:
    rows = rng.integers(0, 8, (300, 5, 7), dtype=np.int32)  # 140-byte records, compressible
    with Zrecord(store_path, create=True) as store:
        assert store.append_fixed(rows, 140) == 0
        assert store.append_fixed(rows[::-1, :, ::2], 5 * 4 * 4) == 300  # non-contiguous input
        indices = rng.integers(0, 300, 64).astype(np.int64)
        out = np.empty((64, 5, 7), dtype=np.int32)
        store.gather_into(indices, out, 140)
        assert np.array_equal(out, rows[indices])
        flipped = np.ascontiguousarray(rows[::-1, :, ::2])
        out2 = np.empty(64 * 80, dtype=np.uint8)
        store.gather_into(indices + 300, out2, 80)
        assert out2.tobytes() == flipped[indices].tobytes()
        assert store.gather(5) == [rows[5].tobytes()]
        with pytest.raises(ValueError, match="whole number"):
            store.append_fixed(np.zeros(10, np.uint8), 3)
        with pytest.raises(ValueError):
            store.append_fixed(np.zeros(10, np.uint8), 0)
        with pytest.raises(ValueError):
            store.gather_into(indices, out, 80)  # 140-byte records into 80-byte slots
        assert len(store) == 600


def test_gather_into_read_only_indices_and_unusual_dtypes(store_path: str) -> None:
    values = np.arange(10, dtype=np.int64) * 1000
    with Zrecord(store_path, create=True, codec="raw") as store:
        store.append_fixed(values, 8)
        indices = np.array([9, 0, 4], dtype=np.int64)
        indices.flags.writeable = False
        stamps = np.zeros(3, dtype="datetime64[s]")  # no buffer-protocol format
        store.gather_into(indices, stamps, 8)
        assert stamps.view(np.int64).tolist() == [9000, 0, 4000]
        pairs = np.zeros(3, dtype=[("a", np.int32), ("b", np.int32)])
        store.gather_into(indices, pairs, 8)
        assert pairs.view(np.int64).tolist() == [9000, 0, 4000]


def test_gather_into_record_size_is_an_int_of_at_least_one_byte(store_path: str) -> None:
    # A NumPy integer is taken, as append_fixed takes it (it was a TypeError), and a size of
    # 0 or less is refused by name (it was "out holds 3 bytes but 1 records of -3 bytes need -3").
    with Zrecord(store_path, create=True, codec="raw") as store:
        store.append([b"abc", b"def"])
        out = np.zeros(6, np.uint8)
        store.gather_into(np.array([1, 0]), out, np.int64(3))  # type: ignore[arg-type]
        assert out.tobytes() == b"defabc"
        for size in (0, -3):
            with pytest.raises(ValueError, match=f"^record_size must be at least 1 byte, got {size}$"):
                store.gather_into(np.array([1, 0]), out, size)
        for wrong in (True, 3.0, "3"):
            with pytest.raises(TypeError, match="record_size must be an int"):
                store.gather_into(np.array([1, 0]), out, wrong)  # type: ignore[arg-type]
        assert out.tobytes() == b"defabc"


def test_gather_into_empty_batch(store_path: str) -> None:
    with Zrecord(store_path, create=True) as store:
        store.append([b"abcd"])
        out = np.empty(0, np.uint8)
        store.gather_into(np.zeros(0, np.int64), out, 4)


# --- index forms -------------------------------------------------------------------------------


def test_every_index_form(store_path: str) -> None:
    records = [bytes([i]) * (i % 7) + i.to_bytes(2, "little") for i in range(40)]
    with Zrecord(store_path, create=True, codec="zstd") as store:
        store.append(records)
        for index in [
            0,
            39,
            -1,
            -40,
            np.int32(7),
            np.uint8(3),
            slice(None),
            slice(5, 30, 4),
            slice(None, None, -3),
            slice(-5, None),
            slice(30, 2, -7),
            slice(50, 60),
            [3, 3, 0, -1, -2],
            (1, 2),
            np.array([39, 0, 20], dtype=np.int64),
            np.array([-1, 5], dtype=np.int16),
            np.arange(40, dtype=np.int64)[::5],
            np.arange(40) % 3 == 0,
            [i % 2 == 1 for i in range(40)],
            [],
        ]:
            # A tuple is a sequence of record indices here (NumPy would read it as axes).
            selected = np.arange(40)[list(index) if isinstance(index, tuple) else index]
            expected = [records[i] for i in np.atleast_1d(selected)]
            assert store.gather(index) == expected, index
            lengths = store.record_lengths(index)
            assert lengths.dtype == np.uint64
            assert lengths.tolist() == [len(r) for r in expected]


# --- delete, compact, stats --------------------------------------------------------------------


def test_delete_is_swap_last_in_descending_order(store_path: str) -> None:
    records = [f"record {i}".encode() for i in range(10)]
    with Zrecord(store_path, create=True) as store:
        store.append(records)
        # Targets 9, 5, 2 in that order: 9 is the last (just dropped); 8 fills 5; 7 fills 2.
        store.delete([2, 5, 9, 5, -5])
        assert len(store) == 7
        assert read_all(store) == [records[i] for i in (0, 1, 7, 3, 4, 8, 6)]
        store.delete(np.array([True] + [False] * 6))  # 6 fills 0
        assert read_all(store) == [records[i] for i in (6, 1, 7, 3, 4, 8)]
        # Targets 4, 2, 0: slot 4 takes record 8 (the last); then slot 2 takes record 8 again
        # (now the last); then slot 0 takes record 3.
        store.delete(slice(None, None, 2))
        assert read_all(store) == [records[i] for i in (3, 1, 8)]
        store.delete(slice(None))
        assert len(store) == 0
        assert read_all(store) == []
        assert store.append([b"again"]) == 0
        assert read_all(store) == [b"again"]


def test_delete_out_of_range_changes_nothing(store_path: str) -> None:
    with Zrecord(store_path, create=True) as store:
        store.append([b"a", b"b", b"c"])
        with pytest.raises(IndexError):
            store.delete([0, 3])
        with pytest.raises(IndexError):
            store.delete(-4)
        assert read_all(store) == [b"a", b"b", b"c"]


def test_compact_reclaims_deleted_bytes(store_path: str, rng: np.random.Generator) -> None:
    records = mixed_records(rng, [int(n) for n in rng.integers(0, 50_000, 60)])
    model = list(records)
    with Zrecord(store_path, create=True) as store:
        store.append(records)
        before = store.stats()
        assert before["reclaimable"] == 0
        targets = [int(i) for i in rng.choice(60, 25, replace=False)]
        store.delete(targets)
        swap_last_delete(model, targets)
        deleted = store.stats()
        assert deleted["records"] == 35
        assert deleted["chunk_bytes"] == before["chunk_bytes"]
        assert deleted["reclaimable"] == deleted["chunk_bytes"] - deleted["live_bytes"] > 0
        store.compact()
        after = store.stats()
        assert after["live_bytes"] == deleted["live_bytes"]
        assert after["chunk_bytes"] == after["live_bytes"]
        assert after["reclaimable"] == 0
        assert read_all(store) == model
        store.compact()  # nothing to do: idempotent
        assert store.stats() == after
        assert store.append([b"tail"]) == 35
        model.append(b"tail")
    with Zrecord(store_path, create=False) as store:
        assert read_all(store) == model


def test_durable_store_and_sync(store_path: str) -> None:
    with Zrecord(store_path, create=True, durable=True) as store:
        store.append([b"one", b"two" * 1000])
        store.sync()
    with Zrecord(store_path, create=False, durable=True) as store:
        assert read_all(store) == [b"one", b"two" * 1000]


def test_repr_len_and_context_manager(store_path: str) -> None:
    store = Zrecord(store_path, create=True, codec="raw")
    store.append([b"x", b"y"])
    assert len(store) == 2
    assert "records=2" in repr(store) and store_path in repr(store)
    with store as same:
        assert same is store
    assert "closed" in repr(store)
    store.close()  # idempotent


# --- a stateful model --------------------------------------------------------------------------

record_bytes = st.one_of(
    st.binary(max_size=300),
    st.builds(lambda b, n: b * n, st.binary(min_size=1, max_size=4), st.integers(1, 800)),
)


class StoreModel(RuleBasedStateMachine):
    """append / delete / compact / reopen / gather against a plain list and the spec's delete."""

    def __init__(self) -> None:
        super().__init__()
        self.folder = tempfile.mkdtemp(prefix="zrecord-model-")
        self.path = os.path.join(self.folder, "store")
        self.store = Zrecord(self.path, create=True)
        self.model: list[bytes] = []

    @rule(records=st.lists(record_bytes, max_size=12), codec=st.sampled_from(["raw", "zstd"]))
    def append(self, records: list[bytes], codec: Codec) -> None:
        first = self.store.append(records, codec=codec)
        assert first == len(self.model)
        self.model.extend(records)

    @precondition(lambda self: len(self.model) > 0)
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        n = len(self.model)
        targets = data.draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=8))
        self.store.delete(targets)
        swap_last_delete(self.model, targets)

    @rule()
    def compact(self) -> None:
        self.store.compact()
        assert self.store.stats()["reclaimable"] == 0

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = Zrecord(self.path, create=False)

    @precondition(lambda self: len(self.model) > 0)
    @rule(data=st.data())
    def gather(self, data: st.DataObject) -> None:
        n = len(self.model)
        picks = data.draw(st.lists(st.integers(-n, n - 1), max_size=10))
        assert self.store.gather(picks) == [self.model[i] for i in picks]

    @invariant()
    def same_length_and_stats(self) -> None:
        assert len(self.store) == len(self.model)
        stats = self.store.stats()
        assert stats["records"] == len(self.model)
        assert stats["reclaimable"] == stats["chunk_bytes"] - stats["live_bytes"] >= 0

    def teardown(self) -> None:
        try:
            assert self.store.gather(slice(None)) == self.model
        finally:
            self.store.close()
            shutil.rmtree(self.folder, ignore_errors=True)


StoreModel.TestCase.settings = settings(
    max_examples=25,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestStoreModel = StoreModel.TestCase


def test_a_store_pickles_by_path_and_reopens(store_path: str) -> None:
    import pickle

    with Zrecord(store_path, create=True, codec="raw") as store:
        store.append([b"alpha", b"", b"gamma"])
        copy = pickle.loads(pickle.dumps(store))
    assert copy.codec == "raw" and copy.path == store_path
    assert copy.gather(slice(None)) == [b"alpha", b"", b"gamma"]
    copy.close()


@pytest.mark.parametrize("verify", [None, True, False])
def test_a_pickled_store_keeps_its_options_and_an_absolute_path(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, verify: bool | None
) -> None:
    import pickle

    monkeypatch.chdir(tmp_path)
    with Zrecord("relative", create=True, codec="raw") as store:
        store.append([b"one", b"two"])
    with Zrecord("relative", readonly=True, verify=verify) as store:
        data = pickle.dumps(store)
    monkeypatch.chdir("/")  # the receiver runs elsewhere
    with pickle.loads(data) as copy:
        assert copy.path == str(tmp_path / "relative")
        assert copy.readonly and copy.verify_reads is verify
        assert copy.gather(slice(None)) == [b"one", b"two"]


def test_opening_without_create_never_creates(tmp_path: Any) -> None:
    missing = str(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="no Zrecord store .* pass create=True"):
        Zrecord(missing)
    assert not os.path.exists(missing)
    os.mkdir(missing)  # an empty folder is not a store either, and stays empty
    with pytest.raises(FileNotFoundError, match="meta.zr is missing"):
        Zrecord(missing)
    assert os.listdir(missing) == []


# Each case in a child process: zstd's trainer killed the whole interpreter on these.
_TINY_SAMPLES_CHILD = """
import sys
from loaderx.zrecord import Zrecord
sizes = [int(size) for size in sys.argv[2].split(",")]
with Zrecord(sys.argv[1], create=True, codec="zstd_dict") as store:
    try:
        store.train_dict([b"a" * size for size in sizes], 1024)
    except ValueError as refused:
        print(refused)
    print(store.has_dict, len(store))
"""


@pytest.mark.parametrize("sizes", [
    "1,1,1,1,1,1,1,1,1,1",  # 7 bytes in the first 7 samples (zstd trains on 3/4): SIGFPE
    "1,1,1,1,1,1,1,1",  # 6 in the first 6: SIGSEGV
    "0,0,0,0,0,0,0,3,3,3",  # none in the first 7
    "1,1,1,1,1,30,30",  # 5 in the first 5 of 7
])
def test_training_on_samples_too_small_for_zstd_is_refused(store_path: str, sizes: str) -> None:
    """ZDICT trains on the first three quarters of the samples in 8-byte windows and crashed
    the process (division by zero, or an underflowed count) when they held fewer than 8 bytes
    while the whole set held 8 or more: from_numpy of ten 1-byte labels with zstd_dict did."""
    done = subprocess.run([sys.executable, "-c", _TINY_SAMPLES_CHILD, store_path, sizes],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"dictionary training for {store_path!r}: dictionary training failed (zstd trains on "
        "the first three quarters of the samples, and they hold fewer than 8 bytes); give more "
        "and larger samples (about 100x dict_size in total)",
        "False 0",
    ]
    with Zrecord(store_path) as store:
        assert not store.has_dict and not os.path.exists(os.path.join(store_path, "dict.zr"))


def test_a_stores_options_are_read_only(tmp_path: Path) -> None:
    # They were plain attributes: `store.codec = "raw"` was accepted and appends went on
    # compressing; `store.path = ...` changed the repr and what a pickle reopened.
    path = str(tmp_path / "store")
    with Zrecord(path, create=True, codec="zstd") as store:
        store.append([b"abc" * 10])
        for name in ("path", "codec", "durable", "readonly", "verify_reads"):
            before = getattr(store, name)
            with pytest.raises(AttributeError):
                setattr(store, name, "raw")
            assert getattr(store, name) == before
        assert (store.path, store.codec, store.durable, store.readonly) == (
            path, "zstd", False, False,
        )
        store.append([b"def" * 10])
        assert store.gather([0, 1]) == [b"abc" * 10, b"def" * 10]
        assert pickle.loads(pickle.dumps(store)).gather([1]) == [b"def" * 10]
