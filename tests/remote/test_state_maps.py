"""The state files' mappings (loaderx._remote.state_maps): shared between two openers, unmapped
by close(), and, when an array over a mapping is still referenced somewhere, left mapped until
that array goes (never unmapped under it, which would make its next read a SIGSEGV)."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np

from loaderx._remote.state_maps import StateMaps


def mapped(folder: Path) -> list[str]:
    prefix = str(folder.resolve())
    return [line for line in open("/proc/self/maps") if prefix in line]


def test_two_openers_share_the_files_and_close_unmaps_them(tmp_path: Path) -> None:
    first, second = StateMaps(str(tmp_path), [5, 0, 3]), StateMaps(str(tmp_path), [5, 0, 3])
    with first.lock:
        first.present[0][[1, 4]] = 1
        first.present[2][2] = 1
        first.epoch[0] += 2
        first.used[0] = 8192
    with second.lock:
        assert second.present[0].tolist() == [0, 1, 0, 0, 1]
        assert second.present[1].tolist() == [] and second.present[2].tolist() == [0, 0, 1]
        assert (int(second.epoch[0]), int(second.used[0])) == (2, 8192)
    assert len(mapped(tmp_path)) == 8  # two stores with records and two counters, twice
    first.close()
    second.close()
    assert mapped(tmp_path) == []
    assert first.closed and second.present[0].tolist() == [] and len(second.epoch) == 0
    assert (tmp_path / "0.present").read_bytes() == bytes([0, 1, 0, 0, 1])
    first.close()  # again: nothing to do


def test_an_array_still_referenced_keeps_its_mapping_until_it_goes(tmp_path: Path) -> None:
    maps = StateMaps(str(tmp_path), [4])
    with maps.lock:
        maps.present[0][3] = 1
        kept = maps.present[0]  # as a traceback's frame might hold it
    maps.close()
    assert kept.tolist() == [0, 0, 0, 1]  # still mapped: reading it is safe
    assert [line for line in mapped(tmp_path) if "0.present" in line]
    del kept
    gc.collect()
    assert mapped(tmp_path) == []
