"""mypy sees the public API's literal types: a wrong codec, mode or loader keyword is a type error."""

from __future__ import annotations

from pathlib import Path

from mypy import api

ROOT = Path(__file__).resolve().parents[2]

WRONG = '''
from loaderx.converter import from_numpy
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset
from loaderx.sampler import Sampler
import numpy as np

from_numpy("a", np.zeros(3), codec="gzip")
DenseDataset("b", dtype=np.uint8, codec="lz4")
Sampler(10, 2, mode="shuffle")
DataLoader({"x": DenseDataset("c")}, mode="random")
DataLoader({"x": DenseDataset("c")}, num_workers=4)
'''

RIGHT = '''
from loaderx.converter import from_numpy
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset
import numpy as np

from_numpy("a", np.zeros(3), codec="zstd_dict", dict_size="small")
DataLoader({"x": DenseDataset("c")}, mode="iid", workers=2)
'''


def check(tmp_path: Path, source: str) -> tuple[str, int]:
    script = tmp_path / "user_code.py"
    script.write_text(source)
    out, err, status = api.run(
        ["--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"),
         "--config-file", str(ROOT / "pyproject.toml"), str(script)]
    )
    return out + err, status


def test_wrong_literals_and_keywords_are_type_errors(tmp_path: Path) -> None:
    output, status = check(tmp_path, WRONG)
    assert status == 1, output
    assert 'Argument "codec" to "from_numpy" has incompatible type "Literal[\'gzip\']"' in output
    assert 'Argument "codec" to "DenseDataset" has incompatible type "Literal[\'lz4\']"' in output
    assert 'Argument "mode" to "Sampler" has incompatible type "Literal[\'shuffle\']"' in output
    assert 'Argument "mode" to "DataLoader" has incompatible type "Literal[\'random\']"' in output
    assert 'Argument "num_workers" to "DataLoader"' in output
    assert "Found 5 errors" in output


def test_right_literals_pass(tmp_path: Path) -> None:
    output, status = check(tmp_path, RIGHT)
    assert status == 0, output
