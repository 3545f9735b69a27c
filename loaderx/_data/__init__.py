"""Datasets and converters: typed NumPy datasets, serial and parallel conversion, progress.

Private: import from loaderx's public modules instead."""
