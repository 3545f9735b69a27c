"""Loading: the sampler, mixtures, the DataLoader, its prefetcher and checkpoints.

Private: import from loaderx's public modules instead."""
