"""A view's routing check at the C ABI once it trusts the process's length generation (it reads
no store's length while nothing in the process changed one): it still refuses a view made stale
by a delete through the same handle, from threads gathering meanwhile, and by a delete in
another process, which no generation of this process sees (a forked child's stores, before its
first call on them, hold no lock that keeps the parent's delete out).

zig/src/view/view.zig tests the same from Zig, with appends and compaction.
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

from forked_child import run_child, wait_child
from raw_store_handles import RECORD, open_store

from loaderx._native import library as _native

lib = _native.lib
COUNT = 10


def gather(handle: int, indices: list[int]) -> tuple[int, bytes]:
    """(status, bytes written) of a dense view gather; the buffer starts as 0xEE bytes."""
    index_array = (ctypes.c_int64 * len(indices))(*indices)
    out = (ctypes.c_uint8 * (RECORD * len(indices)))(*([0xEE] * (RECORD * len(indices))))
    code = lib.lx_view_gather_fixed(handle, index_array, len(indices), out, RECORD)
    return code, bytes(out)


def _stores_and_view(tmp_path: Path) -> tuple[list[int], int]:
    """Three stores of COUNT records (store k's record i is RECORD bytes of 10 * k + i) and a
    view over them; global record g is byte g."""
    stores = [open_store(tmp_path / f"s{k}", COUNT * k, COUNT) for k in range(3)]
    handle = ctypes.c_void_p()
    code = lib.lx_view_open((ctypes.c_void_p * 3)(*stores), 3, ctypes.byref(handle))
    assert code == _native.OK, lib.lx_last_error()
    assert handle.value
    return stores, handle.value


def _close(stores: list[int], view: int) -> None:
    lib.lx_view_close(view)
    for store in stores:
        lib.lx_store_close(store)


def _delete(store: int, index: int) -> int:
    return int(lib.lx_store_delete(store, (ctypes.c_int64 * 1)(index), 1))


def _expect(indices: list[int], result: tuple[int, bytes]) -> None:
    code, out = result
    assert code == _native.OK, lib.lx_last_error()
    assert out == bytes(b for g in indices for b in [g] * RECORD)


def test_gathers_on_threads_refuse_every_call_after_a_delete_through_the_same_handle(
    tmp_path: Path,
) -> None:
    stores, view = _stores_and_view(tmp_path)
    deleted = threading.Event()
    failures: list[str] = []

    def reader(seed: int) -> None:
        indices = [(seed * 7 + i * 11) % (3 * COUNT) for i in range(8)]
        refused_after = 0
        while refused_after < 50:
            after = deleted.is_set()  # read before the call: a delete done by then is seen
            code, out = gather(view, indices)
            if code == _native.OK:
                if after:
                    failures.append(f"a gather after the delete returned {out[:8]!r}")
                    return
                if out != bytes(b for g in indices for b in [g] * RECORD):
                    failures.append(f"a gather before the delete returned {out!r}")
                    return
            elif code == _native.VIEW_STALE:
                refused_after += after
            else:
                failures.append(f"status {code}: {lib.lx_last_error()!r}")
                return

    threads = [threading.Thread(target=reader, args=(seed,)) for seed in range(3)]
    for thread in threads:
        thread.start()
    try:
        assert _delete(stores[1], 4) == _native.OK, lib.lx_last_error()
        deleted.set()
    finally:
        for thread in threads:
            thread.join()
        _close(stores, view)
    assert failures == []


def test_another_handle_cannot_delete_under_the_view_and_the_view_reads_on(tmp_path: Path) -> None:
    stores, view = _stores_and_view(tmp_path)
    try:
        _expect([25, 3], gather(view, [25, 3]))
        other = ctypes.c_void_p()
        code = lib.lx_store_open(os.fsencode(tmp_path / "s0"), 0, ctypes.byref(other))
        assert code == _native.OK, lib.lx_last_error()
        other_store = other.value
        assert other_store
        try:
            assert _delete(other_store, 0) == _native.STORE_LOCKED
        finally:
            lib.lx_store_close(other_store)
        _expect([25, 3], gather(view, [25, 3]))
    finally:
        _close(stores, view)


def _child_gathers_while_the_parent_deletes(tmp_path: Path, child_indices: list[int]) -> int:
    """Forks a child that gathers child_indices through the inherited view, lets the parent try
    a delete of store 0's first record, then gathers them again: OK with the same bytes when the
    delete was refused, VIEW_STALE when it ran. Returns the parent's delete status."""
    stores, view = _stores_and_view(tmp_path)
    # The parent's view has checked its routing: the child starts with the generation it vouched
    # for in its copy of the parent's memory.
    _expect([25], gather(view, [25]))
    to_parent_r, to_parent_w = os.pipe()
    to_child_r, to_child_w = os.pipe()
    try:

        def child() -> None:
            _expect(child_indices, gather(view, child_indices))
            _expect(child_indices, gather(view, child_indices))
            os.write(to_parent_w, b"r")
            status = os.read(to_child_r, 1)
            code, out = gather(view, child_indices)
            if status == b"d":
                assert code == _native.VIEW_STALE, (code, out)
                message = lib.lx_last_error().decode()
                assert "shard 0 holds 9 records, not the 10" in message, message
            else:
                _expect(child_indices, (code, out))

        pid = run_child(child)
        try:
            assert os.read(to_parent_r, 1) == b"r"
            deleted = _delete(stores[0], 0)
            os.write(to_child_w, b"d" if deleted == _native.OK else b"k")
        finally:
            wait_child(pid)
        return deleted
    finally:
        for fd in (to_parent_r, to_parent_w, to_child_r, to_child_w):
            os.close(fd)
        _close(stores, view)


def test_a_forked_child_refuses_a_view_its_parent_made_stale(tmp_path: Path) -> None:
    # The child touches only the last store: its handles of stores 0 and 1 hold no lock, the
    # parent's delete runs, and only the shared mapping tells the child. Its view must not have
    # trusted the generation for them.
    assert _child_gathers_while_the_parent_deletes(tmp_path, [25, 27]) == _native.OK


def test_a_forked_child_that_read_every_store_keeps_the_parents_delete_out(tmp_path: Path) -> None:
    # The child re-locked every store on its first gather: the parent's delete is refused, and
    # the child's view, trusting the generation now, reads on.
    assert _child_gathers_while_the_parent_deletes(tmp_path, [3, 15, 25]) == _native.STORE_LOCKED
