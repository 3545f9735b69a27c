"""worker_type="process" faults that the thread loader meets as per-step errors, met the same
way: a dataset folder gone when a worker opens it, a first step that fails (it is made in the
consumer), and a storm of SIGINTs while workers start. Helpers and fixtures (the datasets, the
leak check after every test) are test_process_workers'."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from test_process_workers import (assert_same, augment, batches, children, no_leaks, shm_files,
                                  streams)

from loaderx._loading.process_workers import _Rings  # private: the finaliser's loop itself
from loaderx.converter import from_numpy
from loaderx.dataloader import DataLoader, WorkerError
from loaderx.dataset import DenseDataset
from loaderx.mixture import MixtureLoader

__all__ = ["no_leaks", "streams"]  # fixtures: every test here checks for leaks after it


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_a_dataset_folder_gone_fails_each_step_clearly_until_it_is_back(
    tmp_path: Path, method: str
) -> None:
    """Workers started with forkserver or spawn reopen the datasets by path. The folder gone
    (moved away after the consumer opened it), the reopening raised in the worker while its
    arguments were unpickled: it exited with code 1 and the loader closed. Now each step sent
    to it raises WorkerError with the worker's FileNotFoundError, the loader stays open and
    hangs nowhere, and once the folder is back the steps come again, in order and exact."""
    from_numpy(tmp_path / "label", np.arange(100, dtype=np.int64), codec="raw")
    away = tmp_path / "away"
    with DenseDataset(tmp_path / "label") as ds:
        (tmp_path / "label").rename(away)  # the consumer's open dataset still reads
        with DataLoader({"label": ds}, batch_size=10, mode="sequential", worker_type="process",
                        workers=1, prefetch=1, start_method=method) as loader:
            assert next(loader)["label"].tolist() == list(range(10))  # made by the consumer
            with pytest.raises(WorkerError) as failed:
                next(loader)
            text = str(failed.value)
            assert text.startswith("a worker process could not load the loader's recipe "
                                   "(reopen the datasets, unpickle the transform) for step 1")
            assert "FileNotFoundError" in text and str(tmp_path / "label") in text
            assert not loader.closed and loader.step == 2
            away.rename(tmp_path / "label")
            outcomes: list[tuple[int, str]] = []
            while len(outcomes) < 6:
                step = loader.step
                try:
                    label = next(loader)["label"]
                    assert label.tolist() == list(range(step * 10 % 100, step * 10 % 100 + 10))
                    outcomes.append((step, "batch"))
                except WorkerError as error:  # step 2 was sent while the folder was away
                    assert "FileNotFoundError" in str(error)
                    outcomes.append((step, "error"))
            assert [step for step, _ in outcomes] == list(range(2, 8))
            assert [what for _, what in outcomes][1:] == ["batch"] * 5


# --- a first step that fails: the thread loader's outcomes, step by step -------------------


def fails_below_20(batch: dict[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
    """Fails for the batches that hold a record below 20: steps 0 and 1 of a sequential
    loader by 10 (made by the consumer itself with worker processes, to learn the layout)."""
    if (batch["label"] < 20).any():
        raise ValueError(f"records below 20 are cursed (got {int(batch['label'].min())})")
    return augment(batch)


def outcomes(loader: DataLoader | MixtureLoader, count: int,
             ) -> list[tuple[int, str, dict[str, npt.NDArray[Any]] | None]]:
    """(step, "batch" or the error's message's first transform line, the batch copied) for
    `count` next()s: what a consumer that catches the errors and goes on sees."""
    seen: list[tuple[int, str, dict[str, npt.NDArray[Any]] | None]] = []
    for _ in range(count):
        step = loader.step
        try:
            batch = {k: v.copy() for k, v in next(loader).items()}
            seen.append((step, "batch", batch))
        except Exception as error:  # the thread loader's ValueError, the processes' WorkerError
            cursed = [line for line in str(error).splitlines() if "cursed" in line]
            seen.append((step, cursed[-1].split("ValueError: ")[-1] if cursed else repr(error),
                         None))
    return seen


def assert_same_outcomes(threads: list[Any], processes: list[Any]) -> None:
    assert [(step, what) for step, what, _ in threads] == [
        (step, what) for step, what, _ in processes]
    for (_, _, a), (_, _, b) in zip(threads, processes):
        if a is not None:
            assert_same([a], [b])


@pytest.mark.parametrize("method", ["forkserver", "spawn", "fork"])
def test_a_first_step_that_fails_is_raised_by_next_as_with_threads(
    streams: dict[str, DenseDataset], method: str
) -> None:
    """The first step is made in the consumer (to learn the layout): when the transform failed
    there, the process loader's constructor raised, where the thread loader constructs and
    raises from that step's next(). Now both give the same outcomes, step by step: the errors
    (a WorkerError with the traceback text, for processes), then the same batches, and
    load_state_dict back to a failing step does the same again."""
    args: dict[str, Any] = dict(batch_size=10, mode="sequential", transform=fails_below_20,
                                seed=2, prefetch=2)
    seen: dict[str, list[Any]] = {}
    for worker_type in ("thread", "process"):
        with DataLoader(streams, **args, worker_type=worker_type, workers=2,
                        start_method=method) as loader:
            state = loader.state_dict()
            seen[worker_type] = outcomes(loader, 6)
            loader.load_state_dict(state)  # the processes' restart makes step 0 here again
            seen[worker_type] += outcomes(loader, 4)
            if worker_type == "process":
                with pytest.raises(WorkerError) as raised:
                    loader.load_state_dict(state)
                    next(loader)
                assert "fails_below_20" in str(raised.value)  # the traceback's text
                assert "step 0" in str(raised.value)
    threads, processes = seen["thread"], seen["process"]
    assert [what for _, what, _ in threads] == (
        ["records below 20 are cursed (got 0)", "records below 20 are cursed (got 10)"]
        + ["batch"] * 4
        + ["records below 20 are cursed (got 0)", "records below 20 are cursed (got 10)"]
        + ["batch"] * 2)
    assert [step for step, _, _ in threads] == [*range(6), *range(4)]
    assert_same_outcomes(threads, processes)


def test_a_mixture_whose_first_step_fails_goes_on_as_with_threads(
        streams: dict[str, DenseDataset]) -> None:
    """The same for a MixtureLoader (seed 14: step 0 draws record 12, the next steps none
    below 20 until later ones do)."""
    args: dict[str, Any] = dict(batch_size=10, transform=fails_below_20, seed=14, prefetch=2)
    seen: dict[str, list[Any]] = {}
    for worker_type in ("thread", "process"):
        with MixtureLoader([streams, streams], [0.5, 0.5], **args, worker_type=worker_type,
                           workers=2) as loader:
            seen[worker_type] = outcomes(loader, 30)
    assert seen["thread"][0][1] == "records below 20 are cursed (got 12)"
    assert seen["thread"][1][1] == "batch"
    assert_same_outcomes(seen["thread"], seen["process"])


_SIGINT_STORM = """
import gc, os, signal, sys, threading, time
import multiprocessing.forkserver, multiprocessing.resource_tracker
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset

def children():
    return [pid for task in os.listdir(f"/proc/{os.getpid()}/task")
            for pid in open(f"/proc/{os.getpid()}/task/{task}/children").read().split()]

if __name__ == "__main__":
    streams = {"label": DenseDataset(sys.argv[1])}
    storming, done = threading.Event(), threading.Event()

    def storm():  # real signals: SIGINT to this process every 10 ms
        storming.wait()
        while not done.is_set():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)

    thread = threading.Thread(target=storm)
    thread.start()
    interrupted, end = 0, time.monotonic() + float(sys.argv[2])
    storming.set()
    while True:
        loader = None
        try:
            if time.monotonic() > end:
                break
            loader = DataLoader(streams, batch_size=10, worker_type="process", workers=2,
                                start_method="forkserver")
            next(loader)
            next(loader)
        except KeyboardInterrupt:
            interrupted += 1
        finally:
            while loader is not None:
                try:
                    loader.close()
                    loader = None
                except KeyboardInterrupt:
                    pass
    while True:
        try:
            done.set()
            thread.join()
            break
        except KeyboardInterrupt:
            pass
    gc.collect()
    helpers = {multiprocessing.forkserver._forkserver._forkserver_pid,
               multiprocessing.resource_tracker._resource_tracker._pid}  # they stay (children())
    left = [pid for pid in children() if int(pid) not in helpers]
    files = [name for name in os.listdir("/dev/shm") if name.startswith(f"loaderx-{os.getpid()}-")]
    print(interrupted > 0, left, files)
"""


def test_a_sigint_storm_while_workers_start_leaves_nothing(
        streams: dict[str, DenseDataset]) -> None:
    """SIGINT every 10 ms, real signals, while loaders with forkserver workers are made, read
    and closed for 8 s. An interrupt that cut multiprocessing's Process.start() short in the
    forkserver handshake killed the forkserver (EOFError there) and the next loader's start
    raised BrokenPipeError (in two runs of three on the old code, within 6 s). Now workers
    start with SIGINT deferred: every interrupt is a KeyboardInterrupt, and no process and no
    /dev/shm file is left."""
    result = subprocess.run([sys.executable, "-c", _SIGINT_STORM, streams["label"].path, "8"],
                            capture_output=True, text=True, timeout=240,
                            cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "BrokenPipeError" not in result.stderr and "EOFError" not in result.stderr
    assert result.stdout == "True [] []\n", result.stderr[-3000:]


class _HeldInRecv:
    """A worker's pipe whose recv() stops where Connection.recv() has checked that the pipe is
    open and not yet read from it, until `go` is set: where a close() from another thread
    closed the pipe under the consumer."""

    def __init__(self, pipe: Any, inside: threading.Event, go: threading.Event) -> None:
        self._pipe = pipe
        self._inside = inside
        self._go = go

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pipe, name)

    def fileno(self) -> int:
        return int(self._pipe.fileno())

    def recv(self) -> Any:
        pipe = self._pipe
        pipe._check_closed()  # as Connection.recv starts
        pipe._check_readable()
        self._inside.set()
        self._go.wait(60)
        return ForkingPickler.loads(pipe._recv_bytes().getbuffer())


class _Noticed:
    """A lock that sets `reached` when `thread` comes to take it (the closer, below)."""

    def __init__(self, lock: Any, thread: list[threading.Thread], reached: threading.Event
                 ) -> None:
        self._lock = lock
        self._thread = thread
        self._reached = reached

    def __enter__(self) -> None:
        if threading.current_thread() in self._thread:
            self._reached.set()
        self._lock.__enter__()

    def __exit__(self, *exc: object) -> None:
        self._lock.__exit__(*exc)


def test_close_from_another_thread_never_closes_a_pipe_under_a_recv(
    streams: dict[str, DenseDataset]
) -> None:
    """A close() from another thread while the consumer reads a worker's answer: the consumer
    returns that step's batch or StopIteration. close() closed the pipe under the read, which
    then raised TypeError ('NoneType' object cannot be interpreted as an integer: the read had
    no descriptor left), or read from whatever file had been given its number since."""
    expected = batches(DataLoader(streams, batch_size=10, seed=6), 2)
    loader = DataLoader(streams, batch_size=10, seed=6, worker_type="process", workers=1,
                        prefetch=1)
    workers = loader._prefetcher._workers  # type: ignore[attr-defined]
    inside, go, closing = threading.Event(), threading.Event(), threading.Event()
    closer: list[threading.Thread] = []
    workers.pipes = [_HeldInRecv(pipe, inside, go) for pipe in workers.pipes]
    workers.using = _Noticed(getattr(workers, "using", None), closer, closing)
    outcome: list[Any] = []

    def consume() -> None:
        try:
            outcome.append({k: v.copy() for k, v in next(loader).items()})
            outcome.append({k: v.copy() for k, v in next(loader).items()})  # held in recv
        except StopIteration:
            outcome.append("StopIteration")
        except BaseException as error:  # noqa: BLE001 - reported by the test
            outcome.append(f"{type(error).__name__}: {error}")

    def close() -> None:
        try:
            loader.close()
        finally:
            closing.set()

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    assert inside.wait(60)
    closer.append(threading.Thread(target=close, daemon=True))
    closer[0].start()
    closing.wait(60)  # the close is done, or waits for the consumer to leave the pipes
    go.set()
    consumer.join(60)
    closer[0].join(60)
    assert not consumer.is_alive() and not closer[0].is_alive(), "next() or close() hung"
    assert_same(outcome[:1], expected[:1])
    assert len(outcome) == 2 and (outcome[1] == "StopIteration" or isinstance(outcome[1], dict)), \
        outcome[1:]
    if outcome[1] != "StopIteration":  # the answer was read before close() got the pipes
        assert_same(outcome[1:], expected[1:])


def test_a_ctrl_c_as_a_ring_is_released_still_releases_all_of_it(
    streams: dict[str, DenseDataset], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real SIGINT as close() starts to remove the slot files: the removal, the workers'
    kill and the reaping still run (the interrupt is raised after them), and nothing is left.
    Before, the KeyboardInterrupt cut that part short and, the finaliser having run, nothing
    ever ran it again: the files stayed for good and the workers until exit. (A SIGINT storm
    in CI left four slot files so.)"""
    loader = DataLoader(streams, batch_size=10, worker_type="process", workers=2,
                        start_method="fork")
    assert_same([{k: v.copy() for k, v in next(loader).items()} for _ in range(2)],
                batches(DataLoader(streams, batch_size=10, worker_type="thread", workers=1), 2))
    ring = loader._prefetcher._rings.all[0]  # type: ignore[attr-defined]
    files = type(ring.files)
    unlink_all = files.unlink_all
    interrupts = [signal.SIGINT]

    def interrupted_then_unlinking(self: Any) -> None:
        if interrupts:
            signal.raise_signal(interrupts.pop())  # Python's handler runs at the next line
        unlink_all(self)

    monkeypatch.setattr(files, "unlink_all", interrupted_then_unlinking)
    with pytest.raises(KeyboardInterrupt):
        loader.close()
    assert loader.closed and not interrupts
    assert shm_files() == [] and children() == []


def test_every_ring_is_stopped_when_stopping_an_earlier_one_was_interrupted() -> None:
    """The finaliser of a ProcessSteps stops every ring it started (a new one after an
    interrupted next()). Before, an interrupt out of the first ring's stop skipped the rest."""
    stopped: list[str] = []

    class Ring:
        def __init__(self, name: str, interrupted: bool) -> None:
            self.name, self.interrupted = name, interrupted

        def stop(self) -> None:
            stopped.append(self.name)
            if self.interrupted:
                raise KeyboardInterrupt

    rings = _Rings()
    rings.all = [Ring("first", True), Ring("second", False), Ring("third", True)]  # type: ignore[list-item]
    with pytest.raises(KeyboardInterrupt):
        rings.stop()
    assert stopped == ["first", "second", "third"]
