"""The descriptor limit: stores past the soft RLIMIT_NOFILE raise it towards the hard limit, and
a hard limit too low for them raises DescriptorLimitError saying what to do.

Each case runs in a child process that lowers its own limits before it imports loaderx."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loaderx.dataset import DenseDataset

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="Windows has no RLIMIT_NOFILE")

# Sets the limits (argv[1] soft, argv[2] hard), then imports loaderx; `fill(free)` uses up
# every descriptor but `free`, so the next open meets EMFILE whatever the limit.
_PRELUDE = """
import json, os, resource, sys
soft, hard = int(sys.argv[1]), int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
import numpy as np
from loaderx.dataset import DenseDataset
from loaderx.zrecord import Zrecord
folder = sys.argv[3]

def fill(free):
    held = []
    while True:
        try:
            held.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            break
    for _ in range(free):
        os.close(held.pop())
    return held

def soft_now():
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
"""


def _hard_limit() -> int:
    import resource

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return 4096 if hard == resource.RLIM_INFINITY else min(hard, 4096)


def _run(
    body: str, soft: int, hard: int, folder: Path, extra_env: dict[str, str] | None = None
) -> dict[str, Any]:
    env = {**os.environ, **(extra_env or {}), "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", _PRELUDE + body, str(soft), str(hard), str(folder)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _records(count: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
    return np.random.default_rng(count).integers(0, 256, size=(count, 16), dtype=np.uint8)


def test_a_sharded_dataset_past_the_soft_limit_writes_and_reads_exactly(tmp_path: Path) -> None:
    # 80 shards of 10 records: about 540 descriptors while written, 320 while read, both past
    # a soft limit of 256 (the failure at 1024 with 150 shards, scaled down).
    hard = _hard_limit()
    assert hard >= 1024, "the test needs a hard limit of at least 1024"
    path = tmp_path / "d"
    body = """
with DenseDataset(folder, dtype=np.uint8, item_shape=(16,), shard_records=10) as ds:
    ds.append(np.zeros((0, 16), np.uint8))
    data = np.random.default_rng(800).integers(0, 256, size=(800, 16), dtype=np.uint8)
    ds.append(data[:395])      # rollovers during appends, a batch spanning several shards
    ds.append(data[395:])
raised_by_writer = soft_now()
with DenseDataset(folder, readonly=True) as ds:
    order = np.random.default_rng(1).permutation(800)
    exact = bool((ds[np.arange(800)] == data).all()) and bool((ds[order] == data[order]).all())
    print(json.dumps({"soft": raised_by_writer, "shards": len(ds.shard_stats()), "exact": exact}))
"""
    found = _run(body, 256, hard, path)
    assert found == {"soft": hard, "shards": 80, "exact": True}
    with DenseDataset(path, readonly=True) as ds:
        assert (ds[np.arange(len(ds))] == _records(800)).all()


@pytest.mark.parametrize("step", ["open", "append"])
def test_an_open_or_append_out_of_descriptors_raises_the_soft_limit_once(
    tmp_path: Path, step: str
) -> None:
    # The descriptors run out right before the step (not because of many stores), so the
    # step itself meets EMFILE: the soft limit rises to the hard one and it runs once more.
    hard = _hard_limit()
    body = f"""
data = [bytes([i]) * (i + 1) for i in range(50)]
if {step!r} == "open":
    with Zrecord(folder, create=True) as store:
        store.append(data)
    held = fill(2)  # a read-only store holds 4
    store = Zrecord(folder, readonly=True)
else:
    store = Zrecord(folder, create=True)
    held = fill(0)  # its first append needs writer.lock and chunk 0.zr
    store.append(data)
raised = soft_now()
for fd in held:
    os.close(fd)
back = store.gather(list(range(50)))
store.close()
print(json.dumps({{"soft": raised, "exact": back == data}}))
"""
    assert _run(body, 256, hard, tmp_path / "s") == {"soft": hard, "exact": True}


def test_out_of_descriptors_at_the_hard_limit_says_what_to_do(tmp_path: Path) -> None:
    body = """
with Zrecord(folder, create=True) as store:
    store.append([b"x"])
held = fill(2)
try:
    Zrecord(folder, readonly=True)
except OSError as exc:
    print(json.dumps({"type": type(exc).__name__, "errno": exc.errno, "message": str(exc),
                      "soft": soft_now()}))
"""
    found = _run(body, 64, 64, tmp_path / "s")
    message = found.pop("message")
    assert found == {"type": "DescriptorLimitError", "errno": 24, "soft": 64}
    for part in (
        f"cannot open Zrecord store {str(tmp_path / 's')!r}",
        "out of file descriptors: the process's limit (RLIMIT_NOFILE) is 64, its hard limit 64, "
        "so loaderx cannot raise it further",
        "Each open store (shard) holds 4 descriptors read-only and 5 writable",
        "'ulimit -n N'",
        "or open fewer shards at once",
    ):
        assert part in message, message


def test_a_sharded_write_past_the_hard_limit_fails_whole_and_leaves_what_was_committed(
    tmp_path: Path,
) -> None:
    # Ten records, one shard, per append: the append that finds no descriptors fails alone,
    # with DescriptorLimitError, and every earlier one stays readable.
    path = tmp_path / "d"
    body = """
data = np.random.default_rng(800).integers(0, 256, size=(800, 16), dtype=np.uint8)
ds = DenseDataset(folder, dtype=np.uint8, item_shape=(16,), shard_records=10)
failure = None
for first in range(0, 800, 10):
    try:
        ds.append(data[first:first + 10])
    except OSError as exc:
        failure = {"type": type(exc).__name__, "errno": exc.errno, "first": first,
                   "limit": "RLIMIT_NOFILE) is 128, its hard limit 128" in str(exc)}
        break
print(json.dumps(failure))
"""
    found = _run(body, 128, 128, path)
    first = found.pop("first")
    assert found == {"type": "DescriptorLimitError", "errno": 24, "limit": True}
    assert 0 < first < 800
    with DenseDataset(path, readonly=True) as ds:
        assert len(ds) == first
        assert (ds[np.arange(first)] == _records(800)[:first]).all()


@pytest.mark.parametrize("switch", ["default", "variable", "function"])
def test_the_raising_can_be_turned_off_by_variable_or_function(tmp_path: Path, switch: str) -> None:
    # 60 writable shards need about 420 descriptors, past a soft limit of 256: by default the
    # limit rises and every append lands; turned off, the limit stays and the shortage is a
    # DescriptorLimitError that says loaderx was told not to raise it.
    hard = _hard_limit()
    body = f"""
if {switch!r} == "function":
    from loaderx.zrecord import set_raise_descriptor_limit
    set_raise_descriptor_limit(False)
data = np.zeros((600, 16), np.uint8)
found = {{"type": None, "told": False}}
try:
    with DenseDataset(folder, dtype=np.uint8, item_shape=(16,), shard_records=10) as ds:
        for first in range(0, 600, 10):
            ds.append(data[first:first + 10])
except OSError as exc:
    found = {{"type": type(exc).__name__, "told": "told not to raise it" in str(exc)}}
found["soft"] = soft_now()
print(json.dumps(found))
"""
    extra_env = {"LOADERX_RAISE_NOFILE": "0" if switch == "variable" else "1"}
    found = _run(body, 256, hard, tmp_path / "d", extra_env)
    if switch == "default":
        assert found == {"type": None, "told": False, "soft": hard}
    else:
        assert found == {"type": "DescriptorLimitError", "told": True, "soft": 256}


@pytest.mark.parametrize(
    "read", ["dense", "dense_out", "ragged", "gather_into", "verify", "sharded", "loader"]
)
def test_a_first_read_out_of_descriptors_raises_the_soft_limit(tmp_path: Path, read: str) -> None:
    # A chunk is mapped on its first read, which takes a descriptor for a moment: when the
    # descriptors run out right before it, the read raises the soft limit and runs once more,
    # as an open does, instead of raising DescriptorLimitError below the hard limit.
    hard = _hard_limit()
    body = f"""
from loaderx.dataloader import DataLoader
data = np.arange(4 * 50, dtype=np.int64).reshape(50, 4)
sharded = {read!r} == "sharded"
with DenseDataset(folder, dtype=np.int64, item_shape=(4,),
                  **({{"shard_records": 10}} if sharded else {{}})) as ds:
    ds.append(data)
ds = DenseDataset(folder, readonly=True)
store = None if sharded else Zrecord(folder, readonly=True)
held = fill(0)
try:
    if {read!r} in ("dense", "sharded"):
        exact = bool((ds[np.arange(50)] == data).all())
    elif {read!r} == "dense_out":
        out = np.empty((50, 4), np.int64)
        ds.read(np.arange(50), out=out)
        exact = bool((out == data).all())
    elif {read!r} == "ragged":
        exact = store.gather([3, 0]) == [data[3].tobytes(), data[0].tobytes()]
    elif {read!r} == "gather_into":
        out = np.empty((50, 4), np.int64)
        store.gather_into(np.arange(50), out, 32)
        exact = bool((out == data).all())
    elif {read!r} == "verify":
        report = store.verify()
        exact = report.ok and report.records == 50
    else:  # its first step, made in a worker thread, maps the chunk
        with DataLoader({{"x": ds, "y": ds}}, batch_size=50, mode="sequential") as loader:
            batch = next(loader)
        exact = bool((batch["x"] == data).all()) and bool((batch["y"] == data).all())
    raised = soft_now()
finally:
    for fd in held:
        os.close(fd)
print(json.dumps({{"soft": raised, "exact": exact}}))
"""
    assert _run(body, 256, hard, tmp_path / "s") == {"soft": hard, "exact": True}


def test_verify_out_of_descriptors_at_the_hard_limit_raises_rather_than_blame_records(
    tmp_path: Path,
) -> None:
    # It reported every record of a chunk it could not map as bad ("chunk"): a healthy store
    # then failed verification for a reason that is the process's, not the store's.
    body = """
with Zrecord(folder, create=True) as store:
    store.append([bytes([i]) * 100 for i in range(20)])
store = Zrecord(folder, readonly=True)
held = fill(0)
try:
    found = {"report": repr(store.verify())}
except OSError as exc:
    found = {"type": type(exc).__name__, "errno": exc.errno, "chunk": "chunk 0.zr" in str(exc)}
for fd in held:
    os.close(fd)
found["after"] = store.verify().ok
print(json.dumps(found))
"""
    found = _run(body, 64, 64, tmp_path / "s")
    assert found == {"type": "DescriptorLimitError", "errno": 24, "chunk": True, "after": True}
