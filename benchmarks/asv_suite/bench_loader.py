"""asv: the DataLoader's loop (sample, gather, hand over), raw and zstd, 32 batches a sample."""

from __future__ import annotations

from . import common

STEPS = 32


class Loop(common.Steady):
    params = ["raw", "zstd"]
    param_names = ["codec"]
    timeout = 300

    def setup_cache(self) -> None:
        common.build_stores(("raw", "zstd"))

    def setup(self, codec: str) -> None:
        from loaderx.dataloader import DataLoader
        from loaderx.dataset import DenseDataset

        self.dataset = DenseDataset(common.store_path(codec))
        self.loader = DataLoader({"x": self.dataset}, batch_size=common.BATCH, mode="iid")
        self.iterator = iter(self.loader)
        next(self.iterator)  # threads started, first batch out of the way

    def teardown(self, codec: str) -> None:
        self.loader.close()
        self.dataset.close()

    def time_steps(self, codec: str) -> None:
        for _ in range(STEPS):
            next(self.iterator)

    def peakmem_steps(self, codec: str) -> None:
        for _ in range(STEPS):
            next(self.iterator)
