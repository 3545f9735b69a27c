"""NativeCalls (loaderx/native_calls.py): the base of Zrecord and View, compiled with mypyc in
wheels. It must import and work where mypy_extensions is absent (it is no runtime dependency),
and keep each subclass's messages."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from loaderx.dataset import DenseDataset
from loaderx.view import View
from loaderx.zrecord import Zrecord


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
    tests = Path(__file__).parent
    script = textwrap.dedent(
        f"""
        import sys
        sys._is_gil_enabled = lambda: False
        from loaderx import native_calls
        assert not native_calls.LOCK_FREE_CALLS
        import pytest
        sys.exit(pytest.main([
            "-q", "-p", "no:cacheprovider",
            {str(tests / "test_zrecord_threads.py")!r},
            {str(tests / "test_zrecord_fork.py")!r},
            {str(tests / "test_native_calls.py")!r}, "-k", "not locked_bookkeeping",
            {str(tests / "test_shards.py")!r} + "::test_readers_on_other_threads_stay_correct_while_appends_roll_over",
        ]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout
