"""The main job (`python3 build.py demo`, i.e. `python -m loaderx.demo`): the Quick Start, measured.

It makes a small image-like dataset with labels, saves both as .npy files, converts them with
from_numpy under each codec (raw, zstd, zstd_dict), checks that the loader's batches equal the
same records read from the .npy files, runs the DataLoader for a few hundred steps, and prints
records, bytes on disk, compression ratio, write speed, batches per second of the bare gather and
of the loader, next to a NumPy memmap baseline over the very same steps. Everything lives in a
temporary folder (or --dir) and is removed afterwards unless --keep is given.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from loaderx.cli.arguments import int_option
from loaderx.cli.sizes import size_text
from loaderx._data.dictionary_sample import DICT_SAMPLE_COUNT_MIN
from loaderx._data.converter import from_numpy
from loaderx._loading.dataloader import DataLoader
from loaderx._loading.prefetch import WORKERS_MAX, default_workers
from loaderx._data.dense import DenseDataset
from loaderx._loading.sampler import SEED_LIMIT, Sampler

__all__ = ["main", "parse_args", "run", "synthetic_images"]

CODECS: Final = ("raw", "zstd", "zstd_dict")
RECORDS_DEFAULT: Final = 4096
SIDE_DEFAULT: Final = 32
STEPS_DEFAULT: Final = 300
BATCH_SIZE_DEFAULT: Final = 256
CLASS_COUNT: Final = 10
PATTERN_SIDE: Final = 16
MIB: Final = 1 << 20
# synthetic_images works on this many images at a time (four float32 temporaries of them).
GENERATE_BLOCK: Final = 512


def class_patterns(side: int = PATTERN_SIDE) -> npt.NDArray[np.bool_]:
    """Ten (side, side) boolean textures, one per class: five stripe orientations, two periods."""
    y, x = np.mgrid[0:side, 0:side]
    patterns = []
    for period in (4, 8):
        half = period // 2
        patterns += [
            (y // half) % 2 == 0,  # horizontal stripes
            (x // half) % 2 == 0,  # vertical stripes
            ((x + y) // half) % 2 == 0,  # diagonal
            ((x - y) // half) % 2 == 0,  # anti-diagonal
            ((x // half) + (y // half)) % 2 == 0,  # checkerboard
        ]
    return np.stack(patterns)


def synthetic_images(
    count: int, side: int = SIDE_DEFAULT, seed: int = 0
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:

    """count image-like samples (count, side, side, 3) uint8 and their int64 labels in 0..9.

    Each image is a smooth colour gradient, posterised to steps of 8 like a cheaply encoded
    photo, with a square patch of its class's texture (stripes of some orientation and period)
    at a random place in a contrasting colour. A small CNN learns the classes quickly, and the
    images share structure the way a real image set does, which compression (and a trained
    dictionary) can use.
    """
    if side < PATTERN_SIDE:
        raise ValueError(f"side must be at least {PATTERN_SIDE}, got {side}")
    patterns = class_patterns()
    rng = np.random.default_rng(seed)
    axis = np.linspace(0.0, 1.0, side, dtype=np.float32)
    y, x = np.meshgrid(axis, axis, indexing="ij")
    images = np.empty((count, side, side, 3), dtype=np.uint8)
    labels = rng.integers(0, CLASS_COUNT, count).astype(np.int64)
    block = GENERATE_BLOCK
    for start in range(0, count, block):
        n = min(block, count - start)
        base = rng.uniform(30, 200, (n, 1, 1, 3)).astype(np.float32)
        slope_x = rng.uniform(-40, 40, (n, 1, 1, 3)).astype(np.float32)
        slope_y = rng.uniform(-40, 40, (n, 1, 1, 3)).astype(np.float32)
        image = base + slope_x * x[None, :, :, None] + slope_y * y[None, :, :, None]
        images[start:start + n] = np.clip(np.round(image / 8) * 8, 0, 255).astype(np.uint8)
    span = side - PATTERN_SIDE + 1
    rows = rng.integers(0, span, count)
    cols = rng.integers(0, span, count)
    for i in range(count):
        patch = images[i, rows[i]:rows[i] + PATTERN_SIDE, cols[i]:cols[i] + PATTERN_SIDE]
        # The mean colour flipped across mid-grey always stands out from the background.
        colour = (255 - patch.reshape(-1, 3).mean(axis=0)).astype(np.uint8)
        patch[patterns[labels[i]]] = colour
    return images, labels


def memory_needed(count: int, side: int) -> int:
    """Bytes synthetic_images holds at once: the images, their int64 labels and patch places
    (three int64 draws per image), and one block's float32 temporaries."""
    image = side * side * 3
    return count * (image + 3 * 8) + 4 * GENERATE_BLOCK * image * 4


def memory_bytes() -> int | None:
    """This machine's physical memory; None where it cannot be asked (Windows)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None
    return total if total > 0 else None


def _check_memory(parser: argparse.ArgumentParser, records: int, side: int) -> None:
    """The demo makes its whole image set in memory (it is the Quick Start, measured, not a
    scale test): a set larger than the machine's memory is a usage error said up front, not a
    MemoryError from deep inside NumPy."""
    total = memory_bytes()
    need = memory_needed(records, side)
    if total is None or need <= total:
        return
    per_image = memory_needed(1, side) - memory_needed(0, side)
    fits = max(0, (total - memory_needed(0, side)) // per_image)
    advice = (f"at most {fits} records fit with this --side" if fits
              else "no --records fits with this --side: pick a smaller --side")
    parser.error(
        f"--records {records} with --side {side} needs {size_text(need)} of memory (the demo makes "
        f"its whole image set in memory), more than this machine's {size_text(total)}: {advice}"
    )


def disk_bytes(folder: Path) -> int:
    """Bytes allocated on disk for every file under folder (sparse holes are not counted)."""
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            total += os.stat(os.path.join(root, name)).st_blocks * 512
    return total


def rate(count: int, run: Callable[[], None], repeats: int) -> float:
    """count / the seconds run() takes, best of repeats (the machine may be busy with others)."""
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return count / max(best, 1e-9)


def loader_rate(
    streams: dict[str, DenseDataset], steps: int, args: argparse.Namespace
) -> float:
    """Batches per second of a DataLoader from step 0 over steps (thread start-up included)."""

    def run() -> None:
        with DataLoader(
            streams, batch_size=args.batch_size, seed=args.seed, workers=args.workers
        ) as loader:
            for _ in range(steps):
                next(loader)

    return rate(steps, run, args.repeats)


def bare_gather_rate(
    streams: dict[str, DenseDataset], sampler: Sampler, steps: int, repeats: int
) -> float:
    """Batches per second of the same steps gathered on one thread, no loader in between."""
    indices = np.empty(sampler.batch_size, dtype=np.int64)
    outs = {
        name: np.empty((sampler.batch_size, *ds.item_shape), dtype=ds.dtype)
        for name, ds in streams.items()
    }

    def run() -> None:
        for step in range(steps):
            sampler.fill(step, indices)
            for name, ds in streams.items():
                ds.gather_into(indices, outs[name])

    return rate(steps, run, repeats)


def memmap_rate(
    arrays: dict[str, npt.NDArray[Any]], sampler: Sampler, steps: int, repeats: int
) -> float:
    """Batches per second of np.load(mmap_mode='r')[indices] over the same steps."""
    indices = np.empty(sampler.batch_size, dtype=np.int64)

    def run() -> None:
        for step in range(steps):
            sampler.fill(step, indices)
            for array in arrays.values():
                array[indices]

    return rate(steps, run, repeats)


def check_against_numpy(
    streams: dict[str, DenseDataset], arrays: dict[str, npt.NDArray[Any]], args: argparse.Namespace
) -> None:
    """The loader's first batches must be exactly the .npy rows at the sampler's indices."""
    with DataLoader(streams, batch_size=args.batch_size, seed=args.seed, prefetch=2) as loader:
        for step in range(3):
            indices = loader.indices(step)
            batch = next(loader)
            for name, array in arrays.items():
                if not np.array_equal(batch[name], array[indices]):
                    raise SystemExit(f"demo: stream {name!r} differs from the .npy at step {step}")


def _codecs(text: str) -> list[str]:
    """--codecs' argparse type: a comma-separated list of codec names, none empty."""
    codecs = text.split(",")
    unknown = [codec for codec in codecs if codec not in CODECS]
    if unknown:
        listed = ", ".join(repr(codec) for codec in unknown)
        raise argparse.ArgumentTypeError(
            f"unknown codec {listed} (a comma-separated subset of {','.join(CODECS)})"
        )
    return codecs


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m loaderx.demo", description=__doc__)
    parser.add_argument("--records", type=int_option(1), default=RECORDS_DEFAULT)
    parser.add_argument("--side", type=int_option(PATTERN_SIDE), default=SIDE_DEFAULT,
                        help="image side in pixels")
    parser.add_argument("--steps", type=int_option(1), default=STEPS_DEFAULT)
    parser.add_argument("--batch-size", type=int_option(1), default=BATCH_SIZE_DEFAULT)
    parser.add_argument("--workers", type=int_option(1, WORKERS_MAX),
                        default=default_workers(consumer_helps=True))
    parser.add_argument("--seed", type=int_option(0, SEED_LIMIT - 1), default=0)
    parser.add_argument("--repeats", type=int_option(1), default=3, help="timings keep the best run")
    parser.add_argument("--codecs", type=_codecs, default=list(CODECS),
                        help="comma-separated subset of " + ",".join(CODECS))
    parser.add_argument("--dir", default=None, help="work folder (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args(argv)
    if args.batch_size > args.records:
        parser.error("--batch-size must not exceed --records (cyclic mode)")
    _check_memory(parser, args.records, args.side)
    if "zstd_dict" in args.codecs and args.records < DICT_SAMPLE_COUNT_MIN:
        parser.error(f"--codecs zstd_dict trains a dictionary, which needs --records of at least "
                     f"{DICT_SAMPLE_COUNT_MIN}")
    if args.dir is not None and os.path.exists(args.dir):
        if not os.path.isdir(args.dir):
            parser.error(f"--dir {args.dir}: exists and is not a folder")
        # The demo saves data.npy and label.npy there, the Quick Start's own file names: a
        # user's folder that holds theirs must not lose them.
        if os.listdir(args.dir):
            parser.error(f"--dir {args.dir}: not empty (the demo writes data.npy, label.npy and "
                         "its stores there, replacing files of those names): pick a new or "
                         "empty folder")
    return args


def run(args: argparse.Namespace, work: Path) -> None:
    images, labels = synthetic_images(args.records, args.side, args.seed)
    np.save(work / "data.npy", images)
    np.save(work / "label.npy", labels)
    arrays = {
        "data": np.load(work / "data.npy", mmap_mode="r"),
        "label": np.load(work / "label.npy", mmap_mode="r"),
    }
    logical = images.nbytes
    print(
        f"loaderx demo: {args.records} images {images.shape[1:]} uint8 "
        f"({logical / MIB:.1f} MiB) + int64 labels; batch {args.batch_size}, {args.steps} steps, "
        f"{args.workers} workers; in {work}"
    )
    from_numpy(work / "label", arrays["label"], codec="raw", overwrite=True)
    sampler = Sampler(args.records, args.batch_size, seed=args.seed)
    print(
        f"{'codec':<10} {'records':>8} {'on disk':>10} {'ratio':>7} {'write':>11} "
        f"{'gather':>12} {'loader':>12} {'loader/gather':>14}"
    )
    for codec in args.codecs:
        store = work / f"data-{codec}"
        started = time.perf_counter()
        from_numpy(store, arrays["data"], codec=codec, overwrite=True)
        write_seconds = time.perf_counter() - started
        on_disk = disk_bytes(store)
        with DenseDataset(store) as data, DenseDataset(work / "label") as label:
            streams = {"data": data, "label": label}
            check_against_numpy(streams, arrays, args)
            gather = bare_gather_rate(streams, sampler, args.steps, args.repeats)
            loader = loader_rate(streams, args.steps, args)
            write = f"{logical / MIB / write_seconds:.1f} MiB/s"
            print(
                f"{codec:<10} {len(data):>8} {on_disk / MIB:>6.2f} MiB {logical / on_disk:>6.2f}x "
                f"{write:>11} {gather:>8.0f} b/s {loader:>8.0f} b/s {loader / gather:>13.2f}x"
            )
    memmap = memmap_rate(arrays, sampler, args.steps, args.repeats)
    print(
        f"{'npy-mmap':<10} {args.records:>8} {disk_bytes_of_npy(work) / MIB:>6.2f} MiB "
        f"{'1.00x':>7} {'':>11} {memmap:>8.0f} b/s   (np.load(mmap_mode='r')[indices], same steps)"
    )
    print(
        f"b/s: batches per second, best of {args.repeats} runs of steps 0..{args.steps - 1}; "
        "gather: those steps gathered on one thread into one reused buffer, no loader"
    )


def disk_bytes_of_npy(work: Path) -> int:
    return os.stat(work / "data.npy").st_blocks * 512


def _run_and_clean_up(args: argparse.Namespace) -> None:
    """run() in --dir, or in a temporary folder removed afterwards unless --keep."""
    if args.dir is not None:
        work = Path(args.dir)
        work.mkdir(parents=True, exist_ok=True)
        run(args, work)
        return
    work = Path(tempfile.mkdtemp(prefix="loaderx-demo-"))
    try:
        run(args, work)
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        _run_and_clean_up(args)
        sys.stdout.flush()
    except KeyboardInterrupt:
        # Ctrl-C: one line, not a traceback; the temporary folder is gone already. 130 is
        # 128 + SIGINT, as shells report a command stopped by Ctrl-C.
        print("loaderx demo: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    except BrokenPipeError:
        # The reader went away (`python -m loaderx.demo | head -1`): stop quietly, as the
        # loaderx command does. stdout goes to /dev/null so that the interpreter's final
        # flush stays quiet too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())

if __name__ == "__main__":
    main()
