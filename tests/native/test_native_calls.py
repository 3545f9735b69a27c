"""NativeCalls (loaderx/native_calls.py): the base of Zrecord and View, compiled with mypyc in
wheels. It must import and work where mypy_extensions is absent (it is no runtime dependency),
and keep each subclass's messages."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from loaderx.dataset import DenseDataset
from loaderx._native.calls import StreamsCall, address
from loaderx._store.view import View
from loaderx.zrecord import Zrecord

pytestmark = pytest.mark.compiled


def test_works_without_mypy_extensions(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["mypy_extensions"] = None  # as if it were not installed
        import numpy as np
        from loaderx.dataset import DenseDataset
        with DenseDataset({str(tmp_path / "ds")!r}, dtype=np.int64, codec="raw") as ds:
            ds.append(np.arange(5000))
            got = ds[np.array([3, 4999, 17])]
        assert got.tolist() == [3, 4999, 17], got
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_closed_store_and_view_keep_their_messages(tmp_path: Path) -> None:
    with DenseDataset(str(tmp_path / "ds"), dtype=np.int64, codec="raw") as ds:
        ds.append(np.arange(10))
    store = Zrecord(tmp_path / "ds")
    view = View([store], "pair")
    out = np.empty(2, dtype=np.int64)
    index = np.array([1, 2])
    assert view.gather_fixed(index, out, 8) and out.tolist() == [1, 2]
    assert store.gather_fixed(index[::-1].copy(), out, 8) and out.tolist() == [2, 1]
    view.close()
    with pytest.raises(ValueError, match="^the view over 'pair' is closed$"):
        view.gather_fixed(index, out, 8)
    store.close()
    with pytest.raises(ValueError, match=r"^Zrecord '.*ds' is closed$"):
        store.gather_fixed(index, out, 8)
    with pytest.raises(ValueError, match=r"^Zrecord '.*ds' is closed$"):
        len(store)


def test_the_boxed_handle_halves_follow_the_handle(tmp_path: Path) -> None:
    """The fast path passes the handle as halves boxed when it is set: they must be the
    handle's while it is open, and 0 with it once it is released."""
    ds = DenseDataset(str(tmp_path / "ds"), dtype=np.int64, codec="raw")
    ds.append(np.arange(10))
    store = ds.store
    assert isinstance(store, Zrecord)
    view = View([store], "one")
    for owner in (store, view):
        handle = owner._handle  # noqa: SLF001 - the test reads the private halves
        assert handle != 0
        assert owner._handle_low == handle & 0xFFFF_FFFF  # noqa: SLF001
        assert owner._handle_high == handle >> 32  # noqa: SLF001
    view.close()
    ds.close()
    for owner in (store, view):
        assert (owner._handle, owner._handle_low, owner._handle_high) == (0, 0, 0)  # noqa: SLF001


def test_the_locked_bookkeeping_of_free_threaded_builds_passes_the_thread_tests() -> None:
    """Free-threaded builds count calls in flight under the lock (LOCK_FREE_CALLS is False
    there; the module doc says why). None installs on these machines, so the thread, close and
    fork tests run again in a process told at start-up that the GIL is off: the locked branches
    then serve every call, interpreted or compiled (the flag is read at import)."""
    tests = Path(__file__).resolve().parents[1]
    script = textwrap.dedent(
        f"""
        import sys
        sys._is_gil_enabled = lambda: False
        from loaderx._native import calls as native_calls
        assert not native_calls.LOCK_FREE_CALLS
        import pytest
        sys.exit(pytest.main([
            "-q", "-p", "no:cacheprovider",
            {str(tests / "store" / "test_zrecord_threads.py")!r},
            {str(tests / "store" / "test_zrecord_fork.py")!r},
            {str(tests / "native" / "test_native_calls.py")!r}, "-k", "not locked_bookkeeping",
            {str(tests / "store" / "test_shards.py")!r} + "::test_readers_on_other_threads_stay_correct_while_appends_roll_over",
        ]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout


def test_one_call_gathers_in_both_stream_orders_never_wait_on_each_other_or_on_maintenance(
    tmp_path: Path,
) -> None:
    """lx_store_gather_streams holds every store shared for the call, locked in address order.
    Two threads gather the same two stores in opposite stream orders while a third takes each
    store exclusively (delete, compact) over and over, one thread per store: with the stores
    locked in stream order, each gatherer could hold one store and wait behind the writer
    waiting on the other, which waits for the other gatherer.
    Every thread must finish, and every gather that succeeds must be exact."""
    records = 300
    large = Zrecord(str(tmp_path / "large"), create=True, codec="raw")
    small = Zrecord(str(tmp_path / "small"), create=True, codec="raw")
    large.append([np.full(512, i, dtype=np.int64).tobytes() for i in range(records)])
    small.append([np.int64(3 * i).tobytes() for i in range(records)])
    stop = threading.Event()
    done = {"gathers": 0, "rounds": 0}
    lock = threading.Lock()
    failures: list[BaseException] = []

    def gatherer(owners: list[Zrecord], seed: int) -> None:
        sizes = [4096 if owner is large else 8 for owner in owners]
        call = StreamsCall(list(owners), sizes, 256, 1)
        outs = [np.empty((256, size // 8), dtype=np.int64) for size in sizes]
        for k, out in enumerate(outs):
            call.set_out(0, k, out)
        indices = np.empty(256, dtype=np.int64)
        draw = np.random.default_rng(seed)
        try:
            while not stop.is_set():
                indices[:] = draw.integers(0, records, 256)
                if call.gather(0, address(indices)):
                    for owner, out in zip(owners, outs):
                        if owner is large:
                            assert np.array_equal(out, np.repeat(indices[:, None], 512, axis=1))
                        else:
                            assert np.array_equal(out[:, 0], 3 * indices)
                    with lock:
                        done["gathers"] += 1
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            failures.append(error)

    def maintainer(store: Zrecord) -> None:
        try:
            while not stop.is_set():
                # One record appended and deleted again: the first `records` stay as they
                # were, and delete and compact each take the store exclusively.
                added = store.append([b"\x00" * (4096 if store is large else 8)])
                store.delete([added])
                store.compact()
                with lock:
                    done["rounds"] += 1
        except BaseException as error:  # noqa: BLE001
            failures.append(error)

    # One maintainer per store: a circle needs a writer waiting on each store at once. Daemon
    # threads: a circle fails the test instead of holding the interpreter at exit (with the
    # stores locked in stream order, it formed within a second in each of three runs).
    threads = [
        threading.Thread(target=gatherer, args=([large, small], 1), daemon=True),
        threading.Thread(target=gatherer, args=([small, large], 2), daemon=True),
        threading.Thread(target=maintainer, args=(large,), daemon=True),
        threading.Thread(target=maintainer, args=(small,), daemon=True),
    ]
    stuck = True
    try:
        for thread in threads:
            thread.start()
        time.sleep(1.5)
        stop.set()
        deadline = time.monotonic() + 20.0
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        stuck = any(thread.is_alive() for thread in threads)
        assert not stuck, "a thread never finished: the stores wait on each other"
        assert failures == []
        assert done["gathers"] > 0 and done["rounds"] > 0, done
    finally:
        stop.set()
        if not stuck:  # a stuck call in flight would keep close() waiting
            large.close()
            small.close()
