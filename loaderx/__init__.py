"""loaderx: a persistent record store with zero-copy batch gathering, and an endless loader."""

from __future__ import annotations

__version__ = "0.9.17"
