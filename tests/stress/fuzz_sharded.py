"""Corrupts the files of sharded datasets at random and checks every corruption is detected or harmless.

    python3 tests/stress/fuzz_sharded.py --trials 1000 [--seed 0] [--timeout 30]

The sibling of stress/fuzz_store.py for what a sharded dataset adds to its stores: the manifest
(shards.msgpack), the delete journal (shards.delete), the schemas, the shard folders and the
hidden staging folders. Builds three small sharded datasets (dense zstd, ragged raw, and a dense
one left by a delete killed half-way: journal written, one shard deleted, the others not), then
runs trials. A trial copies one dataset and applies one mutation:

    bytes      a bit flip, a random byte, a zeroed range, a truncation or an extension of the
               manifest, the journal, a schema, or a shard's store file (meta.zr, chunk, sums)
    manifest   valid msgpack with a wrong value: a count off by one, negative, huge or of the
               wrong type; an entry dropped, duplicated, swapped or renamed ('..', '/etc',
               an absolute path, a hidden name, a name of another width); a bad generation,
               version, field or append-in-flight marker
    journal    valid msgpack naming a shard twice, another shard, out-of-range or repeated
               indices, other counts, other indices under the old check (damage); or a
               journal where no delete is in progress
    files      a folder, an empty file, or a symlink to outside the dataset in place of a
               file; a shard folder moved outside and linked back; stray shard and staging
               folders (some of them links to outside); folders under the names of staging
               markers, claim files and temporary files

Then, in a forked child under a timeout, it reads every record read-only (ds[...], gather_into,
verify(), the CLI's info/verify/head, a DataLoader), then opens it writable (finishing a killed
delete), reads again, appends past the tail's room (a rollover), deletes, compacts and reopens
read-only. Every step must read back exactly what the intact dataset holds after the same steps,
or a valid older state (a prefix: a manifest whose last entry was dropped reads as a crash
before that shard's commit), or raise a loaderx error (ManifestError, SchemaError,
CorruptStoreError, NotAStoreError, ReadOnlyStoreError for a half-done delete read-only) or an
OSError naming a path inside the dataset. Outcomes, as in fuzz_store: intact, older_state,
detected, silent_wrong, crash, hang, other_error, plus

    escaped       a file outside the dataset folder changed                (must be 0)

Exit status 1 when any "must be 0" outcome occurred. POSIX only (fork, symlinks).
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import io
import os
import random
import shutil
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from typing import Any, Final

import msgpack
import numpy as np

# The repository root, for loaderx from the working tree, and tests/, for the stress package
# (this file is tests/stress/fuzz_sharded.py; run as a script, only its own folder is on the path).
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(TESTS))
sys.path.insert(0, TESTS)

from loaderx import cli  # noqa: E402
from loaderx._loading.dataloader import DataLoader  # noqa: E402
from loaderx._data.dense import DenseDataset  # noqa: E402
from loaderx._data.ragged import RaggedDataset  # noqa: E402
from loaderx.errors import (  # noqa: E402
    CorruptStoreError,
    ManifestError,
    NotAStoreError,
    ReadOnlyStoreError,
    SchemaError,
)
from loaderx._store.shard_delete import delete_each  # noqa: E402
from loaderx._store.layout import shard_folder  # noqa: E402
from loaderx._store.zrecord import Zrecord  # noqa: E402
from stress.fuzz_store import (  # noqa: E402
    _regions,
    _run_forked,
    run_from_command_line,
)

OUTCOMES: Final = (
    "intact",
    "older_state",
    "detected",
    "silent_wrong",
    "crash",
    "hang",
    "other_error",
    "escaped",
)
FAILURES: Final = ("silent_wrong", "crash", "hang", "other_error", "escaped")
DETECTED: Final = (CorruptStoreError, NotAStoreError, SchemaError, ManifestError, ReadOnlyStoreError)
MUTATION_KINDS: Final = ("bytes", "manifest", "journal", "files")
_MANIFEST: Final = "shards.msgpack"
_JOURNAL: Final = "shards.delete"
_SHARD_RECORDS: Final = 8
# Bytes of each file a trial copies; the rest (the sparse tail of meta.zr and chunks) is a hole.
_COPY_BYTES_MAX: Final = 8 << 20


class Base:
    """One intact sharded dataset and what each step must read back from it."""

    def __init__(self, name: str, path: str, ragged: bool) -> None:
        self.name = name
        self.path = path
        self.ragged = ragged
        self.records: list[np.ndarray] = []  # read-only, as it is
        self.finished: list[np.ndarray] = []  # writable (a killed delete finished)
        self.after: list[np.ndarray] = []  # after the writes of _write_steps
        self.appended: list[np.ndarray] = []  # what _write_steps appends
        # Its intact state refuses a read-only open (a half-done delete): then so may a trial.
        self.refuses_readonly = False


def _open(base: Base, path: str, readonly: bool) -> Any:
    kind = RaggedDataset if base.ragged else DenseDataset
    return kind(path, readonly=readonly, shard_records=_SHARD_RECORDS, verify=True)


def _read_all(ds: Any) -> list[np.ndarray]:
    return [np.array(r) for r in ds.read(np.arange(len(ds)))]


def _build_bases(root: str, seed: int) -> list[Base]:
    rng = np.random.default_rng(seed)
    bases: list[Base] = []
    path = os.path.join(root, "dense")
    dense = DenseDataset(path, dtype=np.int32, item_shape=(3,), shard_records=_SHARD_RECORDS)
    dense.append(rng.integers(-9, 9, size=(30, 3), dtype=np.int32))
    dense.delete([2, 9, 20])
    dense.compact()
    dense.close()
    bases.append(Base("dense", path, ragged=False))
    path = os.path.join(root, "ragged")
    ragged = RaggedDataset(path, dtype=np.float32, item_shape=(2,), codec="raw",
                           shard_records=_SHARD_RECORDS)
    ragged.append([rng.normal(size=(int(n), 2)).astype(np.float32) for n in rng.integers(0, 6, 26)])
    ragged.close()
    bases.append(Base("ragged", path, ragged=True))
    path = os.path.join(root, "killed-delete")
    dense = DenseDataset(path, dtype=np.int16, item_shape=(2,), codec="raw",
                         shard_records=_SHARD_RECORDS)
    dense.append(rng.integers(0, 99, size=(28, 2), dtype=np.int16))
    dense.close()
    _leave_half_deleted(path, {0: [1, 5], 2: [0, 7], 3: [2]})
    bases.append(Base("killed-delete", path, ragged=False))
    for base in bases:
        _expect(base, rng)
    return bases


def _leave_half_deleted(path: str, plan: dict[int, list[int]]) -> None:
    """What a delete killed after its first shard leaves: journal, manifest mid-delete, the
    first shard's part done, the others not."""
    from loaderx._store import delete_journal
    from loaderx._store.manifest import read_manifest, write_manifest

    manifest = read_manifest(path)
    assert manifest is not None
    parts = []
    for position, local in plan.items():
        entry = manifest.shards[position]
        parts.append(delete_journal.ShardDelete(entry.name, entry.records, np.array(local, np.int64)))
        entry.records_before = entry.records
        entry.records -= len(local)
    manifest.generation += 1
    delete_journal.write_journal(path, parts)
    write_manifest(path, manifest)
    first = manifest.shards[next(iter(plan))].name
    with Zrecord(shard_folder(path, first), create=False, _dataset_owned=True) as store:
        delete_each([store], [np.array(plan[next(iter(plan))], np.int64)], path)
    try:
        DenseDataset(path, readonly=True, shard_records=_SHARD_RECORDS).close()
    except ReadOnlyStoreError:
        return
    raise SystemExit(f"{path}: a half-done delete opened read-only")


def _expect(base: Base, rng: np.random.Generator) -> None:
    """Runs every step on a pristine copy and records what each must read back."""
    try:
        ds = _open(base, base.path, readonly=True)
        base.records = _read_all(ds)
        ds.close()
    except ReadOnlyStoreError:
        base.refuses_readonly = True
    if base.ragged:
        base.appended = [rng.normal(size=(int(n), 2)).astype(np.float32) for n in rng.integers(0, 5, 11)]
    else:
        width = 3 if base.name == "dense" else 2
        dtype = np.int32 if base.name == "dense" else np.int16
        base.appended = list(rng.integers(0, 99, size=(11, width)).astype(dtype))
    copy = base.path + "-expected"
    _copy_tree(base.path, copy)
    ds = _open(base, copy, readonly=False)
    base.finished = _read_all(ds)
    ds.close()
    base.after = _write_steps(base, copy)
    shutil.rmtree(copy)


def _write_steps(base: Base, path: str) -> list[np.ndarray]:
    """A rollover append, a delete over several shards and a compaction; what reads back."""
    ds = _open(base, path, readonly=False)
    try:
        ds.append(base.appended if base.ragged else np.stack(base.appended))
        ds.delete([0, len(ds) // 2, len(ds) - 1])
        ds.compact()
    finally:
        ds.close()
    ds = _open(base, path, readonly=True)
    try:
        return _read_all(ds)
    finally:
        ds.close()


# ---- copying and mutating ------------------------------------------------------------------


def _copy_tree(source: str, destination: str) -> None:
    """Copies a dataset folder keeping sparse files sparse and symlinks as links."""
    os.mkdir(destination)
    for name in os.listdir(source):
        src, dst = os.path.join(source, name), os.path.join(destination, name)
        if os.path.islink(src):
            os.symlink(os.readlink(src), dst)
        elif os.path.isdir(src):
            _copy_tree(src, dst)
        else:
            size = os.path.getsize(src)
            with open(src, "rb") as f:
                data = f.read(min(size, _COPY_BYTES_MAX))
            with open(dst, "wb") as f:
                f.write(data)
                f.truncate(size)


def _shard_folders(folder: str) -> list[str]:
    return sorted(name for name in os.listdir(folder) if name.startswith("shard-")) + ["."]


def _mutate_bytes(folder: str, rng: random.Random) -> str:
    targets = [(kind, name, 0, os.path.getsize(os.path.join(folder, name)))
               for kind, name in (("manifest", _MANIFEST), ("journal", _JOURNAL),
                                  ("schema", "schema.msgpack"))
               if os.path.exists(os.path.join(folder, name))]
    shard = rng.choice(_shard_folders(folder))
    targets += [(kind, os.path.join(shard, name), start, end)
                for kind, name, start, end in _regions(os.path.join(folder, shard))]
    target, name, start, end = rng.choice(targets)
    path = os.path.join(folder, name)
    kind = rng.choice(["flip", "byte", "zero", "truncate", "extend"])
    where = rng.randrange(start, max(end, start + 1))
    with open(path, "r+b") as f:
        if kind == "truncate":
            f.truncate(where)
        elif kind == "extend":
            f.seek(0, os.SEEK_END)
            f.write(rng.randbytes(rng.randrange(1, 64)))
        else:
            f.seek(where)
            old = f.read(1)[0] if kind != "zero" else 0
            f.seek(where)
            if kind == "flip":
                f.write(bytes([old ^ (1 << rng.randrange(8))]))
            elif kind == "byte":
                f.write(bytes([(old + rng.randrange(1, 256)) % 256]))
            else:
                f.write(bytes(min(rng.choice([1, 2, 4, 8, 16]), max(end - where, 1))))
    return f"{kind} {target} {name}@{where}"


_BAD_NAMES: Final = ("..", "/etc", "/tmp", "shard-000001/..", "../shard-000001", ".hidden",
                     "shard-00001", "shard-0000001", "shard-000001 ", "", "shard-999999", ".")
_BAD_INTS: Final[tuple[Any, ...]] = (-1, -(2**63), 2**63, 2**64 - 1, 1 << 24, (1 << 24) + 1, True, "3", 3.0, None,
                    [], {})


def _bad_value(rng: random.Random, good: Any) -> Any:
    if isinstance(good, int) and not isinstance(good, bool) and rng.random() < 0.4:
        return good + rng.choice([-2, -1, 1, 2])
    return rng.choice(_BAD_INTS)


def _mutate_manifest(folder: str, rng: random.Random) -> str:
    path = os.path.join(folder, _MANIFEST)
    with open(path, "rb") as f:
        raw = msgpack.unpackb(f.read())
    shards = raw["shards"]
    position = rng.randrange(len(shards))
    kind = rng.choice(["count", "field", "drop", "duplicate", "swap", "rename", "generation",
                       "version", "unknown", "in_flight", "top", "type"])
    if kind == "count":
        shards[position]["records"] = _bad_value(rng, shards[position]["records"])
    elif kind == "field":
        field = rng.choice(["records_before", "records_after", "pending"])
        shards[position][field] = _bad_value(rng, shards[position]["records"])
    elif kind == "drop":
        del shards[position]
    elif kind == "duplicate":
        shards.insert(rng.randrange(len(shards) + 1), dict(shards[position]))
    elif kind == "swap":
        other = rng.randrange(len(shards))
        if rng.random() < 0.5:
            shards[position], shards[other] = shards[other], shards[position]
        else:
            a, b = shards[position], shards[other]
            a["name"], b["name"] = b["name"], a["name"]
    elif kind == "rename":
        shards[position]["name"] = rng.choice(_BAD_NAMES)
    elif kind == "generation":
        raw["generation"] = _bad_value(rng, raw["generation"])
    elif kind == "version":
        raw["version"] = rng.choice([0, 2, 3, -1, "1", None])
    elif kind == "unknown":
        (shards[position] if rng.random() < 0.5 else raw)["x"] = 1
    elif kind == "in_flight":
        shards[position]["records_after"] = shards[position]["records"] + rng.randrange(1, 4)
        for later in shards[position + 1:]:
            later["pending"] = True
        raw["version"] = 2
    elif kind == "top":
        raw = rng.choice([[], {}, None, 0, "loaderx-shards", {"format": "loaderx-shards"}])
    else:
        raw["shards"] = rng.choice([{}, "shard-000001", None, [[]], [None]])
    with open(path, "wb") as f:
        f.write(msgpack.packb(raw, use_bin_type=True))
    return f"{kind} manifest {_MANIFEST}@{position}"


def _mutate_journal(folder: str, rng: random.Random) -> str:
    from loaderx._store.delete_journal import read_journal

    path = os.path.join(folder, _JOURNAL)
    parts = read_journal(folder)
    if parts is None:  # a journal where no delete is in progress: stale, must be ignored
        with open(os.path.join(folder, _MANIFEST), "rb") as f:
            names = [entry["name"] for entry in msgpack.unpackb(f.read())["shards"]]
        raw = [{"name": rng.choice(names), "records_before": 5,
                "indices": np.arange(rng.randrange(0, 4), dtype="<i8").tobytes()}]
        kind = "stale"
    else:
        raw = [{"name": p.name, "records_before": p.records_before,
                "indices": p.indices.astype("<i8").tobytes()} for p in parts]
        position = rng.randrange(len(raw))
        kind = rng.choice(["twice", "rename", "before", "indices", "repeat", "drop", "add"])
        part = raw[position]
        if kind == "twice":
            raw.append(dict(part))
        elif kind == "rename":
            part["name"] = rng.choice(_BAD_NAMES[:6] + ("shard-000001", "shard-000002", "."))
        elif kind == "before":
            part["records_before"] = _bad_value(rng, part["records_before"])
        elif kind == "indices":
            count = len(part["indices"]) // 8 + rng.choice([-1, 0, 1])
            part["indices"] = np.array(rng.sample(range(-2, 12), max(count, 0)), "<i8").tobytes()
        elif kind == "repeat":
            part["indices"] = np.array([1, 1], "<i8").tobytes()
        elif kind == "drop":
            del raw[position]
        else:
            raw.append({"name": "shard-000001", "records_before": 8,
                        "indices": np.array([0], "<i8").tobytes()})
    shards = msgpack.packb(raw, use_bin_type=True)
    # Other indices of the same count are what a damaged journal holds (a flipped bit): it keeps
    # the check it was written with, which refuses it. The other kinds are journals written
    # wrong, with a check to match, which the journal's own checks must refuse.
    check = _journal_check(path) if kind == "indices" else zlib.crc32(shards)
    with open(path, "wb") as f:
        f.write(msgpack.packb({"format": "loaderx-delete", "version": 2, "shards": shards,
                               "check": check}, use_bin_type=True))
    return f"{kind} journal {_JOURNAL}"


def _journal_check(path: str) -> int:
    with open(path, "rb") as f:
        check: int = msgpack.unpackb(f.read())["check"]
    return check


def _mutate_files(folder: str, outside: str, rng: random.Random) -> str:
    shard = rng.choice([s for s in _shard_folders(folder) if s != "."])
    kind = rng.choice(["folder", "empty", "link_out", "remove", "shard_out", "stray_shard",
                       "stray_link", "staging_link", "stray_folder"])
    name = rng.choice([_MANIFEST, _JOURNAL, "schema.msgpack", "shards.lock",
                       "shards.readers.lock", os.path.join(shard, "schema.msgpack"),
                       os.path.join(shard, "meta.zr"), os.path.join(shard, "0.zr")])
    if kind == "remove" and name in (_MANIFEST, _JOURNAL):
        # Not trials: without its manifest the folder is the single-store dataset it was before
        # its first rollover, and the shard folders are what a crash between that rollover's
        # move and its manifest write leaves (loaderx.shards); a half-done delete whose journal
        # is gone is settled as its shards hold it (loaderx._store.shard_delete, by design for now).
        name = os.path.join(shard, "schema.msgpack")
    path = os.path.join(folder, name)
    if kind in ("folder", "empty", "link_out", "remove"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        if kind == "folder":
            os.mkdir(path)
        elif kind == "empty":
            open(path, "wb").close()
        elif kind == "link_out":
            # A manifest or journal link to nothing is that file removed (see above).
            targets = ["file", "store"] + ([] if name in (_MANIFEST, _JOURNAL) else ["missing"])
            os.symlink(os.path.join(outside, rng.choice(targets)), path)
        return f"{kind} files {name}"
    if kind == "shard_out":
        moved = os.path.join(outside, f"moved-{os.path.basename(folder)}")
        shutil.move(os.path.join(folder, shard), moved)
        os.symlink(moved, os.path.join(folder, shard))
        return f"{kind} files {shard}"
    if kind == "stray_folder":  # folders under names the commit's cleaning removes files of
        stray = rng.choice([".staging-1-dead.live", ".claim-0123456789ab",
                            "shards.msgpack.tmp-1-abcdef01", "shards.delete.tmp-1-abcdef01"])
        os.mkdir(os.path.join(folder, stray))
        return f"{kind} files {stray}"
    if kind == "stray_shard":
        _copy_tree(os.path.join(folder, shard), os.path.join(folder, "shard-000009"))
        return f"{kind} files shard-000009"
    stray = os.path.join(folder, "shard-000009" if kind == "stray_link" else ".staging-1-dead")
    os.symlink(os.path.join(outside, "store"), stray)
    if kind == "staging_link":
        open(stray + ".live", "wb").close()
    return f"{kind} files {os.path.basename(stray)}"


def _mutate(folder: str, outside: str, rng: random.Random) -> str:
    kind = rng.choice(MUTATION_KINDS)
    if kind == "bytes":
        return _mutate_bytes(folder, rng)
    if kind == "manifest":
        return _mutate_manifest(folder, rng)
    if kind == "journal":
        return _mutate_journal(folder, rng)
    return _mutate_files(folder, outside, rng)


# ---- one trial in a forked child -------------------------------------------------------------


def _compare(got: list[np.ndarray], want: list[np.ndarray], step: str) -> tuple[str, str]:
    if len(got) > len(want):
        return "silent_wrong", f"{step}: {len(got)} records, expected {len(want)}"
    for index, (have, expected) in enumerate(zip(got, want)):
        if have.shape != expected.shape or have.tobytes() != expected.tobytes():
            return "silent_wrong", f"{step}: record {index} differs"
    if len(got) < len(want):
        return "older_state", f"{step}: {len(got)} of {len(want)} records"
    return "intact", ""


def _read_only_steps(base: Base, folder: str) -> tuple[str, str]:
    ds = _open(base, folder, readonly=True)
    try:
        got = _read_all(ds)
        if not base.ragged and len(ds):
            out = np.empty((len(ds), *ds.item_shape), dtype=ds.dtype)
            ds.gather_into(np.arange(len(ds), dtype=np.int64), out)
            if not all(a.tobytes() == b.tobytes() for a, b in zip(out, got)):
                return "silent_wrong", "gather_into differs from ds[...]"
        if not ds.verify().ok:
            return "silent_wrong", "reads passed but verify() found bad records"
        if not base.ragged and len(ds):
            with DataLoader({"x": ds}, batch_size=4, seed=3) as loader:
                for _ in range(3):
                    next(loader)
    finally:
        ds.close()
    # A killed delete read-only: the base refuses it as half done; a damaged manifest may
    # show a consistent part of it instead (its shards all deleted, as finishing leaves them).
    return _compare(got, base.records if base.records else base.finished, "read-only")


def _cli_steps(folder: str) -> tuple[str, str]:
    for command in (["info", folder], ["verify", folder], ["head", "-n", "5", folder]):
        with contextlib.redirect_stderr(io.StringIO()):
            status = cli.main(command, out=io.StringIO())
        if not isinstance(status, int):
            return "other_error", f"cli {command[0]} returned {status!r}"
    return "intact", ""


def _writable_steps(base: Base, folder: str) -> tuple[str, str]:
    ds = _open(base, folder, readonly=False)
    try:
        outcome = _compare(_read_all(ds), base.finished, "writable")
    finally:
        ds.close()
    if outcome[0] != "intact":
        return outcome
    return _compare(_write_steps(base, folder), base.after, "after writes")


def _steps(base: Base, folder: str) -> tuple[str, str]:
    """Every step in turn; the first that is not intact decides the trial."""
    outcome = ("intact", "")
    for step in (_read_only_steps, lambda b, f: _cli_steps(f), _writable_steps):
        try:
            found = step(base, folder)
        except ReadOnlyStoreError as exc:
            if not (base.refuses_readonly and step is _read_only_steps):
                found = ("detected", f"{type(exc).__name__}: {exc}"[:300])
            else:
                continue  # as the intact dataset does: the writable steps finish the delete
        except DETECTED as exc:
            found = ("detected", f"{type(exc).__name__}: {exc}"[:300])
        except OSError as exc:
            named = folder in str(exc) or (exc.filename is not None and folder in str(exc.filename))
            kind = "detected" if named else "other_error"
            found = (kind, f"{type(exc).__name__}: {exc}"[:300])
        except Exception as exc:  # noqa: BLE001 - every other exception type is an outcome
            found = ("other_error", f"{type(exc).__name__}: {exc}"[:300])
        if found[0] in FAILURES:
            return found
        if outcome[0] == "intact":
            outcome = found
        if found[0] != "intact":
            break  # an older state or a refusal: later steps start from a dataset that differs
    return outcome


def _snapshot(folder: str) -> dict[str, str]:
    """Every file under folder (links not followed) with a hash of its content."""
    found: dict[str, str] = {}
    for here, folders, files in os.walk(folder):
        for name in files + [f for f in folders if os.path.islink(os.path.join(here, f))]:
            path = os.path.join(here, name)
            if os.path.islink(path):
                found[path] = "link:" + os.readlink(path)
                continue
            with open(path, "rb") as f:
                found[path] = hashlib.sha256(f.read()).hexdigest()
    return found


def _make_outside(outside: str, bases: list[Base]) -> None:
    os.mkdir(outside)
    with open(os.path.join(outside, "file"), "wb") as f:
        f.write(b"not part of any dataset\n")
    _copy_tree(os.path.join(bases[0].path, "shard-000001"), os.path.join(outside, "store"))


def run(trials: int, seed: int, timeout: float, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Runs the experiment; returns the counts by outcome, by mutation and the failures."""
    rng = random.Random(seed)
    root = tempfile.mkdtemp(prefix="loaderx-fuzz-sharded-")
    try:
        bases_dir = os.path.join(root, "bases")
        os.mkdir(bases_dir)
        bases = _build_bases(bases_dir, seed)
        counts: collections.Counter[str] = collections.Counter()
        by_kind: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        failures: list[str] = []
        started = time.monotonic()
        for trial in range(trials):
            base = bases[trial % len(bases)]
            outside = os.path.join(root, f"outside-{trial}")
            _make_outside(outside, bases)
            folder = os.path.join(root, f"trial-{trial}")
            _copy_tree(base.path, folder)
            mutation = _mutate(folder, outside, rng)
            before = _snapshot(outside)
            outcome, detail = _run_forked(lambda: _steps(base, folder), timeout)
            if outcome not in FAILURES and _snapshot(outside) != before:
                outcome, detail = "escaped", f"{outside} changed"
            shutil.rmtree(folder)
            shutil.rmtree(outside)
            counts[outcome] += 1
            words = mutation.split()
            by_kind[f"{words[1]} {words[0]}"][outcome] += 1
            if outcome in FAILURES:
                failures.append(f"trial {trial} ({base.name}): {mutation}: {outcome} {detail}")
                log(failures[-1])
        elapsed = time.monotonic() - started
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {
        "trials": trials,
        "seed": seed,
        "seconds": round(elapsed, 1),
        "outcomes": {name: counts[name] for name in OUTCOMES},
        "by_mutation": {kind: dict(c) for kind, c in sorted(by_kind.items())},
        "failures": failures,
    }


def main(argv: list[str] | None = None) -> int:
    return run_from_command_line(run, "by_mutation", __doc__.split("\n\n")[0], 1000, 30.0, argv)


if __name__ == "__main__":
    sys.exit(main())
