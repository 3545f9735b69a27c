"""A loader's worker-process failure is the same kind of error as a conversion worker's: a
loaderx.errors.WorkerError and so a LoaderxError, as docs/guide.md ("Errors") promises. The
loader's WorkerError was once a class of its own, a bare RuntimeError, which an
`except loaderx.errors.WorkerError` or `except LoaderxError` around next() did not catch."""

from __future__ import annotations

import pickle

from test_process_workers import fails_at_label_7, streams

import loaderx.errors
from loaderx.dataloader import DataLoader, WorkerError
from loaderx.dataset import DenseDataset

__all__ = ["streams"]  # the fixture


def test_a_failed_worker_step_is_caught_as_loaderx_errors_worker_error(
    streams: dict[str, DenseDataset],
) -> None:
    with DataLoader(streams, batch_size=10, mode="sequential", transform=fails_at_label_7,
                    worker_type="process", workers=1, prefetch=1,
                    start_method="forkserver") as loader:
        try:
            next(loader)
            raise AssertionError("step 0 holds record 7: its transform must fail")
        except loaderx.errors.WorkerError as error:
            caught: Exception = error
    assert type(caught) is WorkerError
    assert isinstance(caught, loaderx.errors.LoaderxError)
    assert isinstance(caught, RuntimeError)
    assert caught.worker is None  # not a conversion's part: the message names the step
    assert "record 7 is cursed" in str(caught)
    again = pickle.loads(pickle.dumps(caught))
    assert type(again) is WorkerError and str(again) == str(caught) and again.worker is None


def test_the_loaders_worker_error_classes_belong_to_loaderx_errors() -> None:
    from loaderx._loading.process_workers import RemoteWorkerError  # private: no public path
    assert issubclass(WorkerError, loaderx.errors.WorkerError)
    assert issubclass(RemoteWorkerError, loaderx.errors.WorkerError)
    assert issubclass(RemoteWorkerError, loaderx.errors.RemoteError)
    remote = RemoteWorkerError("the store is down")
    assert str(remote) == "the store is down" and remote.worker is None
    again = pickle.loads(pickle.dumps(remote))
    assert type(again) is RemoteWorkerError and str(again) == "the store is down"
