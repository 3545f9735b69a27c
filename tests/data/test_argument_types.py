"""The interpreted and the compiled build take the same arguments and give the same errors.

Boolean flags take a bool or a NumPy bool and refuse anything else with a TypeError naming the
parameter and the value, before any file is touched (the compiled build refused np.True_ with
mypyc's "bool object expected; got numpy.bool", the interpreted one took readonly="no" for
True). A str choice (codec=, mode=, worker_type=, start_method=) given what is no str gets a
TypeError, given an unknown str a ValueError, both "<name> must be one of <choices>, got
<value>" (not mypyc's "str object expected; got None"), wherever the parameter is taken. A closed local dataset, single or sharded, says "dataset '/path'
is closed", as a closed remote one does, while a closed Zrecord still names itself.

`build.py test` runs this module again against the compiled modules (pytest -m compiled).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loaderx.converter import from_arrow, from_iterator, from_numpy, recode
from loaderx.dataloader import DataLoader, Padding
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.mixture import MixtureLoader
from loaderx.sampler import Sampler
from loaderx.zrecord import Zrecord

pytestmark = pytest.mark.compiled

NOT_FLAGS = [1, 0, "no", "", None, [True], np.int64(1)]
NOT_OPTIONAL_FLAGS = [1, 0, "no", [True], np.int64(1)]


def _dense(path: Path) -> DenseDataset:
    ds = DenseDataset(path, dtype=np.float32, item_shape=(2,))
    ds.append(np.arange(16, dtype=np.float32).reshape(8, 2))
    return ds


def _ragged(path: Path) -> RaggedDataset:
    rs = RaggedDataset(path, dtype=np.int32, item_shape=())
    rs.append([np.arange(n, dtype=np.int32) for n in (3, 0, 5, 1, 2, 4, 1, 1)])
    return rs


# --- boolean flags ---------------------------------------------------------------------------


@pytest.mark.parametrize("true", [True, np.True_])
def test_dataset_flags_take_python_and_numpy_bools(tmp_path: Path, true: Any) -> None:
    false = not true if isinstance(true, bool) else np.False_
    _dense(tmp_path / "d").close()
    _ragged(tmp_path / "r").close()
    for kind in (DenseDataset, RaggedDataset):
        path = tmp_path / ("d" if kind is DenseDataset else "r")
        with kind(path, readonly=true, verify=false) as ds:
            assert ds.readonly is True
            assert ds.store.verify_reads is False
        with kind(path, readonly=false, verify=true) as ds:
            assert ds.readonly is False
            assert ds.store.verify_reads is True


@pytest.mark.parametrize("value", NOT_FLAGS)
@pytest.mark.parametrize("kind", [DenseDataset, RaggedDataset])
def test_datasets_refuse_a_readonly_that_is_no_bool(
    tmp_path: Path, kind: type[DenseDataset] | type[RaggedDataset], value: Any
) -> None:
    existing = _dense(tmp_path / "d") if kind is DenseDataset else _ragged(tmp_path / "d")
    existing.close()
    with pytest.raises(TypeError) as refused:
        kind(tmp_path / "d", readonly=value)
    assert str(refused.value) == f"readonly must be True or False, got {value!r}"
    with pytest.raises(TypeError) as refused:
        kind(tmp_path / "new", dtype=np.float32, item_shape=(2,), readonly=value)
    assert str(refused.value) == f"readonly must be True or False, got {value!r}"
    assert not os.path.lexists(tmp_path / "new")


@pytest.mark.parametrize("value", NOT_OPTIONAL_FLAGS)
@pytest.mark.parametrize("kind", [DenseDataset, RaggedDataset])
def test_datasets_refuse_a_verify_that_is_no_bool_or_none(
    tmp_path: Path, kind: type[DenseDataset] | type[RaggedDataset], value: Any
) -> None:
    with pytest.raises(TypeError) as refused:
        kind(tmp_path / "new", dtype=np.float32, item_shape=(2,), verify=value)
    assert str(refused.value) == f"verify must be True, False or None, got {value!r}"
    assert not os.path.lexists(tmp_path / "new")


def test_zrecord_flags_take_numpy_bools(tmp_path: Path) -> None:
    with Zrecord(tmp_path / "z", create=np.True_, durable=np.False_, readonly=np.False_,
                 verify=np.True_) as store:
        assert store.verify_reads is True and store.readonly is False
    with Zrecord(tmp_path / "z", create=np.False_, readonly=np.True_, verify=np.False_) as store:
        assert store.verify_reads is False and store.readonly is True


@pytest.mark.parametrize(("flag", "value"), [
    *((flag, value) for flag in ("create", "durable", "readonly") for value in NOT_FLAGS),
    *(("verify", value) for value in NOT_OPTIONAL_FLAGS),
])
def test_zrecord_flags_refuse_what_is_no_bool(tmp_path: Path, flag: str, value: Any) -> None:
    with pytest.raises(TypeError) as refused:
        Zrecord(tmp_path / "new", **{"create": True, flag: value})
    choices = "True, False or None" if flag == "verify" else "True or False"
    assert str(refused.value) == f"{flag} must be {choices}, got {value!r}"
    assert not os.path.lexists(tmp_path / "new")


@pytest.mark.parametrize("true", [True, np.True_])
def test_reuse_buffers_takes_python_and_numpy_bools(tmp_path: Path, true: Any) -> None:
    ds = _dense(tmp_path / "d")
    with DataLoader({"x": ds}, batch_size=2, reuse_buffers=true) as loader:
        assert loader.reuse_buffers is True
        assert next(loader)["x"].shape == (2, 2)
    with DataLoader({"x": ds}, batch_size=2, reuse_buffers=np.False_) as loader:
        assert loader.reuse_buffers is False
    ds.close()


@pytest.mark.parametrize("value", NOT_FLAGS)
def test_reuse_buffers_refuses_what_is_no_bool(tmp_path: Path, value: Any) -> None:
    ds = _dense(tmp_path / "d")
    with pytest.raises(TypeError) as refused:
        DataLoader({"x": ds}, batch_size=2, reuse_buffers=value)
    assert str(refused.value) == f"reuse_buffers must be True or False, got {value!r}"
    ds.close()


@pytest.mark.parametrize("true", [True, np.True_])
def test_padding_truncate_takes_python_and_numpy_bools(true: Any) -> None:
    assert Padding(4, truncate=true).truncate is True
    assert Padding(4, truncate=np.False_).truncate is False


@pytest.mark.parametrize("value", NOT_FLAGS)
def test_padding_truncate_refuses_what_is_no_bool(value: Any) -> None:
    with pytest.raises(TypeError) as refused:
        Padding(4, truncate=value)
    assert str(refused.value) == f"truncate must be True or False, got {value!r}"


def _converters(tmp_path: Path) -> dict[str, Callable[..., int]]:
    """Each converter with its arguments but the flags (the destination is tmp_path/out)."""
    source = _dense(tmp_path / "src")
    source.close()
    out = tmp_path / "out"
    table = pytest.importorskip("pyarrow").table({"a": [1, 2, 3]})
    return {
        "from_numpy": lambda **flags: from_numpy(out, np.zeros((3, 2)), **flags),
        # With workers, each item is a source of records (append=True always takes sources).
        "from_iterator": lambda **flags: from_iterator(out, [[np.zeros(2)] * 3],
                                                       **{"workers": 1, **flags}),
        "recode": lambda **flags: recode(tmp_path / "src", out, **flags),
        "from_arrow": lambda **flags: from_arrow(table, out, **flags),
    }


CONVERTER_FLAGS = [("from_numpy", "overwrite"), ("from_numpy", "append"),
                   ("from_iterator", "overwrite"), ("from_iterator", "append"),
                   ("recode", "overwrite"), ("from_arrow", "overwrite")]


@pytest.mark.parametrize(("converter", "flag"), CONVERTER_FLAGS)
def test_converter_flags_take_numpy_bools(tmp_path: Path, converter: str, flag: str) -> None:
    convert = _converters(tmp_path)[converter]
    rows = 8 if converter == "recode" else 3
    assert convert(**{flag: np.False_}) == rows
    assert convert(**{flag: np.True_}) == rows  # over the first (overwrite) or onto it (append)
    folder = tmp_path / "out" / "a" if converter == "from_arrow" else tmp_path / "out"
    kind = RaggedDataset if converter == "from_iterator" else DenseDataset
    with kind(folder, readonly=True) as written:
        assert len(written) == (2 * rows if flag == "append" else rows)


@pytest.mark.parametrize("value", NOT_FLAGS)
@pytest.mark.parametrize(("converter", "flag"), CONVERTER_FLAGS)
def test_converter_flags_refuse_what_is_no_bool(
    tmp_path: Path, converter: str, flag: str, value: Any
) -> None:
    convert = _converters(tmp_path)[converter]
    with pytest.raises(TypeError) as refused:
        convert(**{flag: value})
    assert str(refused.value) == f"{flag} must be True or False, got {value!r}"
    assert not os.path.lexists(tmp_path / "out")


# --- str choices -----------------------------------------------------------------------------


CODECS = "'raw', 'zstd', 'zstd_dict'"
MODES = "'sequential', 'iid', 'cyclic'"
WORKER_TYPES = "'thread', 'process'"
START_METHODS = "'spawn', 'forkserver', 'fork' or None"


def _refusal(name: str, choices: str, value: object) -> tuple[type[Exception], str]:
    """The one rule for a str choice: TypeError for what is no str, ValueError for an unknown
    str, both listing the choices and naming the value."""
    error = ValueError if isinstance(value, str) else TypeError
    return error, f"{name} must be one of {choices}, got {value!r}"


@pytest.mark.parametrize("value", [None, 1, b"zstd", "gzip"])
@pytest.mark.parametrize("kind", [DenseDataset, RaggedDataset])
def test_a_codec_that_is_none_of_the_codecs_is_named(
    tmp_path: Path, kind: type[DenseDataset] | type[RaggedDataset], value: Any
) -> None:
    error, message = _refusal("codec", CODECS, value)
    with pytest.raises(error) as refused:
        kind(tmp_path / "new", dtype=np.float32, item_shape=(2,), codec=value)
    assert type(refused.value) is error and str(refused.value) == message
    assert not os.path.lexists(tmp_path / "new")
    _dense(tmp_path / "d").close() if kind is DenseDataset else _ragged(tmp_path / "d").close()
    with pytest.raises(error) as refused:
        kind(tmp_path / "d", codec=value)
    assert type(refused.value) is error and str(refused.value) == message


@pytest.mark.parametrize("value", [None, 1, b"zstd", "gzip"])
@pytest.mark.parametrize("converter", ["from_numpy", "from_iterator", "recode", "from_arrow"])
def test_a_converter_codec_that_is_none_of_the_codecs_is_named(
    tmp_path: Path, converter: str, value: Any
) -> None:
    error, message = _refusal("codec", CODECS, value)
    with pytest.raises(error) as refused:
        _converters(tmp_path)[converter](codec=value)
    assert type(refused.value) is error and str(refused.value) == message
    assert not os.path.lexists(tmp_path / "out")


def test_a_codec_given_as_a_numpy_str_is_taken(tmp_path: Path) -> None:
    with DenseDataset(tmp_path / "d", dtype=np.float32, item_shape=(2,),
                      codec=np.str_("raw")) as ds:
        assert ds.codec == "raw" and type(ds.codec) is str
    with RaggedDataset(tmp_path / "r", dtype=np.float32, codec=np.str_("zstd")) as rs:
        assert rs.codec == "zstd" and type(rs.codec) is str


@pytest.mark.parametrize("value", [None, 1, b"iid", "random"])
@pytest.mark.parametrize("user", ["DataLoader", "Sampler"])
def test_a_mode_that_is_none_of_the_modes_is_named(
    tmp_path: Path, user: str, value: Any
) -> None:
    error, message = _refusal("mode", MODES, value)
    ds = _dense(tmp_path / "d")
    with pytest.raises(error) as refused:
        if user == "DataLoader":
            DataLoader({"x": ds}, batch_size=2, mode=value)
        else:
            Sampler(8, 2, mode=value)
    assert type(refused.value) is error and str(refused.value) == message
    ds.close()


def test_a_loader_mode_given_as_a_numpy_str_is_taken(tmp_path: Path) -> None:
    ds = _dense(tmp_path / "d")
    with DataLoader({"x": ds}, batch_size=2, mode=np.str_("sequential")) as loader:
        assert loader.mode == "sequential" and type(loader.mode) is str
        assert next(loader)["x"].tolist() == [[0.0, 1.0], [2.0, 3.0]]
    ds.close()


@pytest.mark.parametrize("loader", ["DataLoader", "MixtureLoader"])
@pytest.mark.parametrize(("keyword", "choices", "value"), [
    *(("worker_type", WORKER_TYPES, value) for value in (None, 1, b"thread", "threads")),
    *(("start_method", START_METHODS, value) for value in (1, b"spawn", "vfork")),
])
def test_a_worker_setting_that_is_none_of_the_choices_is_named(
    tmp_path: Path, loader: str, keyword: str, choices: str, value: Any
) -> None:
    error, message = _refusal(keyword, choices, value)
    ds = _dense(tmp_path / "d")
    with pytest.raises(error) as refused:
        if loader == "DataLoader":
            DataLoader({"x": ds}, batch_size=2, **{keyword: value})
        else:
            MixtureLoader([{"x": ds}], [1.0], batch_size=2, **{keyword: value})
    assert type(refused.value) is error and str(refused.value) == message
    ds.close()


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("value", [1, b"spawn", "vfork"])
@pytest.mark.parametrize("converter", ["from_numpy", "from_iterator", "from_arrow"])
def test_a_converter_start_method_that_is_none_of_the_choices_is_named(
    tmp_path: Path, converter: str, value: Any, workers: int
) -> None:
    """Refused as the loaders refuse it, also where no worker process would start."""
    error, message = _refusal("start_method", START_METHODS, value)
    with pytest.raises(error) as refused:
        _converters(tmp_path)[converter](start_method=value, workers=workers)
    assert type(refused.value) is error and str(refused.value) == message
    assert not os.path.lexists(tmp_path / "out")


# --- closed datasets -------------------------------------------------------------------------


def test_a_closed_dense_dataset_names_itself_a_dataset(tmp_path: Path) -> None:
    ds = _dense(tmp_path / "d")
    ds.close()
    message = f"dataset {str(tmp_path / 'd')!r} is closed"
    out = np.empty((2, 2), dtype=np.float32)
    for call in (
        lambda: ds.read(0),
        lambda: ds[np.array([0, 1])],
        lambda: ds[0:2],
        lambda: len(ds),
        lambda: ds.gather_into(np.array([0, 1]), out),
        lambda: ds.read(np.array([0, 1]), out=out),
    ):
        with pytest.raises(ValueError) as refused:
            call()
        assert str(refused.value) == message


def test_a_closed_ragged_dataset_names_itself_a_dataset(tmp_path: Path) -> None:
    rs = _ragged(tmp_path / "r")
    rs.close()
    message = f"dataset {str(tmp_path / 'r')!r} is closed"
    for call in (
        lambda: rs.read(0),
        lambda: rs[np.array([0, 1])],
        lambda: len(rs),
        lambda: rs.lengths(np.array([0, 1])),
        lambda: rs.read(slice(0, 2)),
    ):
        with pytest.raises(ValueError) as refused:
            call()
        assert str(refused.value) == message


def test_a_closed_sharded_dataset_names_itself_a_dataset(tmp_path: Path) -> None:
    path = tmp_path / "s"
    ds = DenseDataset(path, dtype=np.int64, item_shape=(), shard_records=4)
    ds.append(np.arange(10, dtype=np.int64))
    assert ds.sharded
    ds.close()
    out = np.empty(2, dtype=np.int64)
    for call in (
        lambda: ds.read(0),
        lambda: ds[np.array([0, 5])],
        lambda: len(ds),
        lambda: ds.gather_into(np.array([0, 5]), out),
    ):
        with pytest.raises(ValueError) as refused:
            call()
        assert str(refused.value) == f"dataset {str(path)!r} is closed"


def test_a_closed_zrecord_still_names_itself(tmp_path: Path) -> None:
    _dense(tmp_path / "d").close()
    store = Zrecord(tmp_path / "d")
    store.close()
    with pytest.raises(ValueError) as refused:
        len(store)
    assert str(refused.value) == f"Zrecord {str(tmp_path / 'd')!r} is closed"
