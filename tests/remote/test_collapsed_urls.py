"""A URL whose '//' was lost is refused, never written as a local folder named after its scheme.

remote.md promises that a typo never becomes a local folder. `str(Path("s3://bucket/ds"))` is
"s3:/bucket/ds" (pathlib collapses the double slash), and loaderx took that for the relative
path s3:/bucket/ds: a conversion built the dataset in a local folder called "s3:".
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loaderx.converter import from_iterator, from_numpy
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.errors import UnsupportedURLError
from loaderx.zrecord import Zrecord

CALLS: list[tuple[str, Callable[[], Any]]] = [
    ("from_numpy str", lambda: from_numpy("s3:/bucket/ds", np.arange(3))),
    ("from_numpy Path", lambda: from_numpy(Path("s3://bucket/ds"), np.arange(3))),
    ("from_numpy no slash", lambda: from_numpy("gs:bucket/ds", np.arange(3))),
    ("from_iterator", lambda: from_iterator(Path("az://container/ds"), [np.arange(3)])),
    ("DenseDataset create", lambda: DenseDataset(Path("s3://b/ds"), dtype=np.int64)),
    ("RaggedDataset create", lambda: RaggedDataset("S3:/b/ds", dtype=np.int64)),
    ("Zrecord create", lambda: Zrecord(Path("gs://b/ds"), create=True)),
    ("DenseDataset open", lambda: DenseDataset(Path("s3://b/ds"))),
]


@pytest.mark.parametrize("call", [call for _, call in CALLS], ids=[name for name, _ in CALLS])
def test_a_url_that_lost_a_slash_is_refused_and_creates_nothing(
    call: Callable[[], Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UnsupportedURLError, match=r"looks like the URL \w+://.* with '//' lost"):
        call()
    assert list(tmp_path.iterdir()) == []


def test_paths_that_only_resemble_a_scheme_stay_local(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a first segment that is exactly a known scheme and a colon is refused: "s3x:",
    "data:" or a folder merely containing "s3:" further down are ordinary local names."""
    monkeypatch.chdir(tmp_path)
    for path in ["s3x:/ds", "data:set", "runs/s3:/ds", "file:x"]:
        assert from_numpy(path, np.arange(3)) == 3
        with DenseDataset(path) as ds:
            assert ds[:].tolist() == [0, 1, 2]
