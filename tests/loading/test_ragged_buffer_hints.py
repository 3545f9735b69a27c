"""A ragged stream's buffer sizes are hints shared by the threads that make steps: a thread may
write a smaller one over a larger one (a lost update) between another thread's write and its
allocation. The gather must still get a buffer big enough, from its own value.

The interleaving is forced, not waited for: a trace function lowers the shared hints before
every line of the sizing methods, as another thread could between any two of them. Tracing
needs the interpreted ragged_batch module, so this module is not marked compiled (mypyc compiles
the same source, and the compiled run checks ragged batches in test_ragged_batches.py).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import pytest

from loaderx._loading.ragged_batch import RaggedStream  # private: the unit under test
from loaderx.dataloader import Padding
from loaderx.dataset import RaggedDataset

HINTS = ("_capacity", "_padded_capacity", "_mask_capacity")
SIZING = {"_fresh", "_gather_padded"}


@contextmanager
def hints_lowered_between_lines(stream: RaggedStream) -> Iterator[None]:
    """Before every line of the sizing methods, sets the stream's shared hints to 0."""

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            for hint in HINTS:
                setattr(stream, hint, 0)
        return local

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        return local if event == "call" and frame.f_code.co_name in SIZING else None

    sys.settrace(tracer)
    try:
        yield
    finally:
        sys.settrace(None)


@pytest.fixture
def tokens(tmp_path: Path) -> Iterator[RaggedDataset]:
    rng = np.random.default_rng(3)
    dataset = RaggedDataset(tmp_path / "t", dtype=np.int32)
    dataset.append([rng.integers(0, 1000, size=n, dtype=np.int32) for n in (700, 5, 1300, 64)])
    yield dataset
    dataset.close()


def test_a_packed_gather_sizes_its_buffer_from_its_own_value(tokens: RaggedDataset) -> None:
    if not hasattr(RaggedStream._fresh, "__code__"):
        pytest.fail("ragged_batch is compiled here: run this module interpreted")
    indices = np.array([2, 0, 3, 1, 2], dtype=np.int64)
    stream = RaggedStream("x", tokens, None, len(indices), 1)
    batch: dict[str, Any] = {}
    with hints_lowered_between_lines(stream):
        stream.gather([(tokens, indices)], 0, True, batch)
    expected = [tokens[int(i)] for i in indices]
    np.testing.assert_array_equal(batch["x"], np.concatenate(expected))
    lengths = [len(record) for record in expected]
    np.testing.assert_array_equal(batch["x.cu_seqlens"], np.cumsum([0, *lengths]))


def test_a_padded_gather_sizes_its_buffers_from_its_own_values(tokens: RaggedDataset) -> None:
    if not hasattr(RaggedStream._gather_padded, "__code__"):
        pytest.fail("ragged_batch is compiled here: run this module interpreted")
    indices = np.array([1, 2, 3], dtype=np.int64)
    stream = RaggedStream("x", tokens, Padding(value=-1), len(indices), 1)
    batch: dict[str, Any] = {}
    with hints_lowered_between_lines(stream):
        stream.gather([(tokens, indices)], 0, True, batch)
    assert batch["x"].shape == (3, 1300)
    for row, index in enumerate(indices):
        record = tokens[int(index)]
        np.testing.assert_array_equal(batch["x"][row, : len(record)], record)
        assert (batch["x"][row, len(record):] == -1).all()
        assert batch["x.mask"][row].sum() == len(record) and batch["x.mask"][row, : len(record)].all()
