"""The Zig library: loading it, its typed calls, result buffers and ndarray field probes.

Private: import from loaderx's public modules instead."""
