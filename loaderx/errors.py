"""Exception classes raised by loaderx beyond Python's built-in ones."""

from __future__ import annotations

__all__ = [
    "LoaderxError",
    "NotAStoreError",
    "CorruptStoreError",
    "StoreFullError",
    "StoreLockedError",
    "ReadOnlyStoreError",
    "DescriptorLimitError",
    "DictionaryError",
    "CodecError",
    "SchemaError",
    "LibraryNotFoundError",
    "ManifestError",
    "StateMismatchError",
    "WorkerError",
    "ProducerGone",
    "RemoteError",
    "RemoteChangedError",
    "UnsupportedURLError",
    "MissingExtraError",
]


class LoaderxError(Exception):
    """Base class of every loaderx-specific error."""


class NotAStoreError(LoaderxError, ValueError):
    """The path exists but is not a Zrecord store (wrong magic, version or file size)."""


class CorruptStoreError(LoaderxError):
    """The store's files disagree with each other (a table entry outside its chunk, a bad frame)."""


class StoreFullError(LoaderxError):
    """An append would take the store past its 2**24 record limit."""


class StoreLockedError(LoaderxError):
    """Another handle holds a lock this call needs: it writes to the store (one writer at a time),
    or it has the store open while delete, compact or train_dict need it to themselves."""


class ReadOnlyStoreError(LoaderxError, PermissionError):
    """A write (append, delete, compact, train_dict, sync) to a store opened with readonly=True."""


class DescriptorLimitError(LoaderxError, OSError):
    """The process is out of file descriptors (errno EMFILE) and loaderx could not raise its
    soft RLIMIT_NOFILE further; the message names the limit and what to do."""


class DictionaryError(LoaderxError):
    """A zstd dictionary is missing where one is needed, or cannot be replaced."""


class CodecError(LoaderxError):
    """zstd reported an error while compressing or decompressing."""


class SchemaError(LoaderxError, ValueError):
    """A dataset's schema is missing, malformed, or disagrees with what was asked for."""


class LibraryNotFoundError(LoaderxError, ImportError):
    """The native library was not found or does not match this version of the Python package."""


class ManifestError(LoaderxError, ValueError):
    """A sharded dataset's manifest (shards.msgpack) is malformed or disagrees with its shards."""


class StateMismatchError(LoaderxError, ValueError):
    """A loader's saved state was made for other data (lengths, batch, mode) than it is loaded into."""


class WorkerError(LoaderxError, RuntimeError):
    """A worker process failed or died: one of a parallel conversion (the destination is
    unchanged) or one of a loader's (loaderx.dataloader.WorkerError, a subclass).

    `worker` is a conversion's failed worker's index, or None for a loader's, whose message
    names the step instead; the message names the cause (the exception with the worker's
    traceback, or the signal that killed it).
    """

    worker: int | None

    def __init__(self, worker: int | None, message: str) -> None:
        super().__init__(message)
        self.worker = worker

    def __reduce__(self) -> tuple[type[WorkerError], tuple[int | None, str]]:
        return (type(self), (self.worker, str(self)))


class ProducerGone(LoaderxError, RuntimeError):
    """A loader's worker thread asked for a step of a loader that has been collected."""


class RemoteError(LoaderxError, OSError):
    """An object store did not answer as it must: still failing after the retry budget (a
    server down, repeated 5xx or timeouts), or a piece that fails its checksum. The message names
    the URL and the object."""


class RemoteChangedError(RemoteError):
    """An object of a remote dataset changed (another ETag or generation) while a reader used
    the version it opened; reopen the dataset to read the new one."""


class UnsupportedURLError(LoaderxError, ValueError):
    """A URL was given where loaderx cannot take one (a call that only works on local folders,
    or an unknown scheme)."""


class MissingExtraError(LoaderxError, ImportError):
    """An optional integration's package is not installed; the message names the extra to
    install (e.g. pip install 'loaderx[remote]')."""
