"""Owns DataLoader: the endless, step-based, thread-prefetched loader over datasets; Padding.

The public face of loaderx._loading.dataloader: every name here is part of loaderx's API."""

from loaderx._loading.dataloader import (
    DataLoader,
    Batch,
    Padding,
    Transform,
)
from loaderx._loading.process_workers import WorkerError

__all__ = [
    "DataLoader",
    "Batch",
    "Padding",
    "Transform",
    "WorkerError",
]
