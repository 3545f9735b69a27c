"""loaderx: a persistent record store with zero-copy batch gathering, and an endless loader."""

from __future__ import annotations

__version__ = "0.9.17"
__all__ = ["release_buffers"]


def release_buffers() -> int:
    """Frees the memory loaderx keeps to recycle big read results (see loaderx.result_buffers)
    and returns how many bytes that was."""
    # Imported here so that `import loaderx` alone stays as light as it was.
    from loaderx._native.result_buffers import release_buffers as release

    return release()
