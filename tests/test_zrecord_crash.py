"""Crash safety: a writer process killed with SIGKILL mid-append leaves a truncated, intact store."""

from __future__ import annotations

import os
import random
import signal
import struct
import subprocess
import sys
import time
import zlib


from loaderx.zrecord import Zrecord

KILLS = 24

HEADER = struct.Struct("<QII")  # own index, payload size, crc32 of the payload


def payload_of(index: int) -> bytes:
    """The deterministic payload of record `index`: sometimes random, sometimes compressible."""
    draw = random.Random(index)
    size = draw.randrange(0, 12_000)
    if index % 3 == 0:
        return draw.randbytes(size)
    return bytes(draw.randrange(0, 8) for _ in range(64)) * (size // 64)


def record_of(index: int) -> bytes:
    payload = payload_of(index)
    return HEADER.pack(index, len(payload), zlib.crc32(payload)) + payload


# The writer appends batches of self-describing records forever, alternating codecs, and says
# "ready" after its first batch, so every kill lands while it is really writing.
WRITER = """
import random, sys
sys.path.insert(0, {root!r})
from loaderx.zrecord import Zrecord
from tests.test_zrecord_crash import record_of
store = Zrecord({path!r}, create=True, codec="zstd")
draw = random.Random({seed})
batches = 0
while True:
    first = len(store)
    batch = [record_of(first + k) for k in range(draw.randrange(1, 40))]
    assert store.append(batch, codec=draw.choice(["raw", "zstd"])) == first
    batches += 1
    if batches == 1:
        print("ready", flush=True)
    print("committed", first + len(batch), flush=True)
"""


def check_intact(path: str) -> int:
    """Reopens the store, checks every record's index and checksum, and the newest ones byte for
    byte against what the writer wrote; appends one more record. Returns the new length."""
    with Zrecord(path, create=False) as store:
        length = len(store)
        for start in range(0, length, 500):
            indices = list(range(start, min(start + 500, length)))
            for index, record in zip(indices, store.gather(indices)):
                own, size, crc = HEADER.unpack_from(record)
                assert (own, size) == (index, len(record) - HEADER.size), f"record {index}"
                assert zlib.crc32(record[HEADER.size :]) == crc, f"record {index} checksum"
        newest = list(range(max(0, length - 100), length))
        assert store.gather(newest) == [record_of(index) for index in newest]
        assert store.append([record_of(length)]) == length
        assert store.gather(-1) == [record_of(length)]
        return length + 1


def test_sigkill_during_appends_truncates_and_never_corrupts(store_path: str) -> None:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    draw = random.Random(7)
    Zrecord(store_path, create=True).close()
    lengths = []
    for kill in range(KILLS):
        script = WRITER.format(root=root, path=store_path, seed=kill)
        writer = subprocess.Popen(
            [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        try:
            assert writer.stdout is not None
            line = writer.stdout.readline()
            if line != b"ready\n":
                writer.kill()
                raise AssertionError(f"writer did not start: {line!r} {writer.communicate()[1]!r}")
            time.sleep(draw.uniform(0.0, 0.25))
            assert writer.poll() is None, writer.communicate()[1]
            os.kill(writer.pid, signal.SIGKILL)
            said = writer.communicate()[0].split()
        finally:
            writer.kill()
            writer.wait()
        assert writer.returncode == -signal.SIGKILL
        # Every append the writer saw return is still there after the kill.
        committed = [int(word) for word in said if word.isdigit()]
        assert committed, "the writer reported no append"
        length = check_intact(store_path)
        assert length - 1 >= max(committed)
        lengths.append(length)
    # Lengths only grow: a kill loses at most the batch in flight, never a committed one.
    assert lengths == sorted(lengths)
    assert lengths[-1] >= 2 * KILLS
