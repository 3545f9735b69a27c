"""fork() while threads are busy in every store operation: the child must never hang.

The parent's threads gather, append, delete, compact and read stats on one store without pause
while the main thread forks again and again. Each child uses the store it inherited (and a new
handle) for every operation under an alarm, so a hang kills the child and fails the test rather
than hanging CI. Records carry their own id, so every read is checked byte for byte.
"""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from loaderx.dataset import DenseDataset
from loaderx.errors import StoreLockedError
from loaderx._store.schema import Codec
from loaderx.zrecord import Zrecord

from forked_child import run_child, wait_child

pytestmark = pytest.mark.compiled

FORKS = 40


def record(ident: int) -> bytes:
    body = hashlib.sha256(ident.to_bytes(8, "little")).digest() * (1 + ident % 7)
    return ident.to_bytes(8, "little") + body


def ident_of(data: bytes) -> int:
    ident = int.from_bytes(data[:8], "little")
    assert data == record(ident), f"record {ident} has wrong bytes"
    return ident


class Busy:
    """Threads doing every operation on one store until stopped, recording what they did."""

    def __init__(self, store: Zrecord, next_id: int, writers: bool) -> None:
        self.store = store
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.appended: list[int] = []
        self.deleted: list[int] = []
        self.errors: list[BaseException] = []
        self.next_id = next_id
        loops = [self.gather, self.stats]
        if writers:
            loops += [self.append, self.delete, self.compact]
        self.threads = [threading.Thread(target=self.guard, args=(loop,)) for loop in loops]

    def guard(self, loop: Callable[[random.Random], None]) -> None:
        draw = random.Random(loop.__name__)
        try:
            while not self.stop.is_set():
                loop(draw)
        except BaseException as exc:
            self.errors.append(exc)

    def gather(self, draw: random.Random) -> None:
        length = len(self.store)
        picks = [draw.randrange(length) for _ in range(64)] if length else []
        try:
            for data in self.store.gather(picks):
                ident_of(data)
        except IndexError:
            pass  # a delete shortened the store between len() and the gather

    def stats(self, draw: random.Random) -> None:
        assert self.store.stats()["records"] >= 0

    def append(self, draw: random.Random) -> None:
        time.sleep(0.001)  # keeps the store small enough to check whole in every child
        with self.lock:
            ids = list(range(self.next_id, self.next_id + draw.randrange(1, 20)))
            self.next_id = ids[-1] + 1
        self.store.append([record(i) for i in ids])
        with self.lock:
            self.appended.extend(ids)

    def delete(self, draw: random.Random) -> None:
        # The only deleting thread: nothing else moves records between the gather and delete.
        length = len(self.store)
        if length < 10:
            return
        targets = sorted({draw.randrange(length) for _ in range(3)})
        victims = [ident_of(data) for data in self.store.gather(targets)]
        try:
            self.store.delete(targets)
        except StoreLockedError:
            return  # a child has the store open
        with self.lock:
            self.deleted.extend(victims)

    def compact(self, draw: random.Random) -> None:
        try:
            self.store.compact()
        except StoreLockedError:
            pass
        time.sleep(0.001)

    def __enter__(self) -> Busy:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()
        assert not self.errors, self.errors


def every_operation_in_child(store: Zrecord, path: str, parent_writes: bool) -> Callable[[], None]:
    def body() -> None:
        # The first call re-takes the child's shared lock: from then on the parent can no
        # longer delete or compact under the child.
        assert store.stats()["records"] >= 0
        length = len(store)
        for data in store.gather(slice(None)):
            ident_of(data)
        assert length < 100_000, "the parent appended more than the children can check quickly"
        if parent_writes:
            # The parent's handle is the writer: the child is refused, never blocked.
            with pytest.raises(StoreLockedError, match="another handle is writing"):
                store.append([record(10**9)])
        else:
            assert store.append([record(10**9 + os.getpid())]) >= length
        # The parent keeps the store open: maintenance is refused, not hung.
        calls: list[Callable[[], None]] = [
            lambda: store.delete([0]),
            store.compact,
            lambda: store.train_dict([b"s" * 64] * 40, 1024),
        ]
        for call in calls:
            with pytest.raises(StoreLockedError, match="needs the store to itself"):
                call()
        with Zrecord(path, readonly=True) as other:
            for data in other.gather(slice(None)):
                ident_of(data)
        store.close()

    return body


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_fork_while_threads_use_every_operation(store_path: str, codec: Codec) -> None:
    store = Zrecord(store_path, codec=codec, create=True)
    store.append([record(i) for i in range(500)])
    with Busy(store, next_id=500, writers=True) as busy:
        for _ in range(FORKS):
            pid = run_child(every_operation_in_child(store, store_path, parent_writes=True))
            wait_child(pid)
    expected = (set(range(500)) | set(busy.appended)) - set(busy.deleted)
    found = [ident_of(data) for data in store.gather(slice(None))]
    assert sorted(found) == sorted(expected)
    store.close()
    with Zrecord(store_path) as reopened:
        assert sorted(ident_of(data) for data in reopened.gather(slice(None))) == sorted(expected)


def test_child_of_a_reading_parent_can_write(store_path: str) -> None:
    """When no handle writes at fork time, the child may become the writer (one at a time)."""
    store = Zrecord(store_path, create=True)
    store.append([record(i) for i in range(100)])
    store.close()
    store = Zrecord(store_path)  # this handle has not written: it holds no writer lock
    pids = []
    with Busy(store, next_id=100, writers=False):
        for _ in range(FORKS // 2):
            pid = run_child(every_operation_in_child(store, store_path, parent_writes=False))
            wait_child(pid)  # one child at a time: each is the only writer while it lives
            pids.append(pid)
    found = sorted(ident_of(data) for data in store.gather(slice(None)))
    assert found == sorted([*range(100), *(10**9 + pid for pid in pids)])
    # The children are gone and with them their writer locks.
    assert store.append([record(5000)]) == 100 + len(pids)
    store.close()


def test_fork_while_threads_read_a_sharded_dataset(tmp_path: Path) -> None:
    """The native view over several stores (and its Python wrapper) is reset in the child too."""
    path = str(tmp_path / "sharded")
    data = np.arange(4000, dtype=np.int32).reshape(400, 10)
    dataset = DenseDataset(path, dtype=np.int32, item_shape=(10,), shard_records=64)
    dataset.append(data)
    assert dataset.sharded
    stop = threading.Event()
    errors: list[BaseException] = []

    def read_loop(seed: int) -> None:
        draw = np.random.default_rng(seed)
        try:
            while not stop.is_set():
                picks = draw.integers(0, 400, size=256)
                np.testing.assert_array_equal(dataset[picks], data[picks])
        except BaseException as exc:
            errors.append(exc)

    def child() -> None:
        np.testing.assert_array_equal(dataset[:], data)
        with pytest.raises(StoreLockedError, match="needs the store to itself"):
            dataset.compact()
        dataset.close()

    threads = [threading.Thread(target=read_loop, args=(seed,)) for seed in range(3)]
    for thread in threads:
        thread.start()
    try:
        for _ in range(FORKS):
            wait_child(run_child(child))
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert not errors, errors
    np.testing.assert_array_equal(dataset[:], data)
    dataset.close()


def test_fork_while_a_thread_holds_the_commit_lock(tmp_path: Path) -> None:
    """A child forked while a parent thread appends to a sharded dataset (holding its commit
    lock, an flock) must not keep that lock: the parent takes it again while the child lives,
    and the child's own append gets it once the parent's thread is done."""
    import fcntl

    from loaderx._os.lock_descriptors import open_count
    from loaderx._store.layout import LOCK_FILE
    from loaderx._store.shard_locks import commit_lock

    path = str(tmp_path / "sharded")
    with DenseDataset(path, dtype=np.int64, item_shape=(), shard_records=100) as writer:
        writer.append(np.arange(250, dtype=np.int64))
    # Not written through before the fork, so the child's append is not refused for the
    # parent's writer lock (a store has one writer at a time).
    dataset = DenseDataset(path, shard_records=100)
    held, release = threading.Event(), threading.Event()
    checked, tell_child = os.pipe()
    ready, tell_parent = os.pipe()

    def hold() -> None:
        with commit_lock(path):
            held.set()
            release.wait()

    def child() -> None:
        assert open_count() == 0  # the inherited lock descriptor is closed (at fork)
        os.write(tell_parent, b"x")  # so the parent may check the lock now
        assert os.read(checked, 1) == b"x"  # the parent has checked it
        dataset.append(np.arange(1000, 1003, dtype=np.int64))
        dataset.close()

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait()
    pid = run_child(child)
    release.set()
    holder.join()
    # The child runs (its copies were closed at the fork); a child that failed before saying
    # so fails the test by its exit status below, not by a hang here.
    import select

    if select.select([ready], [], [], 30)[0]:
        assert os.read(ready, 1) == b"x"
    probe = os.open(os.path.join(path, LOCK_FILE), os.O_RDWR)
    try:  # before the fix the child's copy kept the lock: this raised BlockingIOError
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(probe)
        os.write(tell_child, b"x")
        for fd in (tell_child, checked, ready, tell_parent):
            os.close(fd)
    wait_child(pid)  # the child's append took the lock (a hang fails it by its alarm)
    expected = np.concatenate([np.arange(250), np.arange(1000, 1003)])
    with DenseDataset(path, shard_records=100) as reopened:
        np.testing.assert_array_equal(reopened[:], expected)
    dataset.append(np.arange(7, dtype=np.int64))  # the parent's own append is not blocked
    assert len(dataset) == 260
    dataset.close()


_FORK_DURING_ROLLOVER = """
import os, signal, sys, threading, time
import numpy as np
from loaderx.dataset import DenseDataset

sys.setswitchinterval(1e-6)
tried = hung = 0
deadline = time.monotonic() + 40
for trial in range(400):
    if time.monotonic() > deadline or tried >= 20:
        break
    ds = DenseDataset(os.path.join(sys.argv[1], f"d{trial}"), dtype=np.int64, item_shape=(4,),
                      codec="raw", shard_records=8)
    ds.append(np.zeros((8, 4), np.int64))  # full: the next append rolls over
    rolling = threading.Thread(target=ds.append, args=(np.ones((1, 4), np.int64),))
    rolling.start()
    pid = None
    while rolling.is_alive():
        if ds._sharding.locked():  # the rollover is running on the other thread now
            pid = os.fork()
            break
    if pid == 0:
        signal.alarm(10)
        try:
            ds.append(np.ones((1, 4), np.int64))  # 9 + 1 > 8: rolls over too
        except Exception:
            pass  # refused (the parent writes this dataset): fine
        os._exit(0)
    rolling.join()
    if pid:
        tried += 1
        _, status = os.waitpid(pid, 0)
        hung += os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGALRM
    ds.close()
print(tried > 0, hung)
"""


def test_a_child_forked_during_a_rollover_never_hangs(tmp_path: Path) -> None:
    """A thread rolls a single-store dataset over (holding the handle's rollover lock) while
    another forks: the child's own rollover gets a fresh lock (loaderx/fork_safe_lock.py) and
    appends or is refused, where it used to block for good on the inherited lock."""
    result = subprocess.run([sys.executable, "-c", _FORK_DURING_ROLLOVER, str(tmp_path)],
                            capture_output=True, text=True, timeout=180,
                            cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0, result.stderr
    assert result.stdout == "True 0\n"


# A pending Ctrl-C at the end of fork(): the C-level "before" hook registered first runs last,
# right before the fork, and sends SIGINT without running any bytecode, so the signal is only
# pending (as when the kernel delivers it during the fork). The first Python code after the
# fork in the parent takes it.
_SIGINT_AT_FORK = """
import ctypes, functools, os, signal, sys, threading
libc = ctypes.CDLL(None)
os.register_at_fork(before=functools.partial(libc.kill, os.getpid(), signal.SIGINT))
from loaderx._os.folder_swap import FolderLock
interrupted = False
try:
    pid = os.fork()
    if pid == 0:
        with FolderLock(sys.argv[1], True):
            pass
        os._exit(0)
    os.waitpid(pid, 0)
except KeyboardInterrupt:  # raised as fork() returns: the pid is lost with it
    interrupted = True
    os.wait()
taker = threading.Thread(target=lambda: FolderLock(sys.argv[1], True).release(), daemon=True)
taker.start()
taker.join(10)
print(interrupted, taker.is_alive())
"""


def test_a_ctrl_c_during_fork_neither_wedges_the_lock_registry_nor_gets_lost(
    tmp_path: Path,
) -> None:
    """The registry of lock descriptors is locked across fork. Its parent handler was Python
    code, where the pending Ctrl-C raised before the release; CPython drops a fork handler's
    exception, so the registry stayed locked and every later FolderLock blocked, and the
    Ctrl-C was lost. Now the handlers are the lock's own methods: the Ctrl-C reaches the
    caller of fork and the next FolderLock is taken."""
    result = subprocess.run([sys.executable, "-c", _SIGINT_AT_FORK, str(tmp_path)],
                            capture_output=True, text=True, timeout=120,
                            cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0, result.stderr
    assert result.stdout == "True False\n", result.stderr


# A Ctrl-C breaks off the "before" hook's wait for the registry lock while another thread
# holds it: the fork goes on without the lock, and the parent's "after" hook must not release
# the other thread's hold. The child must still get a usable registry.
_SIGINT_WHILE_WAITING_AT_FORK = """
import os, signal, sys, threading, time
from loaderx._os import lock_descriptors
from loaderx._os.folder_swap import FolderLock
held, done = threading.Event(), threading.Event()
errors = []
def hold():
    lock_descriptors._registry_lock.acquire()
    held.set()
    time.sleep(1.0)
    try:  # the fork's "after" hook ran meanwhile: it must not have released this hold
        lock_descriptors._registry_lock.release()
        errors.append("released")
    except RuntimeError as error:
        errors.append(repr(error))
holder = threading.Thread(target=hold)
holder.start()
held.wait()
threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
pid = os.fork()
if pid == 0:
    signal.alarm(10)
    with FolderLock(sys.argv[1], True):
        pass
    os._exit(0)
_, status = os.waitpid(pid, 0)
holder.join()
with FolderLock(sys.argv[1], True):
    pass
print(os.waitstatus_to_exitcode(status), errors)
"""


def test_a_ctrl_c_while_fork_waits_for_the_registry_leaves_another_threads_hold(
    tmp_path: Path,
) -> None:
    """With a plain Lock the parent's release after such a fork released the holder's lock
    (and the holder's own release then raised)."""
    result = subprocess.run([sys.executable, "-c", _SIGINT_WHILE_WAITING_AT_FORK, str(tmp_path)],
                            capture_output=True, text=True, timeout=120,
                            cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0, result.stderr
    assert result.stdout == "0 ['released']\n", result.stderr


def test_a_child_forked_while_a_thread_holds_a_sharded_handles_guard_can_append(
    tmp_path: Path,
) -> None:
    """A sharded handle's in-process guard (taken by every append, delete and compact) is a
    fork-safe lock: a child forked while a parent thread held it gets it back unlocked, where
    a plain lock stayed held for good in the child (its first append blocked)."""
    path = str(tmp_path / "sharded")
    with DenseDataset(path, dtype=np.int64, item_shape=(), shard_records=100) as writer:
        writer.append(np.arange(250, dtype=np.int64))
    dataset = DenseDataset(path, shard_records=100)
    from loaderx._store.sharded_store import ShardedStore

    assert isinstance(dataset.store, ShardedStore)
    guard = dataset.store._guard  # noqa: SLF001
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with guard:
            held.set()
            release.wait()

    def child() -> None:
        dataset.append(np.arange(1000, 1003, dtype=np.int64))
        dataset.close()

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait()
    try:
        pid = run_child(child)
    finally:
        release.set()
        holder.join()
    wait_child(pid)  # a child blocked on the inherited guard dies of its alarm
    expected = np.concatenate([np.arange(250), np.arange(1000, 1003)])
    with DenseDataset(path, shard_records=100) as reopened:
        np.testing.assert_array_equal(reopened[:], expected)
    dataset.close()


@pytest.mark.parametrize("handle", ["zrecord", "dataset"])
def test_a_child_of_a_writer_checks_again_before_writing_a_store_rolled_over_since(
    tmp_path: Path, handle: str
) -> None:
    """A handle that has written a single-store dataset skips its shard check from then on: it
    is the store's writer, so nothing can roll the store over. A forked child's copy is not the
    writer (the parent keeps the lock), yet it kept the skip. Once the parent closed and another
    handle rolled the dataset over (the store became shard '.', its count in the manifest), the
    child's append grew the sealed store and the dataset no longer opened ("the counts
    disagree"). The child's first write now checks again and refuses."""
    path = tmp_path / "single"
    with DenseDataset(path, dtype=np.int64, codec="raw") as ds:
        ds.append(np.arange(10, dtype=np.int64))
    one = np.array([10], dtype=np.int64)
    if handle == "zrecord":
        writer: Zrecord | DenseDataset = Zrecord(path)
        refused: type[Exception] = ValueError

        def write() -> None:
            assert isinstance(writer, Zrecord)
            writer.append([one.tobytes()])
    else:
        writer = DenseDataset(path)
        refused = StoreLockedError

        def write() -> None:
            assert isinstance(writer, DenseDataset)
            writer.append(one)

    write()  # the parent's handle is the writer now
    rolled, ready = os.pipe()

    def child() -> None:
        os.close(ready)
        assert os.read(rolled, 1) == b"r"
        try:
            write()
        except refused as error:
            assert "shard '.'" in str(error) or "became a sharded dataset" in str(error)
        else:
            raise AssertionError("the child appended to a store its dataset has sealed")
        writer.close()

    pid = run_child(child)
    os.close(rolled)
    writer.close()
    with DenseDataset(path, shard_records=12) as other:
        other.append(np.arange(11, 16, dtype=np.int64))  # rolls over: '.' sealed at 12
    os.write(ready, b"r")
    os.close(ready)
    wait_child(pid)
    with DenseDataset(path, readonly=True) as reopened:
        assert reopened[:].tolist() == list(range(16))


def test_a_child_never_deletes_from_a_store_rolled_over_right_after_its_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A forked child's copy of a plain Zrecord on a single store deletes: it checked that no
    manifest listed the store, and then another process (the parent, which had closed its own
    handle) rolled the store over into a sharded dataset before the native delete. The delete
    went through on the sealed store, and the dataset no longer opened ("the counts
    disagree"). The check now runs again inside the delete, once it holds the store
    exclusively: the child's delete refuses and changes nothing. The pause is injected right
    after the child's first check, where the parent rolls the store over."""
    from loaderx._store import zrecord as zrecord_module

    path = tmp_path / "single"
    with DenseDataset(path, dtype=np.int64, codec="raw") as ds:
        ds.append(np.arange(6, dtype=np.int64))
    parent = os.getpid()
    checked_read, checked_write = os.pipe()
    rolled_read, rolled_write = os.pipe()
    plain_lookup = zrecord_module.sharded_dataset_of  # type: ignore[attr-defined]
    paused: list[bool] = []

    def lookup_then_wait(folder: str) -> str | None:
        found = plain_lookup(folder)
        if os.getpid() != parent and not paused:  # the child's first check has passed
            paused.append(True)
            os.write(checked_write, b"c")
            assert os.read(rolled_read, 1) == b"r"
        return found

    monkeypatch.setattr(zrecord_module, "sharded_dataset_of", lookup_then_wait)
    store = Zrecord(path)

    def child() -> None:
        try:
            store.delete([0])
        except ValueError as error:
            assert "delete refused" in str(error) and "shard '.'" in str(error), error
        else:
            raise AssertionError("the child deleted from a store its dataset has sealed")
        store.close()

    pid = run_child(child)
    os.close(checked_write)  # a child that dies early ends the read below
    os.close(rolled_read)
    store.close()
    try:
        assert os.read(checked_read, 1) == b"c", "the child never reached its check"
        with DenseDataset(path, shard_records=10) as other:
            other.append(np.arange(6, 15, dtype=np.int64))  # rolls over: '.' sealed at 10
        os.write(rolled_write, b"r")
    finally:
        os.close(checked_read)
        os.close(rolled_write)
        wait_child(pid)
    for readonly in (True, False):
        with DenseDataset(path, readonly=readonly) as reopened:
            assert reopened[:].tolist() == list(range(15))
