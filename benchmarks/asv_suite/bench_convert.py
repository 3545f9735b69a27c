"""asv: from_numpy over a memory-mapped .npy, time per codec and peak memory."""

from __future__ import annotations

import shutil

import numpy as np

from . import common

NPY = "convert-input.npy"
COUNT = 8192  # 96 MiB of 12 KiB records


class FromNumpy(common.Steady):
    params = ["raw", "zstd"]
    param_names = ["codec"]
    timeout = 300
    number = 1
    repeat = 3
    rounds = 2

    def setup_cache(self) -> None:
        mapped = np.lib.format.open_memmap(NPY, mode="w+", dtype=np.uint8,
                                           shape=(COUNT, *common.SHAPE))
        block = common.records(512, seed=9)
        for start in range(0, COUNT, len(block)):
            mapped[start:start + len(block)] = block
        mapped.flush()

    def setup(self, codec: str) -> None:
        self.array = np.load(NPY, mmap_mode="r")
        self.dest = f"convert-{codec}"
        shutil.rmtree(self.dest, ignore_errors=True)

    def teardown(self, codec: str) -> None:
        shutil.rmtree(self.dest, ignore_errors=True)

    def time_from_numpy(self, codec: str) -> None:
        from loaderx.converter import from_numpy

        from_numpy(self.dest, self.array, codec=codec, overwrite=True)

    def peakmem_from_numpy(self, codec: str) -> None:
        from loaderx.converter import from_numpy

        from_numpy(self.dest, self.array, codec=codec, overwrite=True)
