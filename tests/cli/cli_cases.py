"""What the loaderx command's tests (test_cli*.py) share: the command run in-process with what
it prints, the repository's root, a folder's files with their bytes, and an array of images
saved as .npy (a fixture)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from loaderx.cli import main


ROOT = Path(__file__).resolve().parents[2]


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    status = main(list(argv), out=out)
    return status, out.getvalue()


@pytest.fixture
def images(tmp_path: Path) -> np.ndarray:
    data = np.random.default_rng(1).integers(0, 8, size=(500, 32, 32), dtype=np.uint8)
    np.save(tmp_path / "images.npy", data)
    return data


def tree(root: Path) -> dict[str, bytes]:
    """Every file under root, by relative path, with its bytes."""
    return {str(path.relative_to(root)): path.read_bytes()
            for path in sorted(root.rglob("*")) if path.is_file()}
