"""`--only` selection: which contenders of a layer run.

A contender's slug is its name in lower case with spaces turned into dashes
("tensorstore-zarr-raw", "loaderx-zstd_dict"). A selector picks every contender whose slug equals
it or starts with it plus a dash, so "h5py" picks both HDF5 rows, "loaderx" every loaderx row and
"loaderx-zstd" plain zstd only (the dictionary codec is "loaderx-zstd_dict"). Without `--only`, every contender runs
except the heavy ones; with it, exactly the selected ones run, plus the table's reference.
"""

from __future__ import annotations


def slug(name: str) -> str:
    return name.replace(" ", "-").lower()


def matches(name: str, selectors: list[str]) -> bool:
    s = slug(name)
    return any(s == slug(sel) or s.startswith(slug(sel) + "-") for sel in selectors)


def wanted(name: str, heavy: bool, only: list[str] | None, reference: bool = False) -> bool:
    if reference:
        return True
    if only:
        return matches(name, only)
    return not heavy
