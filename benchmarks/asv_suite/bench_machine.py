"""asv: the machine's load while the suite ran, so a slow point on the dashboard can be told
apart from a slow commit (asv.conf.json never flags this one as a regression)."""

from __future__ import annotations

import os


def track_load_average() -> float:
    """The 1-minute load average when asv reached this benchmark (2 cores: above 2 is busy)."""
    return os.getloadavg()[0]


track_load_average.unit = "load"  # type: ignore[attr-defined]
