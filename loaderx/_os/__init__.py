"""Operating-system helpers: paths, descriptors, lock files, fork-safe locks, folder swaps and claims.

Private: import from loaderx's public modules instead."""
