"""Opening or creating a dataset folder: its schema checked or written, its store opened."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import SupportsIndex

from numpy.typing import DTypeLike

from loaderx._os.folder_swap import interrupted_swap, recover
from loaderx._os.paths import is_file
from loaderx._store.schema import (
    Schema,
    check_codec,
    has_schema,
    make_schema,
    read_schema,
    require_same,
    resolve_dict_size,
    schema_path,
    write_schema,
)
from loaderx._store.sharded_store import ShardedStore
from loaderx._store.layout import META_FILE, manifest_path
from loaderx._store.manifest import refuse_lost_manifest
from loaderx._store.zrecord import Zrecord
from loaderx.errors import SchemaError

Shape = SupportsIndex | Sequence[SupportsIndex]
# What a dataset reads and writes through: one store, or the shards of a sharded dataset.
Store = Zrecord | ShardedStore


def open_store(
    path: str,
    kind: str,
    wanted: Schema | None,
    shard_records: int,
    readonly: bool,
    verify: bool | None,
) -> tuple[Schema, Store]:
    """Opens (wanted is None) or creates the dataset folder and returns its schema and store.

    Creation validates the schema before touching the disk, then creates the store, then writes
    the schema; opening a folder that already has a schema compares it with the one asked for.
    A folder with a shard manifest opens as a ShardedStore. A read-only open never creates
    anything.
    """
    if not readonly and not has_schema(path):
        # A conversion killed in the middle of replacing this folder left it moved aside: put
        # the complete one in place before deciding there is no dataset (or creating one).
        # A read-only open changes nothing, so it leaves that to the next writable one.
        recover(path)
    if has_schema(path):
        found = read_schema(path)
        if found.kind != kind:
            right = "RaggedDataset" if found.kind == "ragged" else "DenseDataset"
            raise SchemaError(f"{path!r} holds a {found.kind} dataset; open it with {right}")
        if wanted is not None:
            require_same(path, found, wanted)
        if os.path.exists(manifest_path(path)):
            return found, ShardedStore.open(path, found, shard_records, readonly, verify)
        refuse_lost_manifest(path)
        create = wanted is not None and not readonly
        # The dataset guards a shard folder opened by itself (_refuse_if_shard), and its
        # own checks (a rollover elsewhere) must come first: its store skips Zrecord's.
        single = Zrecord(
            path, create=create, codec=found.codec, readonly=readonly, verify=verify,
            _dataset_owned=True,
        )
        single.name_as_dataset(path)
        return found, single
    if wanted is None or readonly:
        if readonly and interrupted_swap(path):
            raise FileNotFoundError(
                f"{path!r} is missing because a conversion that was replacing it was "
                "interrupted; its new version waits beside it. A read-only open changes "
                "nothing: open it once without readonly=True (or run the conversion again) "
                "to put it in place"
            )
        if is_file(os.path.join(path, META_FILE)):
            if has_schema(path):
                # The whole folder came into place between the two looks (renamed back, or a
                # conversion's swap finishing): open what is there now, rather than call a
                # dataset a bare store because its schema was looked for first.
                return open_store(path, kind, wanted, shard_records, readonly, verify)
            raise SchemaError(
                f"{path!r} is a Zrecord store without {os.path.basename(schema_path(path))}: "
                "open it with loaderx._store.zrecord.Zrecord, or pass dtype= (and item_shape=) to "
                "declare the schema of an empty store"
            )
        if wanted is not None:  # readonly: the schema named, but a read-only open never creates
            raise FileNotFoundError(
                f"no loaderx dataset at {path!r}; readonly=True opens an existing one and never "
                "creates it (open without readonly=True to create it)"
            )
        raise FileNotFoundError(
            f"no loaderx dataset at {path!r}; pass dtype= (and item_shape=) to create one"
        )
    store = Zrecord(path, create=True, codec=wanted.codec, verify=verify, _dataset_owned=True)
    store.name_as_dataset(path)
    count = len(store)
    if count > 0:
        store.close()
        raise SchemaError(
            f"{path!r} already holds {count} Zrecord records but no schema; refusing to "
            "declare one over data of unknown layout"
        )
    try:
        write_schema(path, wanted)
    except BaseException:
        store.close()
        raise
    return wanted, store


def create_schema(
    kind: str,
    dtype: DTypeLike | None,
    item_shape: Shape | None,
    codec: object,
    dict_size: str | SupportsIndex,
) -> Schema | None:
    """The schema a constructor asked for, or None when it only opens. codec is any object:
    a str annotation would have the compiled build refuse None or 1 with mypyc's words before
    check_codec names the codecs."""
    if dtype is None:
        if item_shape is not None:
            raise TypeError("item_shape was given without dtype; a new dataset needs both")
        # Opening uses the stored codec and dictionary size, but a name that is none (a typo
        # such as "gzip") is still refused, as Zrecord refuses it: it must not pass for a
        # setting.
        check_codec(codec)
        resolve_dict_size(dict_size)
        return None
    return make_schema(kind, dtype, () if item_shape is None else item_shape, codec, dict_size)


__all__ = ["Shape", "Store", "create_schema", "open_store"]
