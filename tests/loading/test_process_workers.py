"""Tests for worker_type="process": the same batches as the thread loader, resume, shards, the
output layout, faults (transform errors, killed workers) and leaks (processes, /dev/shm files).

Every test starts real worker processes; the transforms live at module level so that spawn and
forkserver can send them."""

from __future__ import annotations

import gc
import multiprocessing
import multiprocessing.forkserver  # children() reads it: also in a run that started no process
import multiprocessing.resource_tracker
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from loaderx.converter import from_numpy
from loaderx.dataloader import DataLoader, WorkerError
from loaderx.dataset import DenseDataset
from loaderx.mixture import MixtureLoader

RECORDS = 500
SHM = Path("/dev/shm")


def augment(batch: dict[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
    """A transform whose output differs in keys, dtype and shape from its input."""
    data = batch["data"].astype(np.float32)
    return {"x": data * 0.5 + 1.0, "label": batch["label"] * 3, "sum": data.sum(axis=(1, 2))}


def fails_at_label_7(batch: dict[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
    if (batch["label"] == 7).any():
        raise ValueError("record 7 is cursed")
    return batch


def grows(batch: dict[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
    """Drops a row whenever the batch holds record 0: its shape then changes."""
    if (batch["label"] == 0).any():
        return {"data": batch["data"][1:], "label": batch["label"][1:]}
    return batch


def sleeps(batch: dict[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
    """Sleeps in worker processes only (the first step, made by the consumer, does not)."""
    if multiprocessing.parent_process() is not None:
        time.sleep(30)
    return batch


def adds_the_environments_offset(batch: dict[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
    """Adds LOADERX_TEST_OFFSET (read where the transform runs) to every label."""
    return {"label": batch["label"] + int(os.environ.get("LOADERX_TEST_OFFSET", "0"))}


def children() -> list[int]:
    """The live child processes of this process (the forkserver, once started, stays)."""
    found: list[int] = []
    for process in multiprocessing.active_children():
        if process.name.startswith("loaderx-worker"):
            found.append(process.pid or 0)
    task = Path(f"/proc/{os.getpid()}/task")
    for thread in task.iterdir():
        kids = (thread / "children").read_text().split()
        found.extend(int(pid) for pid in kids)
    # multiprocessing's own helpers stay for the session, shared by every pool.
    helpers: set[object] = {
        multiprocessing.forkserver._forkserver._forkserver_pid,  # type: ignore[attr-defined]
        multiprocessing.resource_tracker._resource_tracker._pid,  # type: ignore[attr-defined]
    }
    return sorted(pid for pid in set(found) if pid not in helpers)


def shm_files() -> list[str]:
    return sorted(p.name for p in SHM.glob(f"loaderx-{os.getpid()}-*"))


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    yield
    gc.collect()
    deadline = time.monotonic() + 3
    while (children() or shm_files()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert children() == []
    assert shm_files() == []


@pytest.fixture(scope="module")
def streams(tmp_path_factory: pytest.TempPathFactory) -> dict[str, DenseDataset]:
    base = tmp_path_factory.mktemp("procs")
    every = np.arange(RECORDS, dtype=np.int64)
    data = (every[:, None] * 12 + np.arange(12)).astype(np.int32).reshape(RECORDS, 4, 3)
    from_numpy(base / "data", data, codec="zstd")
    from_numpy(base / "label", every, codec="raw")
    return {"data": DenseDataset(base / "data"), "label": DenseDataset(base / "label")}


def batches(loader: DataLoader | MixtureLoader, count: int) -> list[dict[str, npt.NDArray[Any]]]:
    with loader:
        return [{k: v.copy() for k, v in next(loader).items()} for _ in range(count)]


def assert_same(left: list[dict[str, Any]], right: list[dict[str, Any]]) -> None:
    assert len(left) == len(right)
    for a, b in zip(left, right):
        assert list(a) == list(b)
        for key in a:
            assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape
            assert a[key].tobytes() == b[key].tobytes()


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_same_batches_as_threads(streams: dict[str, DenseDataset], method: str) -> None:
    args: dict[str, Any] = dict(batch_size=32, transform=augment, seed=5)
    threads = batches(DataLoader(streams, **args), 40)
    procs = batches(DataLoader(streams, **args, worker_type="process", workers=2,
                               start_method=method), 40)
    assert_same(threads, procs)


def test_without_transform_and_modes(streams: dict[str, DenseDataset]) -> None:
    for mode in ("sequential", "iid"):
        args: dict[str, Any] = dict(batch_size=50, mode=mode, seed=1, start_step=3)
        assert_same(batches(DataLoader(streams, **args), 12),
                    batches(DataLoader(streams, **args, worker_type="process", workers=3), 12))


def test_shard(streams: dict[str, DenseDataset]) -> None:
    for index in range(2):
        args: dict[str, Any] = dict(batch_size=16, transform=augment, shard=(index, 2))
        assert_same(batches(DataLoader(streams, **args), 20),
                    batches(DataLoader(streams, **args, worker_type="process", workers=2), 20))


def test_mixture_same_batches_and_resume(streams: dict[str, DenseDataset]) -> None:
    half = {"data": streams["data"], "label": streams["label"]}
    unsharded: list[dict[str, Any]] = []
    for shard in (None, (1, 2)):
        args: dict[str, Any] = dict(batch_size=24, transform=augment, seed=3, shard=shard)
        threads = batches(MixtureLoader([streams, half], [0.3, 0.7], **args), 20)
        procs = batches(MixtureLoader([streams, half], [0.3, 0.7], **args,
                                      worker_type="process", workers=2), 20)
        assert_same(threads, procs)
        unsharded = unsharded or threads
    with MixtureLoader([streams, half], [0.3, 0.7], batch_size=24, transform=augment, seed=3,
                       worker_type="process", workers=2, start_step=4) as loader:
        state = loader.state_dict()
        next(loader)
        loader.load_state_dict(state)
        got = [{k: v.copy() for k, v in next(loader).items()} for _ in range(10)]
    assert_same(unsharded[4:14], got)


def test_resume(streams: dict[str, DenseDataset]) -> None:
    args: dict[str, Any] = dict(batch_size=32, transform=augment, seed=9,
                                worker_type="process", workers=2)
    expected = batches(DataLoader(streams, **args), 30)
    with DataLoader(streams, **args) as loader:
        for _ in range(11):
            next(loader)
        state = loader.state_dict()
        for _ in range(5):
            next(loader)
        loader.load_state_dict(state)
        assert loader.step == 11
        got = [{k: v.copy() for k, v in next(loader).items()} for _ in range(19)]
    assert_same(expected[11:], got)
    assert_same(expected[11:], batches(DataLoader(streams, **args, start_step=11), 19))


def test_kept_batches_stay_valid(streams: dict[str, DenseDataset]) -> None:
    """Batches the consumer keeps (or keeps a view of) are never written again."""
    args: dict[str, Any] = dict(batch_size=32, transform=augment, seed=2)
    expected = batches(DataLoader(streams, **args), 25)
    with DataLoader(streams, **args, worker_type="process", workers=2, prefetch=2) as loader:
        kept = [next(loader) for _ in range(10)]
        views = [next(loader)["x"][3:7] for _ in range(15)]
        for got, want in zip(kept, expected[:10]):
            assert_same([got], [want])
        for view, want in zip(views, expected[10:]):
            assert view.tobytes() == want["x"][3:7].tobytes()
        del kept, views


def test_reuse_buffers_ring_stays_small(streams: dict[str, DenseDataset]) -> None:
    with DataLoader(streams, batch_size=32, transform=augment, worker_type="process",
                    workers=2, prefetch=3, reuse_buffers=True) as loader:
        for _ in range(30):
            next(loader)
        assert len(shm_files()) <= 4


def test_transform_error_carries_worker_traceback(streams: dict[str, DenseDataset]) -> None:
    args: dict[str, Any] = dict(batch_size=10, mode="sequential", transform=fails_at_label_7,
                                worker_type="process", workers=2, start_step=1)
    with DataLoader(streams, **args) as loader:
        first = next(loader)  # records 10..19: made in this process, as the layout's step
        assert first["label"][0] == 10
        for _ in range(RECORDS // 10 - 2):
            next(loader)
        with pytest.raises(WorkerError, match="record 7 is cursed") as info:
            next(loader)  # step 50 = records 0..9
        assert "fails_at_label_7" in str(info.value) and "step 50" in str(info.value)
        assert next(loader)["label"][0] == 10  # the step counts as taken


def test_shape_change_names_the_key(streams: dict[str, DenseDataset]) -> None:
    with DataLoader(streams, batch_size=10, mode="sequential", transform=grows, start_step=1,
                    worker_type="process", workers=2) as loader:
        for _ in range(RECORDS // 10 - 1):  # steps 1 to 49
            next(loader)
        with pytest.raises(WorkerError, match="'data'.*same shapes and dtypes"):
            next(loader)


def test_unpicklable_transform_is_refused(streams: dict[str, DenseDataset]) -> None:
    with pytest.raises(TypeError, match="module level"):
        DataLoader(streams, transform=lambda b: b, worker_type="process")


def test_bad_options(streams: dict[str, DenseDataset]) -> None:
    with pytest.raises(ValueError, match="worker_type"):
        DataLoader(streams, worker_type="processes")
    with pytest.raises(ValueError, match="start_method"):
        DataLoader(streams, worker_type="process", start_method="clone")


def test_killed_worker_raises(streams: dict[str, DenseDataset]) -> None:
    loader = DataLoader(streams, batch_size=10, transform=sleeps, worker_type="process",
                        workers=2, start_method="fork")
    next(loader)  # the first step runs here, without sleeping
    victim = loader._prefetcher._workers.processes[0]  # type: ignore[attr-defined]
    os.kill(victim.pid, signal.SIGKILL)
    started = time.monotonic()
    with pytest.raises(WorkerError, match="killed by signal SIGKILL"):
        next(loader)
    # The step waited for is the other worker's, which sleeps 30 s: a death noticed only then
    # would take 30 s. Not a tighter bound: noticing takes milliseconds, but a loaded 2-core
    # machine stretched the whole next() past the 3 s this was (a flake, not a hang).
    assert time.monotonic() - started < 15
    assert loader.closed
    loader.close()


def test_interrupt_stops_within_a_second(streams: dict[str, DenseDataset]) -> None:
    loader = DataLoader(streams, batch_size=10, transform=sleeps, worker_type="process",
                        workers=2, start_method="fork")
    interrupted: list[float] = []

    def interrupt(*_: object) -> None:
        interrupted.append(time.monotonic())
        signal.raise_signal(signal.SIGINT)

    # The handler before the timer: the other way round, a timer that fired first (a loaded
    # machine) ended the test process (SIGALRM's default action).
    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(KeyboardInterrupt):
            with loader:
                next(loader)
                next(loader)
        ended = time.monotonic()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    # From the interrupt, not from before the loader's first step: the second step sleeps 30 s
    # in a worker, so a next() that waited for it would take 30 s. What it takes is the close()
    # (0.3 s for the workers, then a kill); a loaded 2-core machine stretched the old bound of
    # 1.5 s from the first next() (a flake, not a hang).
    assert interrupted and ended - interrupted[0] < 10


def test_collected_loader_leaves_nothing(streams: dict[str, DenseDataset]) -> None:
    loader = DataLoader(streams, batch_size=10, transform=augment, worker_type="process",
                        workers=2)
    next(loader)
    next(loader)
    assert len(children()) == 2 and shm_files()
    del loader
    gc.collect()


def _in_forked_child(loader: DataLoader, answers: Any) -> None:
    try:
        next(loader)
    except RuntimeError as error:
        answers.put(str(error))
    loader.close()  # closes the child's copy only: the parent's workers must not notice


def test_forked_child_leaves_the_parents_workers_alone(streams: dict[str, DenseDataset]) -> None:
    args: dict[str, Any] = dict(batch_size=16, transform=augment, seed=4)
    expected = batches(DataLoader(streams, **args), 6)
    context = multiprocessing.get_context("fork")
    with DataLoader(streams, **args, worker_type="process", workers=2) as loader:
        got = [{k: v.copy() for k, v in next(loader).items()} for _ in range(3)]
        answers = context.Queue()
        child = context.Process(target=_in_forked_child, args=(loader, answers))
        child.start()
        child.join(10)
        assert child.exitcode == 0
        assert "forked child" in answers.get(timeout=1)
        got += [{k: v.copy() for k, v in next(loader).items()} for _ in range(3)]
    assert_same(expected, got)


# --- faults found by running the loader harder (each failed before its fix) ---------------


def test_worker_dead_before_a_step_is_sent_raises_worker_error(
        streams: dict[str, DenseDataset]) -> None:
    """next() that sends a step to a dead worker's closed pipe raised BrokenPipeError (and lost
    the batch it was returning); now that batch comes back, and the wait for a step the dead
    worker owes raises WorkerError."""
    expected = batches(DataLoader(streams, batch_size=10, seed=6), 1)
    loader = DataLoader(streams, batch_size=10, seed=6, worker_type="process", workers=2,
                        prefetch=2)
    victim = loader._prefetcher._workers.processes[0]  # type: ignore[attr-defined]
    os.kill(victim.pid, signal.SIGKILL)
    victim.join()
    # Step 0 was made here; this next() sends step 2 to worker 0, the dead one.
    assert_same([next(loader)], expected)
    with pytest.raises(WorkerError, match="killed by signal SIGKILL"):
        next(loader)
    assert loader.closed


def _close_while_waiting(loader: DataLoader, outcome: list[str]) -> None:
    try:
        next(loader)
        next(loader)  # its worker sleeps: close() lands while this waits
        outcome.append("a batch")
    except StopIteration:
        outcome.append("StopIteration")
    except BaseException as error:
        outcome.append(f"{type(error).__name__}: {error}")


@pytest.mark.parametrize("join_seconds", [0.3, 0.0, 0.0, 0.0])
def test_close_from_another_thread_ends_a_waiting_next(
        streams: dict[str, DenseDataset], monkeypatch: pytest.MonkeyPatch,
        join_seconds: float) -> None:
    """As with threads, close() from another thread makes a waiting next() raise StopIteration:
    it raised OSError ('handle is closed') or ValueError, or waited for ever on no pipes. Or,
    when the waiting thread saw a worker that close() had just killed, WorkerError ('killed by
    signal SIGKILL') or ValueError ('process object is closed'): a race, which an immediate
    kill (no wait for the workers) makes likelier; it was seen once in 8 runs under load."""
    import threading

    from loaderx._loading import process_workers  # private: close() kills the workers at once

    monkeypatch.setattr(process_workers, "_JOIN_SECONDS", join_seconds)
    loader = DataLoader(streams, batch_size=10, transform=sleeps, worker_type="process",
                        workers=2)
    outcome: list[str] = []
    consumer = threading.Thread(target=_close_while_waiting, args=(loader, outcome))
    consumer.start()
    time.sleep(0.3)  # not a check: lets the consumer reach its wait, where the bug was
    loader.close()
    consumer.join(60)
    assert outcome == ["StopIteration"]


class _AnswerThenInterrupt:
    """A worker's pipe whose first answer is read and then lost to a Ctrl-C, as when an
    interrupt lands between reading an answer and booking it."""

    def __init__(self, pipe: Any, fired: list[bool]) -> None:
        self._pipe = pipe
        self._fired = fired

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pipe, name)

    def fileno(self) -> int:
        return int(self._pipe.fileno())

    def recv(self) -> Any:
        answer = self._pipe.recv()
        if not self._fired:
            self._fired.append(True)
            raise KeyboardInterrupt
        return answer


def test_interrupt_that_loses_an_answer_does_not_hang(streams: dict[str, DenseDataset]) -> None:
    """Iterating on after a Ctrl-C returns every later batch in step order: an interrupt that
    lost a worker's answer made the next next() wait for it for ever."""
    import threading

    args: dict[str, Any] = dict(batch_size=16, transform=augment, seed=8)
    expected = batches(DataLoader(streams, **args), 12)
    loader = DataLoader(streams, **args, worker_type="process", workers=2)
    steps = loader._prefetcher
    got = [(loader.step, {k: v.copy() for k, v in next(loader).items()}) for _ in range(2)]
    fired: list[bool] = []
    workers = steps._workers  # type: ignore[attr-defined]
    workers.pipes = [_AnswerThenInterrupt(pipe, fired) for pipe in workers.pipes]
    # Not a check: ends a hang (the bug) with a WorkerError instead of blocking the suite.
    def kill_workers() -> None:
        for process in workers.processes:
            os.kill(process.pid, signal.SIGKILL)

    killer = threading.Timer(60, kill_workers)
    killer.start()
    try:
        while len(got) < 10:
            step = loader.step
            try:
                got.append((step, {k: v.copy() for k, v in next(loader).items()}))
            except KeyboardInterrupt:
                pass
    finally:
        killer.cancel()
        loader.close()
    assert fired
    assert [step for step, _ in got] == sorted({step for step, _ in got})
    for step, batch in got:
        assert_same([batch], [expected[step]])


def test_interrupted_close_leaves_nothing(streams: dict[str, DenseDataset],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A second Ctrl-C while close() waits for a busy worker: the finaliser runs only once, and
    the cut-short close left that worker running and every /dev/shm file in place."""
    from loaderx._loading import process_workers  # private: to make close() wait long enough

    monkeypatch.setattr(process_workers, "_JOIN_SECONDS", 60.0)
    loader = DataLoader(streams, batch_size=10, transform=sleeps, worker_type="process",
                        workers=2)
    next(loader)
    previous = signal.signal(signal.SIGALRM, lambda *_: signal.raise_signal(signal.SIGINT))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)  # lands while close() waits for a worker
        with pytest.raises(KeyboardInterrupt):
            loader.close()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert loader.closed  # and no_leaks finds no process and no file


_FORK_CHILD_EXITS = """
import os, sys
import numpy as np
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset

if __name__ == "__main__":
    streams = {"label": DenseDataset(sys.argv[1])}
    expected = [next(l)["label"].copy() for l in [DataLoader(streams, batch_size=10)]
                for _ in range(12)]
    loader = DataLoader(streams, batch_size=10, worker_type="process", workers=2)
    got = [next(loader)["label"].copy() for _ in range(2)]
    pid = os.fork()
    if pid == 0:
        sys.exit(0)  # a normal exit: the interpreter runs its atexit hooks
    os.waitpid(pid, 0)
    got += [next(loader)["label"].copy() for _ in range(10)]
    loader.close()
    print(all(np.array_equal(a, b) for a, b in zip(got, expected)) and len(got) == 12)
"""


def test_os_fork_child_exit_leaves_the_workers_alone(streams: dict[str, DenseDataset]) -> None:
    """A child forked with os.fork() that exits normally ran multiprocessing's atexit hook,
    which sent the parent's workers SIGTERM: the parent's next() raised WorkerError."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", _FORK_CHILD_EXITS, streams["label"].path],
                            capture_output=True, text=True, timeout=120,
                            cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0, result.stderr
    assert result.stdout == "True\n", result.stderr


_FORK_STARTED_CONSUMER = """
import sys, time
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset

loader = DataLoader({"label": DenseDataset(sys.argv[1])}, batch_size=10,
                    worker_type="process", workers=2, start_method="fork")
next(loader)
print(*[p.pid for p in loader._prefetcher._workers.processes], flush=True)
time.sleep(600)
"""


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def test_fork_started_workers_leave_with_a_killed_consumer(
        streams: dict[str, DenseDataset]) -> None:
    """Workers started with fork held copies of the consumer's ends of the pipes, so the
    consumer's death never closed them: killed, it left its workers running for good."""
    import subprocess
    import sys

    consumer = subprocess.Popen([sys.executable, "-c", _FORK_STARTED_CONSUMER,
                                 streams["label"].path], stdout=subprocess.PIPE, text=True,
                                cwd=Path(__file__).resolve().parents[2])
    assert consumer.stdout is not None
    workers = [int(pid) for pid in consumer.stdout.readline().split()]
    assert len(workers) == 2
    consumer.kill()
    consumer.wait()
    try:
        deadline = time.monotonic() + 60  # a bound on the wait, not a check of its length
        while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_running(pid) for pid in workers)
    finally:
        for pid in workers:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
        for leftover in SHM.glob(f"loaderx-{consumer.pid}-*"):  # a killed consumer's (docs)
            leftover.unlink()


@pytest.mark.parametrize("method", ["forkserver", "spawn", "fork"])
def test_workers_see_the_consumers_environment_of_now(
    streams: dict[str, DenseDataset], method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A forkserver started before a variable was set (by an earlier loader) gave later workers
    its own, older environment: an object store's credentials set since were missing in the
    workers (found in CI: a worker reopening an s3:// dataset asked the metadata endpoint).
    Every start method now gives the workers the consumer's environment at their start."""
    monkeypatch.delenv("LOADERX_TEST_OFFSET", raising=False)
    first = DataLoader(streams, batch_size=8, seed=3, workers=1, worker_type="process",
                       start_method=method, transform=adds_the_environments_offset)
    batches(first, 2)  # the forkserver, if that is the method, runs from here on
    monkeypatch.setenv("LOADERX_TEST_OFFSET", "1000")
    loader = DataLoader(streams, batch_size=8, seed=3, workers=2, worker_type="process",
                        start_method=method, transform=adds_the_environments_offset)
    with loader:
        for step in range(6):  # step 0 is made by the consumer, the rest by the workers
            expected = loader.indices(step) + 1000
            np.testing.assert_array_equal(next(loader)["label"], expected)
