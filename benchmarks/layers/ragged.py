"""The ragged layer: packed token batches from the loader against the same bytes gathered dense.

Token sequences (int32) of 1 to 2 x MEAN_TOKENS - 1 tokens, uniform, so a record averages
MEAN_TOKENS tokens; the dense reference holds as many records of exactly MEAN_TOKENS tokens,
so a dense batch carries the bytes a packed batch carries on average. Both go through the same
DataLoader (cyclic, default workers, batches dropped after each next()), raw and zstd; the
ratio compares record bytes per second (the packed records' measured mean), which a batch's own
length does not skew. A padded row
(Padding to the longest possible record) shows what padding costs besides; its MiB/s counts the
record bytes, not the padding. One more dense row holds records of MEAN_TOKENS + 1 tokens
(4,100 bytes): no record of it starts on a page boundary, as no packed record can be relied on
to, so the same run shows how much of the packed gap the dense reference's page alignment is.
A second table does the same for short sequences (raw, packed against dense), where the cost
of each record rather than of its bytes decides.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from . import report, select, stores, timing
from .report import Column, Report, Table

MIB = float(1 << 20)
MEAN_TOKENS = 1024
RECORD_BYTES = MEAN_TOKENS * 4
# Dense records one token longer: 4,100 bytes, so none but the first starts on a page.
UNALIGNED_TOKENS = MEAN_TOKENS + 1
UNALIGNED = "dense raw, off pages"
# Padding(MEAN_TOKENS, truncate=True): about half the records are longer and keep their first
# MEAN_TOKENS tokens (a compressed one is still decompressed whole, then cut).
TRUNCATED = f"padded to {MEAN_TOKENS}, truncated"


# Short sequences (a few dozen tokens, as chat turns or labels are): a batch is mostly the
# cost of finding and sizing each record, which the long ones hide behind their copies.
SHORT_MEAN_TOKENS = 32


def token_lengths(count: int, seed: int, mean: int = MEAN_TOKENS) -> np.ndarray:
    """count lengths in 1 .. 2 * mean - 1, uniform: their mean is `mean`."""
    return np.random.default_rng(seed).integers(1, 2 * mean, size=count)


def build(folder: Path, records: int, mean: int = MEAN_TOKENS,
          codecs: tuple[str, ...] = ("raw", "zstd"),
          unaligned: bool = False) -> tuple[dict[str, Path], float]:
    """The datasets (packed and dense, in each codec) of records of `mean` tokens on average
    (dense: exactly), and the ragged records' mean size in bytes. With `unaligned`, also
    UNALIGNED: raw dense records of UNALIGNED_TOKENS tokens."""
    from loaderx.dataset import DenseDataset, RaggedDataset

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    lengths = token_lengths(records, seed=0, mean=mean)
    # Tokens of a small vocabulary, as a tokenizer's ids compress.
    tokens = [rng.integers(0, 32_000, size=int(n), dtype=np.int32) for n in lengths]
    dense = rng.integers(0, 32_000, size=(records, mean), dtype=np.int32)
    paths: dict[str, Path] = {}
    for codec in codecs:
        for kind in ("packed", "dense"):
            path = folder / f"{kind}-{codec}"
            stores.remove(path)
            if kind == "packed":
                with RaggedDataset(str(path), dtype=np.int32, codec=codec) as ragged:
                    ragged.append(tokens)
            else:
                with DenseDataset(str(path), dtype=np.int32, item_shape=(mean,),
                                  codec=codec) as flat:
                    flat.append(dense)
            paths[f"{kind} {codec}"] = path
    if unaligned:
        path = folder / "dense-unaligned-raw"
        stores.remove(path)
        with DenseDataset(str(path), dtype=np.int32, item_shape=(UNALIGNED_TOKENS,),
                          codec="raw") as flat:
            flat.append(rng.integers(0, 32_000, size=(records, UNALIGNED_TOKENS), dtype=np.int32))
        paths[UNALIGNED] = path
    return paths, float(lengths.mean()) * 4


def loop(path: Path, batch: int, kind: str) -> tuple[Callable[[], Any], Callable[[], None]]:
    """next() of a DataLoader over one stream of `path`; kind is dense, packed, padded or
    truncated (TRUNCATED's Padding)."""
    from loaderx.dataloader import DataLoader, Padding
    from loaderx.dataset import DenseDataset, RaggedDataset

    dataset: Any = DenseDataset(str(path)) if kind == "dense" else RaggedDataset(str(path))
    ragged = (Padding(2 * MEAN_TOKENS) if kind == "padded"
              else Padding(MEAN_TOKENS, truncate=True) if kind == "truncated" else None)
    loader = DataLoader({"tokens": dataset}, batch_size=batch, mode="cyclic", seed=0,
                        ragged=ragged)
    iterator = iter(loader)

    def close() -> None:
        loader.close()
        dataset.close()

    return (lambda: next(iterator)), close


def time_loops(made: dict[str, tuple[Callable[[], Any], Callable[[], None]]],
               args: argparse.Namespace) -> dict[str, timing.Timing]:
    """Each loop's next() timed in interleaved rounds; every loop closed after, timed or not."""
    try:
        return timing.interleave({n: step for n, (step, _) in made.items()},
                                 rounds=args.rounds, block_seconds=args.block * 2.5)
    finally:
        for _, close in made.values():
            close()


def run(args: argparse.Namespace, rep: Report, workdir: Path) -> None:
    folder = workdir / "ragged"
    try:
        paths, ragged_bytes = build(folder, args.records, unaligned=True)
    except Exception as error:  # noqa: BLE001 - reported, the other layers go on
        rep.skip("ragged layer", f"{type(error).__name__}: {error}")
        return
    made: dict[str, tuple[Callable[[], Any], Callable[[], None]]] = {}
    for codec in ("raw", "zstd"):
        for kind in ("dense", "packed", "padded"):
            name = f"{kind} {codec}"
            if select.wanted(f"loaderx {name}", False, args.only, reference=kind == "dense"):
                store = paths[f"{'dense' if kind == 'dense' else 'packed'} {codec}"]
                made[name] = loop(store, args.batch, kind)
        name = f"{TRUNCATED} {codec}"
        if select.wanted(f"loaderx {name}", False, args.only):
            made[name] = loop(paths[f"packed {codec}"], args.batch, "truncated")
    if "dense raw" in made and select.wanted(f"loaderx {UNALIGNED}", False, args.only):
        made[UNALIGNED] = loop(paths[UNALIGNED], args.batch, "dense")
    timings = time_loops(made, args)
    # Record bytes per batch: exact for dense; the records' mean for packed and padded batches
    # (cyclic batches cover every record once a cycle), of what truncation keeps when truncated.
    kept = float(np.minimum(token_lengths(args.records, seed=0), MEAN_TOKENS).mean()) * 4

    def batch_bytes(name: str) -> float:
        if name == UNALIGNED:
            return float(args.batch * UNALIGNED_TOKENS * 4)
        if name.startswith(TRUNCATED):
            return args.batch * kept
        return float(args.batch * (RECORD_BYTES if name.startswith("dense") else ragged_bytes))

    table = Table("ragged", f"Ragged loader: batches of {args.batch} int32 token sequences of "
                  f"1 to {2 * MEAN_TOKENS - 1} tokens (mean {MEAN_TOKENS}), against dense "
                  f"records of {MEAN_TOKENS} tokens, {args.records} records", [
                      Column("loader", "loader"),
                      Column("batches_s", "batches/s", report.per_second),
                      Column("mib_s", "record MiB/s", report.mib_s),
                      Column("vs_dense", "vs dense, same bytes", report.ratio),
                  ])
    rates = {name: 1.0 / t.median for name, t in timings.items()}
    speeds = {name: rate * batch_bytes(name) for name, rate in rates.items()}
    for name, speed in speeds.items():
        dense = speeds.get(f"dense {'raw' if name == UNALIGNED else name.split()[-1]}")
        table.add(loader=f"loaderx {name}", batches_s=rates[name], mib_s=speed / MIB,
                  vs_dense=speed / dense if dense else None, timing=timings[name].as_json())
    table.notes.append(f"median of {args.rounds} interleaved rounds; MiB/s of record bytes "
                       "(a packed batch's mean; padding not counted)")
    table.notes.append(f"padded: Padding({2 * MEAN_TOKENS}), a (batch, {2 * MEAN_TOKENS}) "
                       "array and mask per batch, twice the record bytes written")
    table.notes.append(f"{TRUNCATED}: Padding({MEAN_TOKENS}, truncate=True); MiB/s counts the "
                       f"tokens kept ({kept / 4:.0f} a record on average), and a compressed "
                       "record is decompressed whole before it is cut")
    if UNALIGNED in speeds and "packed raw" in speeds:
        table.notes.append(f"{UNALIGNED}: records of {UNALIGNED_TOKENS} tokens "
                           f"({UNALIGNED_TOKENS * 4} bytes), none on a page boundary; packed "
                           f"raw against it: {speeds['packed raw'] / speeds[UNALIGNED]:.3f}x")
    rep.emit(table)
    for codec in ("raw", "zstd"):
        packed, dense = speeds.get(f"packed {codec}"), speeds.get(f"dense {codec}")
        if packed and dense:
            rep.target("issue 38", f"packed token batches vs the same bytes gathered dense, "
                       f"{codec}", packed / dense, 0.9)
    stores.remove(folder)
    run_short(args, rep, workdir)


def run_short(args: argparse.Namespace, rep: Report, workdir: Path) -> None:
    """Packed batches of short sequences (SHORT_MEAN_TOKENS on average) against dense records
    of exactly that many tokens, raw: a table of its own, without a target (issue 38's is for
    the batches above)."""
    folder = workdir / "ragged-short"
    if not select.wanted("loaderx packed raw, short", False, args.only):
        return
    try:
        paths, ragged_bytes = build(folder, args.records, SHORT_MEAN_TOKENS, ("raw",))
    except Exception as error:  # noqa: BLE001 - reported, the other layers go on
        rep.skip("ragged layer, short sequences", f"{type(error).__name__}: {error}")
        return
    made = {kind: loop(paths[f"{kind} raw"], args.batch, kind) for kind in ("dense", "packed")}
    timings = time_loops(made, args)
    table = Table("ragged", f"Ragged loader, short sequences: batches of {args.batch} "
                  f"int32 token sequences of 1 to {2 * SHORT_MEAN_TOKENS - 1} tokens (mean "
                  f"{SHORT_MEAN_TOKENS}), against dense records of {SHORT_MEAN_TOKENS} tokens", [
                      Column("loader", "loader"),
                      Column("batches_s", "batches/s", report.per_second),
                      Column("vs_dense", "vs dense, same bytes", report.ratio),
                  ])
    bytes_per_batch = {"dense": args.batch * SHORT_MEAN_TOKENS * 4.0,
                       "packed": args.batch * ragged_bytes}
    rates = {name: 1.0 / t.median for name, t in timings.items()}
    dense_speed = rates["dense"] * bytes_per_batch["dense"]
    for name, rate in rates.items():
        table.add(loader=f"loaderx {name} raw", batches_s=rate,
                  vs_dense=rate * bytes_per_batch[name] / dense_speed,
                  timing=timings[name].as_json())
    table.notes.append("a step of short records is mostly finding and sizing each record, "
                       "not copying it: what this table shows that the one above hides")
    rep.emit(table)
    stores.remove(folder)
