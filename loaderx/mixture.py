"""Weighted mixtures of datasets as pure functions of (seed, step): MixtureSampler, MixtureLoader.

The public face of loaderx._loading.mixture and loaderx._loading.mixture_sampler: every name
here is part of loaderx's API."""

from loaderx._loading.mixture import MixtureLoader
from loaderx._loading.mixture_sampler import MixtureSampler, shares

__all__ = [
    "MixtureLoader",
    "MixtureSampler",
    "shares",
]
