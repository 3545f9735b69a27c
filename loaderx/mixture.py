"""Weighted mixtures of datasets as pure functions of (seed, step): MixtureSampler, MixtureLoader.

The public face of loaderx._loading.mixture: every name here is part of loaderx's API."""

from loaderx._loading.mixture import (
    MixtureLoader,
    MixtureSampler,
    shares,
)

__all__ = [
    "MixtureLoader",
    "MixtureSampler",
    "shares",
]
