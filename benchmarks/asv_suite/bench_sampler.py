"""asv: one sampler batch per call, every mode, small and large batches."""

from __future__ import annotations

import numpy as np

from . import common


class Sampler(common.Steady):
    params = (["sequential", "iid", "cyclic"], [256, 8192])
    param_names = ["mode", "batch"]

    def setup(self, mode: str, batch: int) -> None:
        from loaderx.sampler import Sampler as LoaderxSampler

        self.sampler = LoaderxSampler(1_000_000, batch, mode=mode, seed=0)
        self.out = np.empty(batch, dtype=np.int64)
        self.step = 0

    def time_batch(self, mode: str, batch: int) -> None:
        self.step += 1
        self.sampler.batch(self.step)

    def time_fill(self, mode: str, batch: int) -> None:
        self.step += 1
        self.sampler.fill(self.step, self.out)

    def track_time_vs_numpy(self, mode: str, batch: int) -> float:
        """Time of batch(step) over Generator.integers for the same batch, back to back."""
        rng = np.random.default_rng(0)
        return common.median_ratio(lambda: self.sampler.batch(3),
                                   lambda: rng.integers(0, 1_000_000, size=batch), rounds=200)

    track_time_vs_numpy.unit = "ratio"  # type: ignore[attr-defined]


class NumpyReference(common.Steady):
    """NumPy's with-replacement draw over the same index space, for the dashboard's scale."""

    params = [256, 8192]
    param_names = ["batch"]

    def setup(self, batch: int) -> None:
        self.rng = np.random.default_rng(0)

    def time_integers(self, batch: int) -> None:
        self.rng.integers(0, 1_000_000, size=batch)
