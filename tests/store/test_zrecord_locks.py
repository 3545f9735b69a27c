"""Cross-process and cross-handle locking: one writer, exclusive maintenance, read-only opens.

Everything runs for real: second handles in this process, other processes (killed with
SIGKILL to show the kernel releases their locks), a read-only tmpfs mount and an unprivileged
user. Records carry their own id, so every check is on exact bytes.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import numpy as np
import pytest

from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.errors import CorruptStoreError, ReadOnlyStoreError, StoreLockedError
from loaderx._store.schema import Codec
from loaderx.zrecord import Zrecord

REPO: str = str(Path(__file__).resolve().parents[2])


def record(ident: int) -> bytes:
    """Record `ident`: its id followed by bytes derived from it (so any mix-up shows)."""
    body = hashlib.sha256(ident.to_bytes(8, "little")).digest() * (1 + ident % 5)
    return ident.to_bytes(8, "little") + body


def ident_of(data: bytes) -> int:
    ident = int.from_bytes(data[:8], "little")
    assert data == record(ident), f"record {ident} has wrong bytes"
    return ident


def folder_digest(path: str) -> dict[str, tuple[int, str]]:
    """Every file's size and the sha256 of its first MiB (the header, the table of the first
    65,536 records and the start of each chunk: all these small tests use), to prove nothing
    changed. Reading whole files would read the sparse 4 GiB chunks."""
    out = {}
    for name in sorted(os.listdir(path)):
        with open(os.path.join(path, name), "rb") as f:
            out[name] = (os.fstat(f.fileno()).st_size, hashlib.sha256(f.read(1 << 20)).hexdigest())
    return out


def python(code: str, *, user: str | None = None) -> subprocess.Popen[str]:
    """Starts `code` in a fresh interpreter (optionally as another user), pipes on stdin/stdout."""
    command = [sys.executable, "-c", textwrap.dedent(code)]
    if user is not None:
        entry = pwd.getpwnam(user)
        ids = [f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups"]
        command = ["setpriv", *ids, *command]
    env = {**os.environ, "PYTHONPATH": REPO}
    return subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=env, cwd="/",
    )


def expect_line(process: subprocess.Popen[str], wanted: str) -> None:
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if line != wanted:
        _, err = process.communicate(timeout=60)
        raise AssertionError(f"expected {wanted!r} from the child, got {line!r}; stderr:\n{err}")


def finish(process: subprocess.Popen[str]) -> str:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, f"child failed ({process.returncode}):\n{err}"
    return out


# ---- one writer ------------------------------------------------------------------------------


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


# ---- exclusive maintenance -------------------------------------------------------------------


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


# ---- read-only opens -------------------------------------------------------------------------


def test_readonly_refuses_every_write_before_touching_anything(store_path: str) -> None:
    with Zrecord(store_path, create=True) as store:
        store.append([record(i) for i in range(5)])
    before = folder_digest(store_path)
    with Zrecord(store_path, readonly=True) as store:
        assert store.readonly
        for call in (
            lambda: store.append([record(9)]),
            lambda: store.append_fixed(np.zeros(8, np.uint8), 8),
            lambda: store.delete([0]),
            lambda: store.compact(),
            lambda: store.train_dict([b"x" * 100] * 40, 1024),
            lambda: store.sync(),
        ):
            with pytest.raises(ReadOnlyStoreError, match="readonly=True"):
                call()
        assert [ident_of(r) for r in store.gather(slice(None))] == list(range(5))
        assert store.stats()["records"] == 5
    assert folder_digest(store_path) == before


def test_readonly_never_creates(tmp_path: Path) -> None:
    missing = str(tmp_path / "nothing")
    with pytest.raises(FileNotFoundError):
        Zrecord(missing, readonly=True)
    assert not os.path.exists(missing)
    with pytest.raises(FileNotFoundError):
        DenseDataset(missing, readonly=True)
    assert not os.path.exists(missing)


def test_readonly_reader_sees_a_concurrent_writer(store_path: str) -> None:
    writer = Zrecord(store_path, create=True)
    writer.append([record(0)])
    reader = Zrecord(store_path, readonly=True)
    writer.append([record(1), record(2)])
    assert [ident_of(r) for r in reader.gather(slice(None))] == [0, 1, 2]
    reader.close()
    writer.close()


def test_readonly_dataset(tmp_path: Path) -> None:
    path = str(tmp_path / "ds")
    data = np.arange(60, dtype=np.int32).reshape(10, 6)
    with DenseDataset(path, dtype=np.int32, item_shape=(6,)) as ds:
        ds.append(data)
    with DenseDataset(path, readonly=True) as ds:
        assert ds.readonly
        np.testing.assert_array_equal(ds[:], data)
        with pytest.raises(ReadOnlyStoreError):
            ds.append(data[:1])
        with pytest.raises(ReadOnlyStoreError):
            ds.delete(0)
        assert len(ds) == 10
    # The same schema may be named while opening read-only; nothing is created or changed.
    with DenseDataset(path, dtype=np.int32, item_shape=(6,), readonly=True) as ds:
        np.testing.assert_array_equal(ds[[9, 0]], data[[9, 0]])
    # Where there is none, naming the schema read-only creates nothing, and the message says why
    # (it used to say "pass dtype= (and item_shape=) to create one", which the caller had done).
    missing = str(tmp_path / "missing")
    for cls in (DenseDataset, RaggedDataset):
        with pytest.raises(FileNotFoundError, match="readonly=True opens an existing one and never"):
            cls(missing, dtype=np.int32, item_shape=(6,), readonly=True)
    assert not os.path.exists(missing)


@pytest.fixture
def read_only_mount() -> Iterator[str]:
    """A small tmpfs, world-readable, that the test fills and then remounts read-only."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount_point = tempfile.mkdtemp(prefix="loaderx-ro-")
    os.chmod(mount_point, 0o755)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=0755", "tmpfs", mount_point], check=True)
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", mount_point], check=True)
        os.rmdir(mount_point)


def test_readonly_on_a_read_only_filesystem(read_only_mount: str) -> None:
    path = os.path.join(read_only_mount, "store")
    old = os.path.join(read_only_mount, "old")
    with Zrecord(path, create=True) as store:
        store.append([record(i) for i in range(50)])
    with Zrecord(old, create=True) as store:
        store.append([record(i) for i in range(3)])
    # A store written before lock files existed has none; a read-only open must not need them.
    os.remove(os.path.join(old, "open.lock"))
    os.remove(os.path.join(old, "writer.lock"))
    os.remove(os.path.join(old, "maintenance.lock"))
    subprocess.run(["mount", "-o", "remount,ro", read_only_mount], check=True)
    with Zrecord(path, readonly=True) as store:
        assert [ident_of(r) for r in store.gather(slice(None))] == list(range(50))
        with pytest.raises(ReadOnlyStoreError):
            store.append([record(50)])
    with Zrecord(old, readonly=True) as store:
        assert [ident_of(r) for r in store.gather(slice(None))] == [0, 1, 2]
    with pytest.raises(PermissionError, match="readonly=True"):
        Zrecord(path)


def test_recode_reads_its_source_from_a_read_only_filesystem(
    read_only_mount: str, tmp_path: Path
) -> None:
    from loaderx.converter import from_numpy, recode
    from loaderx.dataset import RaggedDataset

    dense = np.arange(600, dtype=np.int32).reshape(100, 6)
    ragged = [np.arange(n, dtype=np.int16) for n in (4, 0, 9, 1)]
    from_numpy(os.path.join(read_only_mount, "dense"), dense, codec="raw")
    path = os.path.join(read_only_mount, "ragged")
    with RaggedDataset(path, dtype=np.int16, item_shape=(), codec="zstd") as rs:
        rs.append(ragged)
    subprocess.run(["mount", "-o", "remount,ro", read_only_mount], check=True)
    recode(os.path.join(read_only_mount, "dense"), str(tmp_path / "dense"), codec="zstd")
    recode(os.path.join(read_only_mount, "ragged"), str(tmp_path / "ragged"), codec="raw")
    with DenseDataset(tmp_path / "dense", readonly=True) as ds:
        assert ds.codec == "zstd"
        np.testing.assert_array_equal(ds[:], dense)
    with RaggedDataset(tmp_path / "ragged", readonly=True) as rs:
        assert rs.codec == "raw"
        for want, have in zip(ragged, rs[:], strict=True):
            np.testing.assert_array_equal(have, want)


def test_readonly_for_a_user_who_cannot_write(
    tmp_path: Path, others_can_reach: Callable[..., AbstractContextManager[None]]
) -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("switching to an unprivileged user needs root and setpriv")
    base = tempfile.mkdtemp(prefix="loaderx-nobody-")
    try:
        os.chmod(base, 0o755)
        path = os.path.join(base, "ds")
        data = np.arange(200, dtype=np.uint16).reshape(20, 10)
        with DenseDataset(path, dtype=np.uint16, item_shape=(10,)) as ds:
            ds.append(data)
        subprocess.run(["chmod", "-R", "a-w", path], check=True)
        code = f"""
            import numpy as np
            from loaderx.dataset import DenseDataset
            from loaderx.errors import ReadOnlyStoreError
            with DenseDataset({path!r}, readonly=True) as ds:
                np.testing.assert_array_equal(ds[:], np.arange(200, dtype=np.uint16).reshape(20, 10))
                try:
                    ds.append(ds[:1])
                except ReadOnlyStoreError:
                    print("refused", flush=True)
            try:
                DenseDataset({path!r})
            except PermissionError as exc:
                print("writable open:", exc, flush=True)
        """
        with others_can_reach(REPO, sys.prefix):
            out = finish(python(code, user="nobody"))
        assert out.splitlines()[0] == "refused"
        assert out.splitlines()[1].startswith("writable open:")
        assert "readonly=True" in out.splitlines()[1]
    finally:
        subprocess.run(["chmod", "-R", "u+w", base], check=True)
        shutil.rmtree(base)


def test_readonly_sharded_dataset(tmp_path: Path) -> None:
    path = str(tmp_path / "sharded")
    data = np.arange(250, dtype=np.int64).reshape(25, 10)
    with DenseDataset(path, dtype=np.int64, item_shape=(10,), shard_records=10) as ds:
        ds.append(data)
        assert ds.sharded
    names = sorted(os.listdir(path))
    with DenseDataset(path, readonly=True, shard_records=10) as ds:
        assert ds.readonly and ds.sharded
        np.testing.assert_array_equal(ds[:], data)
        for call in (lambda: ds.append(data[:1]), lambda: ds.delete(0), ds.compact, ds.sync):
            with pytest.raises(ReadOnlyStoreError, match="readonly=True"):
                call()
        np.testing.assert_array_equal(ds[[24, 0, 13]], data[[24, 0, 13]])
    assert sorted(os.listdir(path)) == names


# ---- lock files are never opened through a link -----------------------------------------------


@pytest.mark.parametrize("name", ["open.lock", "maintenance.lock", "writer.lock"])
@pytest.mark.parametrize("target_exists", [False, True])
def test_a_lock_file_replaced_by_a_link_is_refused_and_nothing_is_made_where_it_points(
    tmp_path: Path, name: str, target_exists: bool
) -> None:
    """The lock files were created (O_CREAT) and flocked through a symlink in their place:
    opening the store made or locked the file the link named, anywhere outside the store."""
    store_path = str(tmp_path / "store")
    with Zrecord(store_path, create=True) as store:
        store.append([record(0), record(1)])
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "target"
    if target_exists:
        target.write_bytes(b"not the store's")
    os.unlink(os.path.join(store_path, name))
    os.symlink(target, os.path.join(store_path, name))
    refused = rf"{name.replace('.', '[.]')} is a symbolic link \(to '.*target'\), not the store's lock file"
    if name == "writer.lock":
        # Taken from the first write on: reading needs no writer lock.
        with Zrecord(store_path) as store:
            assert [ident_of(r) for r in store.gather(slice(None))] == [0, 1]
            with pytest.raises(CorruptStoreError, match=refused) as info:
                store.append([record(2)])
            assert repr(store_path) in str(info.value)
            assert store.stats()["records"] == 2
    else:
        with pytest.raises(CorruptStoreError, match=refused) as info:
            Zrecord(store_path)
        assert repr(store_path) in str(info.value)
        if name == "open.lock":
            # A read-only handle does not lock through the link either.
            with pytest.raises(CorruptStoreError, match=refused):
                Zrecord(store_path, readonly=True)
    assert os.listdir(outside) == (["target"] if target_exists else [])
    if target_exists:
        assert target.read_bytes() == b"not the store's"
    os.unlink(os.path.join(store_path, name))
    with Zrecord(store_path) as store:
        assert store.append([record(2)]) == 2
        assert [ident_of(r) for r in store.gather(slice(None))] == [0, 1, 2]
    assert not os.path.islink(os.path.join(store_path, name))


def _create(path: str) -> None:
    with Zrecord(path, create=True) as store:
        store.append([record(i) for i in range(8)])


def _delete(path: str) -> None:
    with Zrecord(path) as store:
        store.delete([0])


def _train_dict(path: str) -> None:
    with Zrecord(path) as store:
        store.train_dict([record(i) * 40 for i in range(200)], 2048)


@pytest.mark.parametrize(
    ("name", "made_first", "action"),
    [
        ("0.zr", False, _create),  # a fresh store's first chunk
        ("meta.zr.tmp", False, _create),  # written, then renamed to meta.zr
        ("sums.zr.tmp", False, _create),  # written, then renamed to sums.zr
        ("redo.zr", True, _delete),  # a delete's log
        ("dict.zr.tmp", True, _train_dict),  # written, then renamed to dict.zr
    ],
)
def test_a_store_file_it_creates_is_never_made_through_a_link(
    tmp_path: Path, name: str, made_first: bool, action: Callable[[str], None]
) -> None:
    """The files a store creates were created (O_CREAT, some with O_TRUNC) through a symlink
    in their place: the file the link named, outside the store, was made or emptied and
    written (a renamed temporary even left meta.zr or sums.zr a link out of the store)."""
    store_path = str(tmp_path / "store")
    if made_first:
        _create(store_path)
    else:
        os.mkdir(store_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside / "target", os.path.join(store_path, name))
    if name == "0.zr":
        with pytest.raises(CorruptStoreError, match=r"0[.]zr is a symbolic link \(to '.*target'\), "
                           "not the store's chunk file"):
            action(store_path)
    else:
        # A temporary or a log is the store's to replace: the link goes, the file is made here.
        action(store_path)
    assert os.listdir(outside) == []
    assert [n for n in os.listdir(store_path) if os.path.islink(os.path.join(store_path, n))] == (
        ["0.zr"] if name == "0.zr" else []
    )


def test_an_append_does_not_write_a_chunk_through_a_link(tmp_path: Path) -> None:
    store_path = str(tmp_path / "store")
    _create(store_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.move(os.path.join(store_path, "0.zr"), outside / "target")
    os.symlink(outside / "target", os.path.join(store_path, "0.zr"))
    size = (outside / "target").stat().st_size
    digest = hashlib.sha256((outside / "target").read_bytes()).hexdigest()
    with Zrecord(store_path) as store:
        with pytest.raises(CorruptStoreError, match=r"0[.]zr is a symbolic link"):
            store.append([record(8)])
        assert store.stats()["records"] == 8
    assert (outside / "target").stat().st_size == size
    assert hashlib.sha256((outside / "target").read_bytes()).hexdigest() == digest


@pytest.mark.parametrize(
    "name, what", [("meta.zr", "table file"), ("sums.zr", "checksum file"), ("0.zr", "chunk file"),
                   ("dict.zr", "dictionary file"), ("redo.zr", "delete log")],
)
@pytest.mark.parametrize("readonly", [False, True])
def test_an_existing_store_file_is_never_read_or_written_through_a_link(
    tmp_path: Path, name: str, what: str, readonly: bool
) -> None:
    """meta.zr, sums.zr, dict.zr, redo.zr and a chunk being read were opened through a symlink
    in their place: the store read (and an append wrote) the file the link named, outside."""
    store_path = str(tmp_path / "store")
    if name == "dict.zr":
        with Zrecord(store_path, create=True, codec="zstd_dict") as store:
            store.train_dict([record(i) for i in range(64)], 1024)
            store.append([record(i) for i in range(8)])
    else:
        _create(store_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    inside = os.path.join(store_path, name)
    if name == "redo.zr":
        (outside / "target").write_bytes(b"\0" * 64)  # not a log: never read, never replayed
    else:
        shutil.move(inside, outside / "target")
    os.symlink(outside / "target", inside)
    digest = hashlib.sha256((outside / "target").read_bytes()).hexdigest()
    refused = rf"{re.escape(name)} is a symbolic link \(to '.*target'\), not the store's {what}"
    expected: type[Exception] = CorruptStoreError
    if readonly and name == "redo.zr":  # refused before the log is looked at: it needs a writer
        expected, refused = ReadOnlyStoreError, "left redo.zr; open the store writable once"
    with pytest.raises(expected, match=refused):
        with Zrecord(store_path, readonly=readonly) as store:
            store.gather(list(range(8)))  # a chunk is opened by its first read
    assert hashlib.sha256((outside / "target").read_bytes()).hexdigest() == digest
    assert os.listdir(outside) == ["target"]
