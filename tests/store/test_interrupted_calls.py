"""Ctrl-C during reads never leaves a call marked in flight, so close() never waits forever,
nor the pool of big results locked, so the next big read never waits forever.

Each read kind runs in a loop that a SIGALRM handler interrupts with KeyboardInterrupt a few
thousand times, at timer delays from 1 to 50 us, so that interrupts land everywhere in the
Python around the native calls (loaderx._native.calls, "Ctrl-C"). After each one, no store or
view may count a call in flight; at the end close() must return. Before marks were taken
inside the `try`, a loop of len(store) left 289 marks in 5,000 interrupts and the close after
the first one waited forever. Reads of pooled results (ds[idx] with the pool's threshold
lowered) hung outright: an interrupt landing in a freed result's callback, just after its
acquire(blocking=False) of the pool's lock, kept the lock (loaderx._native.result_buffers). A
child process runs each kind: a hang ends it, not the suite.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from loaderx.converter import from_numpy
from loaderx.dataset import RaggedDataset

_INTERRUPTED_READS = """
import gc
import signal
import sys
import threading

import numpy as np

from loaderx._native import result_buffers
from loaderx._native.calls import NativeCalls
from loaderx._os.kept_locks import held
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.zrecord import Zrecord

kind, folder = sys.argv[1], sys.argv[2]
indices = np.arange(16, dtype=np.int64)
if kind == "len":
    store = Zrecord(folder + "/plain")
    read = lambda: len(store)
elif kind == "pooled getitem":
    result_buffers.configure(min_bytes=1024)  # 256 records of 8 bytes: 2 KiB results
    store = DenseDataset(folder + "/plain")
    every = np.arange(256, dtype=np.int64)
    read = lambda: store[every]
elif kind in ("gather_into", "sharded gather_into"):
    store = DenseDataset(folder + ("/plain" if kind == "gather_into" else "/sharded"))
    out = np.empty(16, dtype=np.int64)
    read = lambda: store.gather_into(indices, out)
else:
    store = RaggedDataset(folder + "/ragged")
    out = np.empty(16 * 64, dtype=np.uint8)
    offsets = np.empty(17, dtype=np.uint64)
    read = lambda: store.gather_packed(indices, out, offsets)
read()
owners = [o for o in gc.get_objects() if isinstance(o, NativeCalls)]
assert owners
armed = [False]


def handler(signum, frame):
    if armed[0]:
        armed[0] = False
        raise KeyboardInterrupt


signal.signal(signal.SIGALRM, handler)
interrupts = 0
for attempt in range(4000):
    try:
        try:
            armed[0] = True
            signal.setitimer(signal.ITIMER_REAL, 0.000001 * (attempt % 50 + 1))
            for _ in range(200):
                read()
        finally:
            armed[0] = False
            signal.setitimer(signal.ITIMER_REAL, 0)
    except KeyboardInterrupt:
        interrupts += 1
    left = [o._in_flight() for o in owners]
    assert left == [0] * len(owners), f"calls left in flight after interrupt {interrupts}: {left}"
    pool = result_buffers.POOL._lock
    assert not held(pool), f"the result pool's lock was kept by interrupt {interrupts}"
closing = threading.Thread(target=store.close, daemon=True)
closing.start()
closing.join(10.0)
print(interrupts > 1000, not closing.is_alive())
"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("interrupted")
    labels = np.arange(1000, dtype=np.int64)
    from_numpy(base / "plain", labels, codec="raw")
    from_numpy(base / "sharded", labels, codec="raw", shard_records=100)
    with RaggedDataset(base / "ragged", dtype=np.uint8, codec="raw") as ragged:
        ragged.append([np.full(k % 64, k % 251, dtype=np.uint8) for k in range(1000)])
    return base


@pytest.mark.parametrize(
    "kind", ["len", "gather_into", "sharded gather_into", "gather_packed", "pooled getitem"]
)
def test_interrupted_reads_leave_no_call_in_flight(folder: Path, kind: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", _INTERRUPTED_READS, kind, str(folder)],
        capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[2],
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == "True True\n"


def test_an_interrupt_as_close_takes_the_lock_keeps_nothing(folder: Path) -> None:
    """close() takes the store's lock with `with`, which an interrupt can leave held on 3.13
    (loaderx._os.kept_locks): close() then gives the level back, and a second close() works."""
    import threading

    from loaderx._os.kept_locks import held
    from loaderx.zrecord import Zrecord

    from interrupting_locks import TakenThenInterrupted

    store = Zrecord(str(folder / "plain"))
    lock = TakenThenInterrupted(interrupts=1)
    store._lock = lock
    store._idle = threading.Condition(lock)
    with pytest.raises(KeyboardInterrupt):
        store.close()
    assert not held(lock)
    store.close()
    assert store.closed
