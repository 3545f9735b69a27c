"""The pool of recycled memory behind big read results (ds[idx] of 32 MiB and more).

The public face of loaderx._native.result_buffers: every name here is part of loaderx's API."""

from loaderx._native.result_buffers import (
    Limits,
    POOL,
    ResultBufferPool,
    configure,
    empty_bytes,
    release_buffers,
    stats,
)

__all__ = [
    "Limits",
    "POOL",
    "ResultBufferPool",
    "configure",
    "empty_bytes",
    "release_buffers",
    "stats",
]
