"""A new cached version of a dataset takes over what an older one holds for unchanged objects.

An append (or any new upload) changes the dataset's listing, so the cache makes a new version
(replica.py), which started empty: the next open downloaded every record again although most
objects were the same. When the new version is built, an older finished version of the same
URL that no process has open (its in-use lock taken exclusively here, under setup.lock) gives
it its files for every object whose name, size, ETag and version are unchanged, as hard links:
the chunks with the presence of the records that lie in them, and the metadata (an unchanged
shard's tables), which the cache only reads.

Why this keeps "present means checked": a record is present in the new version only where the
older version had it present (its bytes written and matched against its checksum) at the same
place of the same object version, with the same stored length, logical length, codec and
checksum in both tables. Its bytes are the object's bytes, so the check a new download would
make has the same inputs and the same result.

Why only a version nobody has open, and why it is removed: a hard link shares the file, and a
process reading the older version would punch holes (eviction) under records the new version
calls present. So the donor is held exclusively from the first link on, it is marked
unfinished (its objects file removed) before the new version is renamed into place, and it is
removed right after. A donor some process still reads gives nothing (its records are fetched
again). A process killed at any point leaves either the donor whole and the half-built version
unfinished (removed by the next open), or the donor unfinished (never trusted, removed) and the
new version finished or not: nothing wrong is ever present.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from typing import Final

import numpy as np
import numpy.typing as npt

from loaderx._os.lock_descriptors import close_descriptor, open_descriptor
from loaderx._remote.object_store import RemoteObject
from loaderx._remote.objects_file import OBJECTS_FILE, read_objects
from loaderx._remote.record_map import RecordMap, StoreRecords
from loaderx.errors import CorruptStoreError

_OBJECTS: Final = OBJECTS_FILE
_IN_USE: Final = "in-use.lock"


def _key(item: RemoteObject) -> tuple[str, int, str | None, str | None]:
    return item.name, item.size, item.etag, item.version


class Donor:
    """An older finished version held exclusively: what it gives a new version (module doc)."""

    def __init__(self, folder: str, fd: int,
                 objects: set[tuple[str, int, str | None, str | None]]) -> None:
        self.folder = folder
        self._fd = fd
        self._objects = objects
        self.linked: set[str] = set()

    def gives(self, item: RemoteObject) -> bool:
        """Whether the object is unchanged since the donor listed it (an ETag is required)."""
        return item.etag is not None and _key(item) in self._objects

    def link(self, item: RemoteObject, target: str) -> bool:
        """Hard-links the donor's copy of the object to target; False when it cannot
        (no such file, the wrong size: a damaged donor; a filesystem without hard links)."""
        source = os.path.join(self.folder, "data", *item.name.split("/"))
        try:
            if os.stat(source).st_size != item.size:
                return False
            os.link(source, target)
        except OSError:
            return False
        self.linked.add(item.name)
        return True

    def presence(self, new_data: str) -> list[npt.NDArray[np.uint8]]:
        """The new version's state files: each store's records that the donor has present in
        a linked chunk, with the same entry and checksum (module doc); zeros elsewhere, and
        none at all when a table cannot be read (the open reports the new one's damage)."""
        if not self.linked:
            return []
        try:
            new = RecordMap(new_data)
            old = RecordMap(os.path.join(self.folder, "data"))
        except (OSError, ValueError, CorruptStoreError):
            return []
        found = [np.zeros(store.length, dtype=np.uint8) for store in new.stores]
        old_stores = {store.name: (number, store) for number, store in enumerate(old.stores)}
        for number, store in enumerate(new.stores):
            if store.name not in old_stores:
                continue
            old_number, old_store = old_stores[store.name]
            present = self._present(old_number, old_store.length)
            if present is not None:
                found[number] = _carried(store, old_store, present, self.linked)
        return found

    def _present(self, number: int, length: int) -> npt.NDArray[np.uint8] | None:
        path = os.path.join(self.folder, "state", f"{number}.present")
        try:
            present = np.fromfile(path, dtype=np.uint8)
        except OSError:
            return None
        return present if len(present) == length else None

    def retire(self) -> None:
        """Marks the donor unfinished: from now on it shares files with the new version, and
        no open may trust it (replica.py rebuilds or removes a version without objects file)."""
        try:
            os.remove(os.path.join(self.folder, _OBJECTS))
        except FileNotFoundError:
            pass

    def remove(self) -> None:
        """Removes the retired donor, then lets go of its lock."""
        shutil.rmtree(self.folder, ignore_errors=True)
        self.release()

    def release(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            close_descriptor(fd)


def _carried(new: StoreRecords, old: StoreRecords, old_present: npt.NDArray[np.uint8],
             linked: set[str]) -> npt.NDArray[np.uint8]:
    """1 for each record of new that old has present at the same place of a linked chunk, with
    the same stored and logical lengths, codec and checksum."""
    bits = np.zeros(new.length, dtype=np.uint8)
    if new.length == 0 or old.length == 0 or (new.sums is None) != (old.sums is None):
        return bits
    chunks = new.entries["chunk"].astype(np.int64)
    usable = np.array([new.chunk_object(c) in linked for c in range(int(chunks.max()) + 1)])
    new_keys = (chunks << 32) | new.entries["offset"].astype(np.int64)
    old_keys = (old.entries["chunk"].astype(np.int64) << 32) | old.entries["offset"].astype(np.int64)
    order = np.argsort(old_keys, kind="stable")
    at = np.minimum(np.searchsorted(old_keys[order], new_keys), len(order) - 1)
    match = order[at]
    same = (old_keys[match] == new_keys) & usable[chunks] & (old_present[match] != 0)
    for name in ("stored", "logical", "codec"):
        same &= new.entries[name] == old.entries[name][match]
    if new.sums is not None and old.sums is not None:
        same &= new.sums == old.sums[match]
    bits[same] = 1
    return bits


def take_donor(base: str, target: str, objects: list[RemoteObject]) -> Donor | None:
    """The finished older version (other than target) that no process has open and that
    holds the most bytes of the objects unchanged, held exclusively; None if there is none.
    The caller holds setup.lock, so no process opens a version meanwhile."""
    best: Donor | None = None
    best_bytes = 0
    for name in sorted(os.listdir(base)):
        folder = os.path.join(base, name)
        if folder == target or not name.startswith("gen-") or ".building-" in name:
            continue
        donor = _held(folder)
        if donor is None:
            continue
        given = sum(item.size for item in objects if donor.gives(item))
        if given > best_bytes:
            if best is not None:
                best.release()
            best, best_bytes = donor, given
        else:
            donor.release()
    return best


def _held(folder: str) -> Donor | None:
    """The version at folder held exclusively with its listing, or None (in use, unfinished)."""
    try:
        fd = open_descriptor(os.path.join(folder, _IN_USE), os.O_RDWR)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        close_descriptor(fd)  # another process has it open
        return None
    listed = read_objects(folder)
    if listed is None:
        close_descriptor(fd)  # unfinished or damaged
        return None
    return Donor(folder, fd, {_key(item) for item in listed})


__all__ = ["Donor", "take_donor"]
