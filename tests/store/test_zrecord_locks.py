"""Cross-process and cross-handle locking: one writer, and exclusive maintenance against open
handles, readers in other processes, waiting opens and interleaved appends, deletes and
compactions.

Everything runs for real: second handles in this process, other processes (killed with
SIGKILL to show the kernel releases their locks). Records carry their own id, so every check
is on exact bytes. Read-only opens are in test_zrecord_readonly.py, lock and store files met
through links in test_zrecord_links.py; lock_cases.py holds what they share.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from loaderx.errors import StoreLockedError
from loaderx._store.schema import Codec
from loaderx.zrecord import Zrecord

from lock_cases import finish, folder_digest, ident_of, python, record


def expect_line(process: subprocess.Popen[str], wanted: str) -> None:
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if line != wanted:
        _, err = process.communicate(timeout=60)
        raise AssertionError(f"expected {wanted!r} from the child, got {line!r}; stderr:\n{err}")


def test_second_handle_in_one_process_cannot_write(store_path: str) -> None:
    first = Zrecord(store_path, create=True)
    second = Zrecord(store_path)
    assert first.append([record(0), record(1)]) == 0
    with pytest.raises(StoreLockedError, match="writer.lock") as info:
        second.append([record(99)])
    assert repr(store_path) in str(info.value)
    with pytest.raises(StoreLockedError):
        second.append_fixed(np.zeros(16, np.uint8), 8)
    assert [ident_of(r) for r in second.gather(slice(None))] == [0, 1]
    first.close()
    # The writer lock goes with the handle that held it.
    assert second.append([record(2)]) == 2
    second.close()
    with Zrecord(store_path) as reopened:
        assert [ident_of(r) for r in reopened.gather(slice(None))] == [0, 1, 2]


def test_second_process_cannot_write_until_the_writer_is_killed(store_path: str) -> None:
    with Zrecord(store_path, create=True) as store:
        store.append([record(0)])
    writer = python(f"""
        import sys
        from loaderx.zrecord import Zrecord
        store = Zrecord({store_path!r})
        store.append([{record(1)!r}])
        print("writing", flush=True)
        sys.stdin.readline()
    """)
    with writer:  # leaving the block closes its pipes
        try:
            expect_line(writer, "writing")
            with Zrecord(store_path) as store:
                with pytest.raises(StoreLockedError, match="another handle is writing"):
                    store.append([record(2)])
                # A reader is never blocked by the writer.
                assert [ident_of(r) for r in store.gather(slice(None))] == [0, 1]
                writer.send_signal(signal.SIGKILL)
                writer.wait(timeout=60)
                # The kernel released the dead writer's lock: no stale PID file to clean up.
                assert store.append([record(2)]) == 2
                assert [ident_of(r) for r in store.gather(slice(None))] == [0, 1, 2]
        finally:
            if writer.poll() is None:
                writer.kill()
                writer.wait()


def test_two_processes_appending_never_share_an_index(store_path: str) -> None:
    """The issue's experiment in small: two appending processes; every acknowledged record
    survives exactly once, because the second writer is refused instead of interleaving."""
    Zrecord(store_path, create=True).close()
    children = []
    for base in (0, 1_000_000):
        children.append(python(f"""
            from loaderx.errors import StoreLockedError
            from loaderx.zrecord import Zrecord
            import hashlib
            def record(ident):
                body = hashlib.sha256(ident.to_bytes(8, "little")).digest() * (1 + ident % 5)
                return ident.to_bytes(8, "little") + body
            acked = []
            for attempt in range(300):
                with Zrecord({store_path!r}) as store:
                    batch = [{base} + attempt * 4 + k for k in range(4)]
                    try:
                        store.append([record(i) for i in batch])
                    except StoreLockedError:
                        continue
                    acked.extend(batch)
            print(" ".join(map(str, acked)))
        """))
    acked: list[int] = []
    for child in children:
        acked.extend(int(word) for word in finish(child).split())
    with Zrecord(store_path, readonly=True) as store:
        found = [ident_of(r) for r in store.gather(slice(None))]
    assert sorted(found) == sorted(acked)
    assert len(set(found)) == len(found)


def test_maintenance_is_refused_while_another_handle_is_open(tmp_path: Path) -> None:
    path = str(tmp_path / "store")
    dict_path = str(tmp_path / "dict_store")
    store = Zrecord(path, create=True)
    store.append([record(i) for i in range(10)])
    dict_store = Zrecord(dict_path, codec="zstd_dict", create=True)
    reader = Zrecord(path, readonly=True)
    dict_reader = Zrecord(dict_path, readonly=True)
    before = folder_digest(path), folder_digest(dict_path)
    with pytest.raises(StoreLockedError, match="open.lock") as info:
        store.delete([0])
    assert "delete needs the store to itself" in str(info.value)
    assert repr(path) in str(info.value)
    with pytest.raises(StoreLockedError, match="compact needs the store to itself"):
        store.compact()
    samples = [record(i) * 20 for i in range(64)]
    with pytest.raises(StoreLockedError, match="train_dict needs the store to itself"):
        dict_store.train_dict(samples, 4096)
    assert (folder_digest(path), folder_digest(dict_path)) == before
    # The refused calls left both handles working, the reader included.
    assert [ident_of(r) for r in reader.gather(slice(None))] == list(range(10))
    reader.close()
    dict_reader.close()
    store.delete([0, 3])
    store.compact()
    assert sorted(ident_of(r) for r in store.gather(slice(None))) == [1, 2, 4, 5, 6, 7, 8, 9]
    dict_store.train_dict(samples, 4096)
    dict_store.append([record(1)])
    assert ident_of(dict_store.gather(0)[0]) == 1
    store.close()
    dict_store.close()


def test_maintenance_is_refused_while_another_process_reads(store_path: str) -> None:
    with Zrecord(store_path, create=True) as store:
        store.append([record(i) for i in range(20)])
    reader = python(f"""
        import sys
        from loaderx.zrecord import Zrecord
        store = Zrecord({store_path!r}, readonly=True)
        print("open", flush=True)
        sys.stdin.readline()
        print(len(store), store.gather(slice(None)) == [bytes(r) for r in store.gather(slice(None))], flush=True)
    """)
    try:
        expect_line(reader, "open")
        with Zrecord(store_path) as store:
            store.append([record(20)])  # appending beside a reader is fine
            with pytest.raises(StoreLockedError, match="delete needs the store to itself"):
                store.delete([1])
            with pytest.raises(StoreLockedError, match="compact needs"):
                store.compact()
            assert reader.stdin is not None
            reader.stdin.write("go\n")
            reader.stdin.flush()
            assert finish(reader).split() == ["21", "True"]
            # The reader has exited: now the store is ours alone.
            store.delete([1])
            store.compact()
            assert sorted(ident_of(r) for r in store.gather(slice(None))) == [0, *range(2, 21)]
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()


def test_open_waits_for_maintenance_in_another_process(store_path: str) -> None:
    """A holder of open.lock exclusive (what compact holds) delays an open until it lets go."""
    with Zrecord(store_path, create=True) as store:
        store.append([record(0)])
    marker = os.path.join(os.path.dirname(store_path), "released")
    holder = python(f"""
        import fcntl, os, time
        f = open(os.path.join({store_path!r}, "open.lock"), "rb")
        fcntl.flock(f, fcntl.LOCK_EX)
        print("held", flush=True)
        time.sleep(0.3)
        open({marker!r}, "w").close()
        fcntl.flock(f, fcntl.LOCK_UN)
    """)
    expect_line(holder, "held")
    with Zrecord(store_path, readonly=True) as store:
        # Only possible once the holder wrote the marker and released the lock.
        assert os.path.exists(marker)
        assert ident_of(store.gather(0)[0]) == 0
    finish(holder)


def test_ctrl_c_ends_an_open_that_waits_for_an_exclusive_holder(store_path: str) -> None:
    """The wait used to be inside the native open with the GIL released, where a Ctrl-C's
    KeyboardInterrupt came only when the wait ended (up to 60 s). It now raises within a poll."""
    with Zrecord(store_path, create=True) as store:
        store.append([record(0)])
    with open(os.path.join(store_path, "open.lock"), "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # what another process's compact holds
        opener = python(f"""
            import time
            from loaderx.zrecord import Zrecord
            print("opening", flush=True)
            started = time.monotonic()
            try:
                Zrecord({store_path!r}, readonly=True)
            except KeyboardInterrupt:
                print(f"interrupted after {{time.monotonic() - started:.1f}} s", flush=True)
        """)
        expect_line(opener, "opening")
        time.sleep(0.5)
        opener.send_signal(signal.SIGINT)
        try:
            out = finish(opener)
        except subprocess.TimeoutExpired:
            opener.kill()
            raise AssertionError("the open went on waiting after Ctrl-C")
    assert out.startswith("interrupted after "), out
    assert float(out.split()[2]) < 30.0, out
    with Zrecord(store_path, readonly=True) as store:  # the lock is free again
        assert ident_of(store.gather(0)[0]) == 0


def test_an_open_that_waits_too_long_is_store_locked(
    store_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Python-side wait gives up as the native one does, with its wording."""
    from loaderx._os import open_wait

    with Zrecord(store_path, create=True) as store:
        store.append([record(0)])
    monkeypatch.setattr(open_wait, "WAIT_SECONDS", 0.2)
    with open(os.path.join(store_path, "open.lock"), "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(StoreLockedError, match=r"held the store exclusively \(a delete, "
                           r"compact or train_dict holding open.lock\) for over 0 s"):
            Zrecord(store_path, readonly=True)
    with Zrecord(store_path) as store:
        assert ident_of(store.gather(0)[0]) == 0


def test_maintenance_is_refused_while_another_handle_converts_its_lock(store_path: str) -> None:
    """flock turns shared into exclusive with a gap in which the converting handle holds nothing
    on open.lock; a forked child once ran its delete in that gap, beside its parent's open
    writer. Here another description stands exactly in that gap (maintenance.lock held, which
    every converting handle holds throughout): maintenance is refused and changes nothing."""
    with Zrecord(store_path, create=True) as store:
        store.append([record(i) for i in range(10)])
        before = folder_digest(store_path)
        calls: list[Callable[[], object]] = [
            lambda: store.delete([0]),
            store.compact,
            lambda: store.train_dict([record(i) * 20 for i in range(64)], 4096),
        ]
        with open(os.path.join(store_path, "maintenance.lock"), "rb") as converting:
            fcntl.flock(converting, fcntl.LOCK_EX)
            for call in calls:
                with pytest.raises(StoreLockedError, match="needs the store to itself"):
                    call()
        assert folder_digest(store_path) == before
        assert [ident_of(r) for r in store.gather(slice(None))] == list(range(10))
        store.delete([0])  # nobody converts any more: the store is this handle's alone
        assert sorted(ident_of(r) for r in store.gather(slice(None))) == list(range(1, 10))


APPENDER = """
    import hashlib, sys, time
    from loaderx.errors import StoreLockedError
    from loaderx.zrecord import Zrecord
    def record(ident):
        body = hashlib.sha256(ident.to_bytes(8, "little")).digest() * (1 + ident % 5)
        return ident.to_bytes(8, "little") + body
    acked = []
    for batch in range({batches}):
        ids = [batch * 8 + k for k in range(8)]
        with Zrecord({path!r}, codec={codec!r}) as store:
            store.append([record(i) for i in ids])
        acked.extend(ids)
        time.sleep(0.002)  # a window with the store closed, where maintenance can run
    print(" ".join(map(str, acked)), flush=True)
"""


MAINTAINER = """
    import hashlib, random, sys
    from loaderx.errors import StoreLockedError
    from loaderx.zrecord import Zrecord
    def check(data):
        ident = int.from_bytes(data[:8], "little")
        body = hashlib.sha256(ident.to_bytes(8, "little")).digest() * (1 + ident % 5)
        assert data == ident.to_bytes(8, "little") + body, ident
        return ident
    rng = random.Random(7)
    deleted, done, refused = [], 0, 0
    while sys.stdin.readline().strip() == "more":
        with Zrecord({path!r}, codec={codec!r}) as store:
            try:
                if rng.random() < 0.5 and len(store) > 4:
                    targets = rng.sample(range(len(store)), 3)
                    victims = [check(r) for r in store.gather(targets)]
                    store.delete(targets)
                    deleted.extend(victims)
                else:
                    store.compact()
                done += 1
            except StoreLockedError:
                refused += 1
        print("ok", flush=True)
    print(done, refused, " ".join(map(str, deleted)), flush=True)
"""


READER = """
    import hashlib, sys
    from loaderx.zrecord import Zrecord
    def check(data):
        ident = int.from_bytes(data[:8], "little")
        body = hashlib.sha256(ident.to_bytes(8, "little")).digest() * (1 + ident % 5)
        assert data == ident.to_bytes(8, "little") + body, ident
    reads = 0
    while sys.stdin.readline().strip() == "more":
        with Zrecord({path!r}, readonly=True) as store:
            for r in store.gather(slice(None)):
                check(r)
            reads += len(store)
        print("ok", flush=True)
    print(reads, flush=True)
"""


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_append_delete_compact_interleaved_across_processes(store_path: str, codec: Codec) -> None:
    """One process appends in a loop, one deletes and compacts whenever it gets the store to
    itself, one reads and checks every record: nothing acknowledged is lost, nothing deleted
    comes back, nothing unreadable remains."""
    Zrecord(store_path, codec=codec, create=True).close()
    appender = python(APPENDER.format(path=store_path, codec=codec, batches=150))
    maintainer = python(MAINTAINER.format(path=store_path, codec=codec))
    reader = python(READER.format(path=store_path))
    helpers = [maintainer, reader]
    try:
        while appender.poll() is None:
            for helper in helpers:
                assert helper.stdin is not None
                helper.stdin.write("more\n")
                helper.stdin.flush()
                expect_line(helper, "ok")
        appended = [int(word) for word in finish(appender).split()]
        for helper in helpers:
            assert helper.stdin is not None
            helper.stdin.write("stop\n")
            helper.stdin.flush()
        done_text, refused_text, *deleted_text = finish(maintainer).split()
        assert int(finish(reader).split()[0]) > 0
    finally:
        for process in (appender, *helpers):
            if process.poll() is None:
                process.kill()
                process.wait()
    deleted = [int(word) for word in deleted_text]
    assert len(set(deleted)) == len(deleted)
    assert int(done_text) > 0, f"maintenance never ran ({refused_text} refusals)"
    with Zrecord(store_path, codec=codec) as store:
        store.compact()  # alone now: it must succeed and keep everything readable
        found = [ident_of(r) for r in store.gather(slice(None))]
    assert sorted(found) == sorted(set(appended) - set(deleted))
