"""Integrity: per-record checksums (sums.zr), zstd frame checksums, dict.zr's trailer, the
schema's checksum, verify(), and a CI-sized run of stress/fuzz_store.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import msgpack
import numpy as np
import pytest

from loaderx.converter import from_numpy
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.errors import CorruptStoreError, SchemaError
from loaderx._store.schema import Codec
from loaderx.verify import BadRecord
from loaderx.zrecord import Zrecord

ROOT = Path(__file__).resolve().parents[2]
HEADER = 16
ENTRY = 16


def _records(count: int = 40) -> list[bytes]:
    rng = np.random.default_rng(7)
    out = []
    for i in range(count):
        if i % 5 == 4:
            out.append(rng.integers(0, 256, 50 + i, dtype=np.uint8).tobytes())  # raw fallback
        else:
            out.append(bytes([i % 9]) * (100 + 3 * i))
    out[7] = b""
    return out


def _store(path: Path, codec: Codec, records: list[bytes] | None = None) -> list[bytes]:
    records = _records() if records is None else records
    with Zrecord(path, create=True, codec=codec) as z:
        z.append(records)
    return records


def _entry(path: Path, index: int) -> np.ndarray:
    """Table entry `index` as (offset, phys_length, logic_length, chunk_id | codec << 16)."""
    raw = (path / "meta.zr").read_bytes()[HEADER + ENTRY * index : HEADER + ENTRY * (index + 1)]
    return np.frombuffer(raw, dtype=np.uint32)


def _patch(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def _flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0x10]))


def _flip_record(path: Path, index: int, within: int = 0) -> None:
    offset, phys, _, chunk = (int(v) for v in _entry(path, index))
    assert phys > within
    _flip(path / f"{chunk & 0xFFFF}.zr", offset + within)


# ---- round trips ---------------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_checksummed_store_round_trips_and_verifies(tmp_path: Path, codec: Codec) -> None:
    records = _store(tmp_path / "s", codec)
    assert (tmp_path / "s" / "sums.zr").stat().st_size == HEADER + 4 * len(records)
    with Zrecord(tmp_path / "s", verify=True) as z:
        assert z.gather(slice(None)) == records
        report = z.verify()
    assert report.ok and bool(report)
    assert (report.records, report.checksummed, report.bad_count) == (40, 40, 0)
    assert report.has_checksums and report.bad == []


def test_delete_and_compact_keep_checksums_right(tmp_path: Path) -> None:
    records = _store(tmp_path / "s", "zstd")
    with Zrecord(tmp_path / "s", verify=True) as z:
        z.delete([0, 7, 39, 12])
        expected = list(records)
        for target in (39, 12, 7, 0):  # swap-last, descending
            expected[target] = expected[-1]
            expected.pop()
        assert z.gather(slice(None)) == expected
        z.compact()
        z.append([b"after"])
        assert z.gather(slice(None)) == expected + [b"after"]
        assert z.verify().ok
    with Zrecord(tmp_path / "s", verify=True) as z:
        assert z.gather(slice(None)) == expected + [b"after"]


def test_zstd_frames_carry_their_content_checksum(tmp_path: Path) -> None:
    _store(tmp_path / "s", "zstd")
    offset, phys, logic, chunk = (int(v) for v in _entry(tmp_path / "s", 1))
    assert phys < logic and chunk >> 16 == 1  # a zstd record
    frame = (tmp_path / "s" / "0.zr").read_bytes()[offset : offset + phys]
    assert frame[:4] == b"\x28\xb5\x2f\xfd" and frame[4] & 0x04  # Content_Checksum_flag
    # Without per-record verification, zstd's own checksum still catches a changed last byte.
    _flip(tmp_path / "s" / "0.zr", offset + phys - 1)
    with Zrecord(tmp_path / "s", verify=False) as z:
        with pytest.raises(CorruptStoreError, match="record 1 does not decompress"):
            z.gather([1])


# ---- detection, kind by kind ---------------------------------------------------------------


def test_flipped_raw_byte_is_caught_with_verify_true_and_by_verify(tmp_path: Path) -> None:
    records = _store(tmp_path / "s", "raw")
    _flip_record(tmp_path / "s", 3, within=10)
    with Zrecord(tmp_path / "s", verify=True) as z:
        with pytest.raises(CorruptStoreError, match="record 3's stored bytes do not match"):
            z.gather([2, 3])
        assert z.gather([2]) == [records[2]]
        report = z.verify()
    assert report.bad == [BadRecord(3, "checksum")] and report.bad_count == 1
    # The default leaves raw records unchecked (the check would cost as much as the copy).
    with Zrecord(tmp_path / "s") as z:
        assert z.gather([3]) != [records[3]]


def test_flipped_zstd_byte_is_caught_by_default(tmp_path: Path) -> None:
    _store(tmp_path / "s", "zstd")
    _flip_record(tmp_path / "s", 2, within=9)
    with Zrecord(tmp_path / "s") as z:
        with pytest.raises(CorruptStoreError, match="record 2"):
            z.gather([2])
        assert z.verify().bad == [BadRecord(2, "checksum")]


def test_swapped_table_entries_are_caught(tmp_path: Path) -> None:
    _store(tmp_path / "s", "zstd")
    meta = tmp_path / "s" / "meta.zr"
    a, b = _entry(tmp_path / "s", 5).tobytes(), _entry(tmp_path / "s", 8).tobytes()
    _patch(meta, HEADER + ENTRY * 5, b)
    _patch(meta, HEADER + ENTRY * 8, a)
    with Zrecord(tmp_path / "s") as z:
        with pytest.raises(CorruptStoreError, match="checksum"):
            z.gather([5])
        report = z.verify()
    assert [bad.index for bad in report.bad] == [5, 8]


def test_zeroed_table_entry_is_caught(tmp_path: Path) -> None:
    _store(tmp_path / "s", "zstd")
    _patch(tmp_path / "s" / "meta.zr", HEADER + ENTRY * 6, bytes(ENTRY))
    with Zrecord(tmp_path / "s") as z:
        with pytest.raises(CorruptStoreError, match="record 6"):
            z.gather([6])
        assert z.verify().bad == [BadRecord(6, "checksum")]


def test_raised_length_over_zeroed_entries_is_caught_and_lowered_is_older_state(
    tmp_path: Path,
) -> None:
    records = _store(tmp_path / "s", "zstd")
    meta = tmp_path / "s" / "meta.zr"
    _patch(meta, 12, (len(records) + 3).to_bytes(4, "little"))
    with pytest.raises(CorruptStoreError, match="corrupt store"):
        Zrecord(tmp_path / "s")
    _patch(meta, 12, (len(records) - 3).to_bytes(4, "little"))
    with Zrecord(tmp_path / "s", verify=True) as z:  # a valid older state
        assert z.gather(slice(None)) == records[:-3]


def test_a_folder_in_place_of_a_chunk_is_corrupt_and_verify_blames_its_records(
    tmp_path: Path,
) -> None:
    """A folder mapped as a chunk failed with an I/O error ("MappingFailed"): it is damage.
    Found at open it is CorruptStoreError; replaced under an open store, verify reports the
    chunk's records (and a gather raises CorruptStoreError)."""
    path = tmp_path / "s"
    records = _store(path, "zstd")
    store = Zrecord(path, readonly=True)
    try:
        os.unlink(path / "0.zr")
        os.mkdir(path / "0.zr")
        with pytest.raises(CorruptStoreError, match="chunk file 0.zr is a directory"):
            Zrecord(path, readonly=True)
        report = store.verify()  # its chunk was not mapped yet
        assert [bad.reason for bad in report.bad] == ["chunk"] * (len(records) - 1)  # one is b""
        with pytest.raises(CorruptStoreError, match="chunk file 0.zr is a directory"):
            store.gather([0])
    finally:
        store.close()


def test_truncated_or_bad_sums_file_is_corrupt(tmp_path: Path) -> None:
    _store(tmp_path / "s", "raw")
    sums = tmp_path / "s" / "sums.zr"
    os.truncate(sums, HEADER + 4 * 20)
    with pytest.raises(CorruptStoreError, match="sums of 20 records"):
        Zrecord(tmp_path / "s")
    _flip(sums, 0)
    with pytest.raises(CorruptStoreError, match="sums.zr has no valid header"):
        Zrecord(tmp_path / "s")


def test_store_without_sums_keeps_opening_and_says_so(tmp_path: Path) -> None:
    records = _store(tmp_path / "s", "zstd")
    os.remove(tmp_path / "s" / "sums.zr")  # what a store written before checksums looks like
    with Zrecord(tmp_path / "s", verify=True) as z:
        assert z.gather(slice(None)) == records
        z.append([b"more"])
        report = z.verify()
    assert report.ok and not report.has_checksums and report.checksummed == 0
    assert not (tmp_path / "s" / "sums.zr").exists()
    # An empty store without one gets one.
    Zrecord(tmp_path / "empty", create=True).close()
    os.remove(tmp_path / "empty" / "sums.zr")
    with Zrecord(tmp_path / "empty") as z:
        z.append([b"x"])
        assert z.verify().has_checksums


OPEN_MEMORY = """
import resource, sys
from loaderx.zrecord import Zrecord
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
stores = [Zrecord(sys.argv[1], create=False, readonly=True) for _ in range(8)]
assert all(len(store) == 40 for store in stores)
for store in stores:
    store.close()
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""


def test_opening_reads_and_commits_no_memory_for_the_whole_sums_space(tmp_path: Path) -> None:
    # An open reserves room for the sums of 2**24 records (64 MiB) but must touch none of it:
    # filling it (a safe build's allocator poisons what it hands out) made every open cost the
    # limit instead of the store, slow enough for an appending writer to outrun the openers.
    _store(tmp_path / "s", "raw")
    script = [sys.executable, "-c", OPEN_MEMORY, str(tmp_path / "s")]
    grown_kib = int(subprocess.run(script, check=True, capture_output=True, text=True).stdout)
    assert grown_kib < 32 * 1024, f"8 opens grew the peak memory by {grown_kib} KiB"


def test_interrupted_delete_leaves_readable_duplicates(tmp_path: Path) -> None:
    """A kill between a delete's table moves and its sums' moves leaves entry i a copy of the
    moved entry while sums.zr still has i's old sum. sums.zr's header records the delete, so the
    record reads as the copy, and the next delete or compaction settles the sum."""
    records = _store(tmp_path / "s", "zstd")
    last = _entry(tmp_path / "s", 39).tobytes()
    _patch(tmp_path / "s" / "meta.zr", HEADER + ENTRY * 4, last)
    with Zrecord(tmp_path / "s", verify=True) as z:  # without the record of a delete: corrupt
        with pytest.raises(CorruptStoreError, match="record 4"):
            z.gather([4])
    _patch(tmp_path / "s" / "sums.zr", 8, (40).to_bytes(4, "little") + (39).to_bytes(4, "little"))
    with Zrecord(tmp_path / "s", verify=True) as z:
        assert z.gather([4, 39]) == [records[39], records[39]]
        assert z.verify().ok
        z.delete([39])  # what the killed delete was doing
        assert z.gather(slice(None)) == records[:4] + [records[39]] + records[5:39]
        assert z.verify().ok
    assert (tmp_path / "s" / "sums.zr").read_bytes()[8:16] == bytes(8)  # settled


def test_compaction_settles_an_interrupted_delete(tmp_path: Path) -> None:
    records = _store(tmp_path / "s", "zstd")
    _patch(tmp_path / "s" / "meta.zr", HEADER + ENTRY * 4, _entry(tmp_path / "s", 39).tobytes())
    _patch(tmp_path / "s" / "meta.zr", 12, (39).to_bytes(4, "little"))  # the length was published
    _patch(tmp_path / "s" / "sums.zr", 8, (40).to_bytes(4, "little") + (39).to_bytes(4, "little"))
    with Zrecord(tmp_path / "s", verify=True) as z:
        z.compact()
        assert z.gather(slice(None)) == records[:4] + [records[39]] + records[5:39]
        assert z.verify().ok


def test_dict_zr_trailer_detects_changes_and_old_dictionaries_load(tmp_path: Path) -> None:
    tiles = np.tile(np.arange(256, dtype=np.uint8) % 40, (200, 1))
    tiles[:, ::7] = np.arange(200, dtype=np.uint8)[:, None]
    from_numpy(tmp_path / "d", tiles, codec="zstd_dict", dict_size=1024)
    dict_file = tmp_path / "d" / "dict.zr"
    original = dict_file.read_bytes()
    assert original[-16:-12] == b"LXDC"
    assert int.from_bytes(original[-8:], "little") == len(original) - 16
    flipped = bytearray(original)
    flipped[100] ^= 0x10
    for corrupt in (original + b"garbage", original[:-1], bytes(flipped)):
        dict_file.write_bytes(corrupt)
        with pytest.raises(CorruptStoreError, match="dict.zr"):
            DenseDataset(tmp_path / "d")
    # Without its trailer, dict.zr is corrupt in a store whose sums.zr says it has one...
    dict_file.write_bytes(original[:-16])
    with pytest.raises(CorruptStoreError, match="lacks its checksum trailer"):
        DenseDataset(tmp_path / "d")
    # ...and loads as it is in a store from before checksums.
    os.remove(tmp_path / "d" / "sums.zr")
    with DenseDataset(tmp_path / "d") as ds:
        assert (ds[:] == tiles).all()


def test_unloadable_dictionary_is_corrupt_not_memory_error(tmp_path: Path) -> None:
    _store(tmp_path / "s", "zstd")
    os.remove(tmp_path / "s" / "sums.zr")  # no trailer required
    # zstd's dictionary magic followed by entropy tables that do not parse.
    (tmp_path / "s" / "dict.zr").write_bytes(b"\x37\xa4\x30\xec" + b"\x01\x00\x00\x00" + b"\xff" * 300)
    with pytest.raises(CorruptStoreError, match="not a zstd dictionary"):
        Zrecord(tmp_path / "s")


def test_schema_checksum_catches_a_swapped_dtype(tmp_path: Path) -> None:
    data = np.arange(12, dtype=np.float32).reshape(4, 3)
    from_numpy(tmp_path / "d", data, codec="raw")
    schema = tmp_path / "d" / "schema.msgpack"
    raw = schema.read_bytes()
    assert b"<f4" in raw
    schema.write_bytes(raw.replace(b"<f4", b"<i4"))
    with pytest.raises(SchemaError, match="does not match its checksum"):
        DenseDataset(tmp_path / "d")
    # A schema from before the checksum field still opens.
    fields = msgpack.unpackb(raw)
    del fields["checksum"]
    schema.write_bytes(msgpack.packb(fields))
    with DenseDataset(tmp_path / "d") as ds:
        assert (ds[:] == data).all()


def test_dataset_verify_and_verify_keyword(tmp_path: Path) -> None:
    data = np.arange(40, dtype=np.int32).reshape(10, 4)
    from_numpy(tmp_path / "d", data, codec="raw")
    with Zrecord(tmp_path / "d", codec="raw") as z:
        z.append([b"12345"])  # not one sample: the schema forbids it
    _flip_record(tmp_path / "d", 2)
    with DenseDataset(tmp_path / "d", verify=True) as ds:
        report = ds.verify()
        assert report.bad == [BadRecord(2, "checksum"), BadRecord(10, "size")]
        assert report.bad_count == 2
        with pytest.raises(CorruptStoreError):
            ds[2]
        assert (ds[[0, 1, 3]] == data[[0, 1, 3]]).all()
    rows = [np.ones((n, 2), dtype=np.float32) * n for n in (1, 3, 2)]
    with RaggedDataset(tmp_path / "r", dtype=np.float32, item_shape=(2,), verify=False) as r:
        r.append(rows)
        assert r.verify().ok
    # A ragged record that is not a whole number of rows (written around the dataset).
    with Zrecord(tmp_path / "r", codec="raw") as z:
        z.append([b"123456789ab"])
    with RaggedDataset(tmp_path / "r") as r:
        assert r.verify().bad == [BadRecord(3, "size")]
        with pytest.raises(CorruptStoreError, match=r"record 3 of .* has 11 bytes, not a whole number of 8-byte rows"):
            r[3]
        with pytest.raises(CorruptStoreError, match="record 3"):
            r[[0, 3]]
        got = r[[2, 0, 1]]
        assert [g.tolist() for g in got] == [rows[2].tolist(), rows[0].tolist(), rows[1].tolist()]
    with pytest.raises(TypeError, match="verify"):
        Zrecord(tmp_path / "x", verify="yes")  # type: ignore[arg-type]


# ---- the fuzzing run -----------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the fuzzer forks one child per trial")
def test_fuzzing_store_files_finds_no_crash_hang_or_silent_wrong_result() -> None:
    from stress import fuzz_store
    result = fuzz_store.run(trials=200, seed=1, timeout=60.0, log=lambda line: None)
    outcomes = result["outcomes"]
    assert result["failures"] == []
    assert sum(outcomes.values()) == 200
    assert all(outcomes[name] == 0 for name in fuzz_store.FAILURES)
    # The experiment really corrupted things: most trials are detected.
    assert outcomes["detected"] > 100


def test_flipped_raw_byte_in_a_shard_is_caught_through_the_view_with_verify_true(
    tmp_path: Path,
) -> None:
    # A verifying handle sends every raw record through its checksum, shard by shard: the
    # view's pipelined copy must not take them.
    data = np.random.default_rng(11).integers(0, 256, (300, 16), dtype=np.uint8)
    with DenseDataset(tmp_path / "d", dtype=np.uint8, item_shape=(16,), codec="raw",
                      shard_records=100) as ds:
        ds.append(data)
    _flip_record(tmp_path / "d" / "shard-000001", 50, within=3)  # global record 150
    with DenseDataset(tmp_path / "d", verify=True) as ds:
        with pytest.raises(CorruptStoreError, match="record 50's stored bytes do not match"):
            ds[np.array([10, 150, 250])]
        picks = np.array([10, 149, 151, 250, 0, 299])
        assert np.array_equal(ds[picks], data[picks])
    with DenseDataset(tmp_path / "d") as ds:  # the default leaves raw records unchecked
        assert not np.array_equal(ds[np.array([150])], data[[150]])


# ---- damage that once killed the process -----------------------------------------------------

_OPEN_AND_READ = """
import sys
from loaderx.errors import CorruptStoreError
from loaderx.zrecord import Zrecord
try:
    with Zrecord(sys.argv[1], readonly=sys.argv[2] == "ro", verify=True) as z:
        z.gather([5])
        z.verify()
except CorruptStoreError as exc:
    print("corrupt:", exc)
    sys.exit(3)
"""


def _open_in_child(path: Path, mode: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-c", _OPEN_AND_READ, str(path), mode],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode >= 0, f"killed by signal {-result.returncode}: {result.stderr}"
    return result


@pytest.mark.parametrize("mode", ["ro", "rw"])
def test_a_pending_delete_beyond_the_table_is_corrupt_never_a_signal(
    tmp_path: Path, mode: str
) -> None:
    """sums.zr's record of a delete in progress names entries far past meta.zr's end, and one
    sum is stale, so a read goes looking for the moved entry: CorruptStoreError at open, where
    it used to read past the mapped file (SIGBUS)."""
    from_numpy(tmp_path / "s", np.arange(6400, dtype=np.int64).reshape(100, 64), codec="zstd",
               progress=False)
    _patch(tmp_path / "s" / "sums.zr", 8, (1 << 24).to_bytes(4, "little") + bytes(4))
    _flip(tmp_path / "s" / "sums.zr", 16 + 4 * 5)
    result = _open_in_child(tmp_path / "s", mode)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "sums.zr records a delete from 16777216 records" in result.stdout


def test_a_redo_log_over_a_truncated_table_is_corrupt_never_a_signal(tmp_path: Path) -> None:
    """A complete redo.zr (deleting record 900 of 1000, whose entry lies pages past the cut)
    over a meta.zr cut short: the writable open that replays it raises CorruptStoreError
    instead of writing past the mapped file (SIGBUS)."""
    import struct
    import zlib

    from_numpy(tmp_path / "s", np.arange(8000, dtype=np.int64).reshape(1000, 8), codec="zstd",
               progress=False)
    last = _entry(tmp_path / "s", 999).tobytes()
    body = b"ZRDO" + struct.pack("<IIII", 1, 1000, 999, 1) + struct.pack("<I", 900) + last
    (tmp_path / "s" / "redo.zr").write_bytes(body + struct.pack("<I", zlib.crc32(body)))
    os.truncate(tmp_path / "s" / "meta.zr", HEADER + ENTRY * 50)
    result = _open_in_child(tmp_path / "s", "rw")
    assert result.returncode == 3, result.stdout + result.stderr
    assert "meta.zr is 816 bytes, too short for the 1000 records" in result.stdout


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_recode_refuses_a_damaged_raw_record(tmp_path: Path, codec: Codec) -> None:
    """recode reads its source with every checksum checked: a damaged raw record (a raw store's,
    or an incompressible one in a zstd store) stops it, instead of being checksummed afresh
    into a destination that verifies clean; an existing destination stays as it was."""
    from loaderx.converter import recode

    data = np.random.default_rng(3).integers(0, 256, (200, 64), dtype=np.uint8)
    from_numpy(tmp_path / "src", data, codec=codec, progress=False)
    recode(tmp_path / "src", tmp_path / "dst", codec="zstd", progress=False)
    _flip_record(tmp_path / "src", 70, within=2)
    with pytest.raises(CorruptStoreError, match="record 70's stored bytes do not match"):
        recode(tmp_path / "src", tmp_path / "dst", codec="zstd", overwrite=True, progress=False)
    with DenseDataset(tmp_path / "dst", readonly=True, verify=True) as dst:
        assert dst[:].tobytes() == data.tobytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dst", "src"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the fuzzer forks one child per trial")
def test_fuzzing_sharded_dataset_files_finds_no_crash_hang_escape_or_silent_wrong_result() -> None:
    from stress import fuzz_sharded
    result = fuzz_sharded.run(trials=90, seed=1, timeout=60.0, log=lambda line: None)
    outcomes = result["outcomes"]
    assert result["failures"] == []
    assert sum(outcomes.values()) == 90
    assert all(outcomes[name] == 0 for name in fuzz_sharded.FAILURES)
    # The experiment really corrupted things: most trials are detected, every kind ran.
    assert outcomes["detected"] > 40
    kinds = {kind.split()[0] for kind in result["by_mutation"]}
    assert {"manifest", "journal", "files"} <= kinds
