"""asv: append and random batch gather through DenseDataset, per codec (time and peak memory)."""

from __future__ import annotations

import shutil
import tempfile

import numpy as np

from . import common


class Gather(common.Steady):
    """Random gather of 256 of 2000 records of 12 KiB, per codec."""

    params = list(common.CODECS)
    param_names = ["codec"]
    timeout = 300

    def setup_cache(self) -> None:
        common.build_stores()

    def setup(self, codec: str) -> None:
        from loaderx.dataset import DenseDataset

        self.dataset = DenseDataset(common.store_path(codec))
        self.batches = common.batches(len(self.dataset))
        self.out = np.empty((common.BATCH, *common.SHAPE), dtype=np.uint8)
        self.cursor = 0

    def teardown(self, codec: str) -> None:
        self.dataset.close()

    def next_batch(self) -> np.ndarray:
        self.cursor = (self.cursor + 1) % len(self.batches)
        return self.batches[self.cursor]

    def time_getitem(self, codec: str) -> None:
        self.dataset[self.next_batch()]

    def time_gather_into(self, codec: str) -> None:
        self.dataset.gather_into(self.next_batch(), self.out)

    def peakmem_getitem(self, codec: str) -> None:
        for batch in self.batches:
            self.dataset[batch]


class GatherVsNumpy:
    """ds[idx] against NumPy fancy indexing of the same records in a memmapped .npy, raw only:
    both are one copy per record, so the ratio speaks of loaderx's access path. (A zstd gather
    decompresses on every core; its ratio to a one-thread copy swings with the machine's load.)"""

    timeout = 300

    def setup_cache(self) -> None:
        common.build_stores(("raw",))

    def setup(self) -> None:
        from loaderx.dataset import DenseDataset

        self.dataset = DenseDataset(common.store_path("raw"))
        self.batches = common.batches(len(self.dataset))

    def teardown(self) -> None:
        self.dataset.close()

    def track_time_vs_numpy(self) -> float:
        """Time of ds[idx] over NumPy's a[idx], back to back (lower is better)."""
        reference = np.load(common.NPY_REFERENCE, mmap_mode="r")
        batch = self.batches[0]
        return common.median_ratio(lambda: self.dataset[batch], lambda: reference[batch])

    track_time_vs_numpy.unit = "ratio"  # type: ignore[attr-defined]


class Append(common.Steady):
    """Appending a batch of 256 records of 12 KiB to an open store, per codec."""

    params = list(common.CODECS)
    param_names = ["codec"]
    timeout = 300

    def setup(self, codec: str) -> None:
        from loaderx.dataset import DenseDataset

        self.folder = tempfile.mkdtemp(prefix="asv-append-")
        self.data = common.records(common.BATCH, seed=5)
        self.dataset = DenseDataset(f"{self.folder}/store", dtype=np.uint8,
                                    item_shape=common.SHAPE, codec=codec)
        if codec == "zstd_dict":
            self.dataset.train_dict(common.records(400, seed=6), "small")

    def teardown(self, codec: str) -> None:
        self.dataset.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def time_append(self, codec: str) -> None:
        self.dataset.append(self.data)
