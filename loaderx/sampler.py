"""Sampler: the record indices of every training step, a thin typed layer over lx_sampler_batch.

The public face of loaderx._loading.sampler: every name here is part of loaderx's API."""

from loaderx._loading.sampler import (
    Sampler,
    MODES,
    Mode,
)

__all__ = [
    "Sampler",
    "MODES",
    "Mode",
]
