"""What the survivors of a kill must show, and the checks: the models of what a killed worker
acknowledged (StoreModel for a store, DatasetModel for a sharded dataset) and what the operation
it was in may have left (Pending, applied_append, applied_delete), the reading of a store or a
dataset back with every record checked exact (ids_in, read_dataset, check_conversion), and the
next commit after a kill with what it must remove (leftovers, recover, check_sharded).
tests/stress/kill_loop.py runs these after every kill; a failed check raises KillLoopFailure.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field

import numpy as np

from loaderx._data.destination import remove_dead_parts
from loaderx._os import folder_swap as commit
from loaderx._data.dense import DenseDataset
from loaderx._store.delete_journal import JOURNAL_FILE
from loaderx._store.layout import STAGING_PREFIX, shard_number
from loaderx._store.manifest import read_manifest
from loaderx._store.zrecord import Zrecord
from stress.kill_operations import (
    CODEC,
    HEADER,
    ROW_WIDTH,
    SHARD_RECORDS,
    generation_of,
    parallel_append,
    record_of,
    rows_of,
    shard_lengths,
)


class KillLoopFailure(AssertionError):
    """A round whose store did not survive the kill as promised."""


# --- a store: what a kill may leave --------------------------------------------------------------


def ids_in(path: str) -> list[int]:
    """Opens the store and returns its record ids in index order, checking every record exactly."""
    with Zrecord(path, create=False) as store:
        data, offsets = store.gather_ragged(slice(None))
    view = data.tobytes()
    bounds = offsets.tolist()
    found: list[int] = []
    for index in range(len(bounds) - 1):
        record = view[bounds[index] : bounds[index + 1]]
        if len(record) < HEADER.size:
            raise KillLoopFailure(f"record {index} is {len(record)} bytes, shorter than a header")
        record_id = HEADER.unpack_from(record)[0]
        if record != record_of(record_id):
            raise KillLoopFailure(f"record {index} (id {record_id}) is not the bytes written")
        found.append(record_id)
    if len(set(found)) != len(found):
        twice = sorted({i for i in found if found.count(i) > 1})[:10]
        raise KillLoopFailure(f"ids stored twice: {twice}")
    return found


@dataclass
class StoreModel:
    """The acknowledged ids of a store, and the operation a kill interrupted (if any)."""

    live: set[int] = field(default_factory=set)
    next_id: int = 0

    def replay(self, lines: list[list[str]]) -> set[int] | None:
        """Applies acknowledged operations; returns the ids if the interrupted one had finished."""
        pending: set[int] | None = None
        for words in lines:
            tag = words[0]
            if tag == "A":
                first, count = int(words[1]), int(words[2])
                pending = self.live | set(range(first, first + count))
                self.next_id = max(self.next_id, first + count)
            elif tag == "D":
                pending = self.live - {int(w) for w in words[1:]}
            elif tag == "C":
                pending = set(self.live)
            elif tag in ("a", "d", "c"):
                assert pending is not None, f"acknowledgement {tag!r} without an operation"
                self.live = pending
                pending = None
        return pending

    def check(self, path: str, lines: list[list[str]]) -> None:
        interrupted = self.replay(lines)
        if not self.live and not os.path.exists(os.path.join(path, "meta.zr")):
            found: set[int] = set()  # killed before it created the store
        else:
            found = set(ids_in(path))
        if found == self.live:
            return
        if interrupted is not None and found == interrupted:
            self.live = found
            return
        lost = sorted(self.live - found)[:10]
        extra = sorted(found - self.live - (interrupted or set()))[:10]
        raise KillLoopFailure(
            f"after the kill the store holds {len(found)} records, not the {len(self.live)} "
            f"acknowledged (or the interrupted operation applied whole); lost {lost}, "
            f"unexpected {extra}"
        )


def check_conversion(path: str, acknowledged: int, lines: list[list[str]]) -> int:
    """The destination holds generation `acknowledged` or the interrupted one, complete."""
    started = [int(w[1]) for w in lines if w[0] == "V"]
    finished = len([w for w in lines if w[0] == "v"])
    if finished:
        acknowledged = started[finished - 1]
    allowed = {acknowledged}
    if len(started) > finished:
        allowed.add(started[-1])
    try:
        with DenseDataset(path) as ds:
            values = ds[:]
    except FileNotFoundError as exc:
        raise KillLoopFailure(f"the destination is gone after a kill: {exc}") from exc
    for generation in allowed:
        expected = generation_of(generation)
        if values.shape == expected.shape and (values == expected).all():
            commit.recover(path)
            # What the next conversion of either kind does first: a killed parallel
            # conversion's parts folder goes.
            remove_dead_parts(os.path.abspath(path))
            parent = os.path.dirname(os.path.abspath(path))
            hidden = [n for n in os.listdir(parent) if ".loaderx-" in n]
            if hidden:
                raise KillLoopFailure(f"recovery left hidden folders: {hidden}")
            return generation
    raise KillLoopFailure(
        f"the destination holds neither generation {sorted(allowed)} complete "
        f"(shape {values.shape})"
    )


# --- sharded datasets: what a kill may leave --------------------------------------------------


@dataclass
class Pending:
    """An operation a worker announced: the ids it adds (in order) or removes (shard by shard)."""

    added: list[int] = field(default_factory=list)
    # How many of the added ids, a prefix, a kill may leave: 0 or all.
    keeps: set[int] = field(default_factory=set)
    removed: list[set[int]] = field(default_factory=list)
    spans: bool = False  # it writes or deletes in more than one shard
    tag: str = ""  # the line's: "A", "P" or "D"


def announced(words: list[str]) -> Pending:
    """The operation of an "A first count room", "P first count" or "D ids,... ids,..." line."""
    tag = words[0]
    if tag == "D":
        removed = [{int(i) for i in group.split(",")} for group in words[1:]]
        return Pending(removed=removed, spans=len(removed) > 1, tag=tag)
    first, count = int(words[1]), int(words[2])
    added = list(range(first, first + count))
    if tag == "P":  # every worker of the two writes its own shards: always several
        return Pending(added, {0, count}, spans=True, tag=tag)
    room = int(words[3])
    return Pending(added, {0, count}, spans=count > room, tag=tag)


@dataclass
class DatasetModel:
    """The acknowledged ids of a sharded dataset. While only appends change it (`ordered`), its
    ids are also in index order, since every append takes ids above all earlier ones."""

    ordered: bool
    tested: str  # the tag of the operation under test (the delete worker also appends)
    live: set[int] = field(default_factory=set)
    next_id: int = 0
    spanning: int = 0  # acknowledged operations under test that wrote or deleted in several shards

    def replay(self, lines: list[list[str]]) -> Pending | None:
        """Applies acknowledged operations; returns the one the kill interrupted, if any."""
        pending: Pending | None = None
        for words in lines:
            if words[0] in ("A", "P", "D"):
                pending = announced(words)
                if pending.added:
                    self.next_id = max(self.next_id, pending.added[-1] + 1)
            elif words[0] in ("a", "p", "d"):
                assert pending is not None, f"acknowledgement {words[0]!r} without an operation"
                self.live = (self.live | set(pending.added)).difference(*pending.removed)
                self.spanning += pending.spans and pending.tag == self.tested
                pending = None
        return pending

    def check(self, ids: list[int], lines: list[list[str]]) -> str:
        """Checks the ids found after a kill; returns whether the interrupted operation was
        found applied "whole", in "part" (as allowed), or not at all ("none")."""
        interrupted = self.replay(lines)
        if self.ordered and any(a > b for a, b in zip(ids, ids[1:])):
            raise KillLoopFailure("the rows are no longer in the order they were appended")
        found = set(ids)
        extra, lost = found - self.live, self.live - found
        if not extra and not lost:
            return "none"
        if interrupted is None:
            raise KillLoopFailure(
                f"no operation was interrupted, yet {len(lost)} acknowledged ids are lost "
                f"({sorted(lost)[:10]}) and {len(extra)} others appeared ({sorted(extra)[:10]})"
            )
        if interrupted.added:
            outcome = applied_append(interrupted, extra, lost)
        else:
            outcome = applied_delete(interrupted, extra, lost)
        self.live = found
        return outcome


def applied_append(append: Pending, extra: set[int], lost: set[int]) -> str:
    if lost:
        raise KillLoopFailure(f"an interrupted append lost acknowledged ids {sorted(lost)[:10]}")
    unknown = extra - set(append.added)
    if unknown:
        raise KillLoopFailure(f"ids that no operation added appeared: {sorted(unknown)[:10]}")
    kept = len(extra)
    if kept not in append.keeps or extra != set(append.added[:kept]):
        raise KillLoopFailure(
            f"an interrupted append of {len(append.added)} rows (ids {append.added[0]}..) left "
            f"{kept} of them ({sorted(extra)[:10]}); allowed: the first {sorted(append.keeps)}"
        )
    return "whole" if kept == len(append.added) else "part"


def applied_delete(delete: Pending, extra: set[int], lost: set[int]) -> str:
    if extra:
        raise KillLoopFailure(f"an interrupted delete added ids {sorted(extra)[:10]}")
    done = [group for group in delete.removed if group & lost]
    halves = [sorted(group - lost)[:10] for group in done if not group <= lost]
    if halves:
        raise KillLoopFailure(f"an interrupted delete kept ids {halves} of a shard it deleted in")
    strays = sorted(lost.difference(*done))
    if strays:
        raise KillLoopFailure(f"an interrupted delete lost ids it did not name: {strays[:10]}")
    if len(done) != len(delete.removed):
        # The writable open that read the dataset finishes a delete a kill cut between shards
        # (loaderx._store.delete_journal), so a part means that did not happen.
        raise KillLoopFailure(
            f"an interrupted delete over {len(delete.removed)} shards was applied to only "
            f"{len(done)} of them"
        )
    return "whole"


def read_dataset(path: str) -> tuple[list[int], int]:
    """Opens the dataset writable and returns its ids in index order and its shard count, after
    checking that verify() finds nothing and that every row is exact and its id unique."""
    with DenseDataset(path, shard_records=SHARD_RECORDS) as ds:
        report = ds.verify()
        rows = ds[:]
        shards = len(ds.shard_stats())
    if not report.ok:
        raise KillLoopFailure(f"verify() finds bad records: {report!r}")
    wrong = np.flatnonzero((rows != rows_of(rows[:, 0])).any(axis=1))
    if len(wrong):
        raise KillLoopFailure(f"rows {wrong[:10].tolist()} are not the rows written")
    ids: list[int] = rows[:, 0].tolist()
    if len(set(ids)) != len(ids):
        twice = sorted({i for i in ids if ids.count(i) > 1})[:10]
        raise KillLoopFailure(f"ids stored twice: {twice}")
    return ids, shards


def leftovers(path: str) -> list[str]:
    """What killed writers leave that the next commit removes: staging folders, their markers
    and claim files, shard folders the manifest does not list, and parts folders (with theirs)
    beside the dataset."""
    manifest = read_manifest(path)
    listed = set() if manifest is None else set(manifest.names)
    inside = [
        name for name in os.listdir(path)
        if name.startswith((STAGING_PREFIX, ".claim-"))
        or (shard_number(name) is not None and name not in listed)
    ]
    hidden = (f".{os.path.basename(path)}.loaderx-parts-",
              f".{os.path.basename(path)}.loaderx-claim-")
    beside = [name for name in os.listdir(os.path.dirname(path)) if name.startswith(hidden)]
    return sorted(inside) + sorted(beside)


def has_redo_log(path: str) -> bool:
    """Whether a shard holds a delete's redo log, or the dataset a delete journal over several
    shards (the next writable open finishes that delete)."""
    folders = [path] + [
        os.path.join(path, name) for name in os.listdir(path) if shard_number(name) is not None
    ]
    return os.path.exists(os.path.join(path, JOURNAL_FILE)) or any(
        os.path.exists(os.path.join(folder, "redo.zr")) for folder in folders
    )


def recover(operation: str, path: str, model: DatasetModel) -> None:
    """The next commit, by this process. Parts folders are removed only by the next parallel
    conversion, so parallel-append recovers with one; the others append one row more than the
    tail has room for, which commits a new shard."""
    first = model.next_id
    if operation == "parallel-append":
        count = SHARD_RECORDS + 7
        parallel_append(path, first, count)
    else:
        with DenseDataset(path, shard_records=SHARD_RECORDS) as ds:
            count = max(0, SHARD_RECORDS - shard_lengths(ds)[-1]) + 1
            ds.append(rows_of(range(first, first + count)))
    model.live.update(range(first, first + count))
    model.next_id = first + count


def check_sharded(operation: str, path: str, model: DatasetModel,
                  lines: list[list[str]]) -> tuple[str, int, bool]:
    """One round's checks (see the module doc); returns the interrupted operation's outcome
    (as DatasetModel.check), the shard count, and whether the kill left folders to remove."""
    ids, shards = read_dataset(path)
    outcome = model.check(ids, lines)
    left = leftovers(path)
    recover(operation, path, model)
    survivors = leftovers(path)
    if survivors:
        raise KillLoopFailure(f"the next commit left what killed writers left: {survivors}")
    return outcome, shards, bool(left)


def seed_dataset(path: str, model: DatasetModel, count: int) -> None:
    """A fresh dataset of `count` rows: one store that rolls over, so "." is its shard 0."""
    shutil.rmtree(path, ignore_errors=True)
    first = model.next_id
    with DenseDataset(path, dtype=np.int64, item_shape=(ROW_WIDTH,), codec=CODEC,
                      shard_records=SHARD_RECORDS) as ds:
        ds.append(rows_of(range(first, first + count)))
    model.live = set(range(first, first + count))
    model.next_id = first + count
