"""The inspecting commands: info, stats, head and verify (they read a store, never write it)."""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from typing import Any, Final, TextIO

import numpy as np

from loaderx._data.dense import DenseDataset
from loaderx._data.progress import Elapsed
from loaderx._data.ragged import RaggedDataset
from loaderx._os.paths import is_file
from loaderx._store.default_checks import unchecked_by_default
from loaderx._store.layout import SUMS_FILE, shard_folder
from loaderx._store.verify import VerifyReport
from loaderx._store.zrecord import Zrecord
from loaderx.cli.exits import EXIT_OK, EXIT_PROBLEM
from loaderx.cli.sizes import count_text, size_text
from loaderx.cli.stores import (open_store, record_blocks, record_sizes, shard_names,
                                stores_inside, usage_of)

def info_of(path: str) -> dict[str, Any]:
    """What `info` reports about the store at path: its kind, layout, codec and byte counts."""
    opened = open_store(path)
    try:
        stats = opened.stats()
        count = stats["records"]
        logical = record_sizes(opened)[2] if count else 0
        shards = shard_names(opened)
        apparent, allocated = usage_of(opened, path)
        result: dict[str, Any] = {"path": path, "shards": shards,
                                  "remote": not isinstance(opened, Zrecord) and opened.remote}
        if isinstance(opened, Zrecord):
            result.update(kind="zrecord", dtype=None, item_shape=None, codec=opened.codec,
                          dict_size=None)
        else:
            result.update(kind=opened.schema.kind, dtype=str(opened.dtype),
                          item_shape=list(opened.item_shape), codec=opened.codec,
                          dict_size=opened.dict_size or None)
        result.update(
            records=count, has_dict=opened.has_dict, logical_bytes=logical,
            data_bytes=stats["live_bytes"], chunk_bytes=stats["chunk_bytes"],
            reclaimable_bytes=stats["reclaimable"], allocated_bytes=allocated,
            apparent_bytes=apparent,
            compression_ratio=(round(logical / stats["live_bytes"], 4) if stats["live_bytes"]
                               else None),
            unchecked_records=None if result["remote"] else _unchecked(path, shards),
        )
        return result
    finally:
        opened.close()


def _unchecked(path: str, shards: list[str] | None) -> int | None:
    """The records default reads leave unchecked (default_checks); None when a store has no
    checksums at all."""
    folders = [path] if shards is None else [shard_folder(path, name) for name in shards]
    if not all(is_file(os.path.join(folder, SUMS_FILE)) for folder in folders):
        return None
    return sum(unchecked_by_default(folder) for folder in folders)


def read_checks_text(info: dict[str, Any]) -> str:
    """The `read checks` row: which records a read checks against their checksums by default,
    so that a "compressed" dataset holding raw records is not taken for a checked one."""
    unchecked = info["unchecked_records"]
    if unchecked is None:
        return ("every record, as it is fetched" if info.get("remote") else
                "none: written before checksums (recode to add them)")
    if unchecked == 0:
        return "every record, on every read"
    rest = "" if unchecked == info["records"] else "; the rest on every read"
    return (f"{unchecked:,} of {info['records']:,} records are stored raw, checked only with "
            f"verify=True or `loaderx verify`{rest}")


def _usage_rows(info: dict[str, Any]) -> list[tuple[str, str]]:
    if info.get("remote"):
        return [("cached", size_text(info["allocated_bytes"]) + " (in the local cache)"),
                ("remote size", size_text(info["apparent_bytes"]) + " (in the object store)")]
    return [("allocated", size_text(info["allocated_bytes"]) + " (blocks on disk)"),
            ("apparent size", size_text(info["apparent_bytes"]) + " (what cp and tar copy)")]


def print_info(info: dict[str, Any], out: TextIO) -> None:
    """info_of's answer as aligned lines, for a person."""
    rows = [
        ("kind", info["kind"]),
        ("dtype", info["dtype"] or "-"),
        ("item shape", tuple(info["item_shape"]) if info["item_shape"] is not None else "-"),
        ("codec", info["codec"]),
        ("dictionary", size_text(info["dict_size"]) + (" (trained)" if info["has_dict"] else
                                                         " (not trained)")
         if info["dict_size"] else "-"),
        ("records", f"{info['records']:,}"),
        ("logical bytes", size_text(info["logical_bytes"])),
        ("data bytes", size_text(info["data_bytes"]) + " (stored records)"),
        *_usage_rows(info),
        ("compression", f"{info['compression_ratio']:.2f}x" if info["compression_ratio"] else "-"),
        ("read checks", read_checks_text(info)),
    ]
    if info.get("shards") is not None:
        rows.insert(5, ("shards", ", ".join(info["shards"]) or "none"))
    for label, value in rows:
        print(f"{label:<14} {value}", file=out)


def print_info_rows(names: list[str], infos: list[dict[str, Any]], out: TextIO) -> None:
    """Several info_of answers, one line a store under a header, in aligned columns."""
    rows = [("name", "kind", "dtype", "item shape", "records", "codec", "data bytes")]
    for name, info in zip(names, infos):
        shape = tuple(info["item_shape"]) if info["item_shape"] is not None else "-"
        rows.append((name, info["kind"], info["dtype"] or "-", str(shape),
                     f"{info['records']:,}", info["codec"], size_text(info["data_bytes"])))
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip(),
              file=out)


def cmd_info(args: argparse.Namespace, out: TextIO) -> int:
    """Prints info_of(args.path), as lines or as JSON; for a folder holding stores rather than
    being one, a line (a JSON list) for each."""
    names = stores_inside(args.path)
    if names:
        infos = [info_of(os.path.join(args.path, name)) for name in names]
        if args.json:
            json.dump(infos, out, indent=2)
            print(file=out)
        else:
            print_info_rows(names, infos, out)
        return EXIT_OK
    info = info_of(args.path)
    if args.json:
        json.dump(info, out, indent=2)
        print(file=out)
    else:
        print_info(info, out)
    return EXIT_OK


# The human names of stats' keys; --json keeps the keys themselves.
STATS_LABELS: Final = {
    "records": "records", "live_bytes": "live bytes", "chunk_bytes": "chunk bytes",
    "reclaimable": "reclaimable bytes", "record_bytes_min": "smallest record",
    "record_bytes_max": "largest record", "record_bytes_mean": "mean record",
}


def stats_label(key: str) -> str:
    """The words stats prints for one of its keys (a key it does not know, with spaces)."""
    return STATS_LABELS.get(key, key.replace("_", " "))


def cmd_stats(args: argparse.Namespace, out: TextIO) -> int:
    """Prints the store's own stats() and its smallest, largest and mean record size."""
    opened = open_store(args.path)
    try:
        stats: dict[str, Any] = dict(opened.stats())
        if stats["records"]:
            smallest, largest, total = record_sizes(opened)
            stats.update(record_bytes_min=smallest, record_bytes_max=largest,
                         record_bytes_mean=round(total / len(opened), 2))
    finally:
        opened.close()
    if args.json:
        json.dump(stats, out, indent=2)
        print(file=out)
    else:
        for key, value in stats.items():
            label = stats_label(key)
            print(f"{label:<18} {value:,}" if isinstance(value, int) else f"{label:<18} {value}",
                  file=out)
    return EXIT_OK


def dense_repr(ds: DenseDataset, count: int) -> str:
    """repr(ds[:count]) under the current print options, from a few rows. NumPy summarises an
    array of more values than its threshold: it shows only the first and last `edgeitems` rows
    then, and sizes their columns from those rows alone. So a summarised head reads those rows
    and one between them (which stands for all the rest: it makes NumPy put "..." there), and
    only the shape NumPy prints is the whole head's, not that of the rows read."""
    options = np.get_printoptions()
    edge = int(options["edgeitems"])
    values = count * math.prod(ds.item_shape)
    if values <= options["threshold"] or count <= 2 * edge:
        return repr(ds[:count])  # at most `threshold` values, or 2 * edgeitems records
    rows = ds[np.r_[0 : edge + 1, count - edge : count]]
    with np.printoptions(threshold=0):  # summarised as the whole head is
        text = repr(rows)
    read = f"shape={rows.shape}"
    at = text.rindex(read)  # after the values: "array(<values>,<spacer>shape=..., dtype=...)"
    values_text = text[:at].rstrip()
    extras = f"shape={(count, *(int(n) for n in ds.item_shape))}" + text[at + len(read):]
    # NumPy's rule: the extras go on a line of their own when they would pass the line width.
    last_line = len(values_text) - (values_text.rfind("\n") + 1)
    wrap = last_line + len(extras) + 1 > int(options["linewidth"])
    return values_text + ("\n" + " " * len("array(") if wrap else " ") + extras


def cmd_head(args: argparse.Namespace, out: TextIO) -> int:
    """Prints the first records, reading them in blocks of about READ_BYTES: `-n` may ask
    for more records than memory holds (a dense head reads only the rows NumPy shows)."""
    opened = open_store(args.path)
    try:
        count = min(args.n, len(opened))
        with np.printoptions(threshold=64, edgeitems=3, linewidth=100):
            if isinstance(opened, DenseDataset):
                print(dense_repr(opened, count), file=out)
            elif isinstance(opened, RaggedDataset):
                for block in record_blocks(opened, count):
                    for index, record in enumerate(opened[block], start=block.start):
                        print(f"[{index}] shape {record.shape}: {np.array2string(record)}",
                              file=out)
            else:
                for block in record_blocks(opened, count):
                    for index, raw in enumerate(opened.gather(block), start=block.start):
                        shown = raw[:48]
                        more = f"... ({len(raw):,} bytes)" if len(raw) > 48 else ""
                        print(f"[{index}] {shown!r}{more}", file=out)
        print(f"({count:,} of {len(opened):,} records)", file=out)
    finally:
        opened.close()
    return EXIT_OK


def sums_text(report: VerifyReport) -> str:
    """What verify compared the records with, for its first line."""
    if report.has_checksums:
        return f"{report.checksummed:,} against their checksums"
    if report.missing_sums:
        return (f"{report.checksummed:,} against their checksums, the rest by table entries and "
                "frames only: checksums missing")
    return ("no checksums: this store was written before loaderx kept them; table entries "
            "and frames only")


def verdict(report: VerifyReport) -> str:
    """verify's last line: OK, or what it found."""
    if report.ok:
        return "OK"
    found = []
    if report.bad_count:
        found.append(count_text(report.bad_count, "bad record"))
    if report.missing_sums:
        found.append(count_text(len(report.missing_sums), "store") + " without its sums.zr")
    return ", ".join(found)


def cmd_verify(args: argparse.Namespace, out: TextIO) -> int:
    """Checks every record (table entries against the chunks, checksums, frames); exit 1 and
    the list of bad records if anything is wrong. A folder holding stores rather than being one
    (what `convert` of an .npz or a Parquet file writes) has each of them checked in turn, as
    `info` lists them: a user checks what a conversion wrote with the path it was given."""
    names = stores_inside(args.path)
    if not names:
        found = verify_one(args.path, args, out)
        if args.json:
            json.dump(found, out, indent=2)
            print(file=out)
        return EXIT_OK if found["ok"] else EXIT_PROBLEM
    results = [verify_one(os.path.join(args.path, name), args, out) for name in names]
    if args.json:
        json.dump(results, out, indent=2)
        print(file=out)
    else:
        bad = [name for name, found in zip(names, results) if not found["ok"]]
        print(f"{args.path}: {count_text(len(names), 'store')} checked; "
              + (f"problems in {', '.join(bad)}" if bad else "OK"), file=out)
    return EXIT_OK if all(found["ok"] for found in results) else EXIT_PROBLEM


def verify_one(path: str, args: argparse.Namespace, out: TextIO) -> dict[str, Any]:
    """Verifies the store at path, printing its report (unless --json), and returns what
    --json prints for it."""
    opened = open_store(path)
    try:
        count = len(opened)
        shown = True if args.progress else (False if args.json else None)
        started = time.perf_counter()
        with Elapsed(f"verifying {count_text(count, 'record')} of {path}", shown):
            report = opened.verify()
        elapsed = time.perf_counter() - started
        orphans = [] if isinstance(opened, Zrecord) else opened.remote_orphans()
    finally:
        opened.close()
    if not args.json:
        print_verify_report(path, report, elapsed, orphans, out)
    return {
        "path": path, "records": report.records, "has_checksums": report.has_checksums,
        "checksummed": report.checksummed, "bad_count": report.bad_count,
        "bad": [{"index": bad.index, "reason": bad.reason} for bad in report.bad],
        "missing_sums": report.missing_sums, "ok": report.ok, "orphans": orphans,
    }


def print_verify_report(
    path: str, report: VerifyReport, elapsed: float, orphans: list[str], out: TextIO
) -> None:
    """verify's lines for one store: what was checked, each problem, and the verdict."""
    print(f"{path}: {count_text(report.records, 'record')} checked in {elapsed:.1f} s "
          f"({sums_text(report)})", file=out)
    for gone in report.missing_sums:
        print(f"  missing checksums: {gone} is gone, but this store was written with "
              "checksums; its records were checked without them", file=out)
    for bad in report.bad:
        print(f"  bad record {bad.index}: {bad.reason}", file=out)
    if report.bad_count > len(report.bad):
        print(f"  ... {count_text(report.bad_count, 'bad record')} in all", file=out)
    if orphans:
        print(f"  note: {count_text(len(orphans), 'object')} in shard folders the manifest "
              "does not list (a killed writer's uploads; readers ignore them and the next "
              f"writer removes them): {', '.join(orphans[:5])}"
              + (" ..." if len(orphans) > 5 else ""), file=out)
    print(verdict(report), file=out)
