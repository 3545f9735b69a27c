"""The remote layer: a dataset read from an S3 server against the same records on local disk.

One dataset of --remote-records records of --shape (uint8, raw, shards of --shard-records) is
written locally and uploaded to moto's
S3 server (tests/remote/s3_server.py) on 127.0.0.1; everything else reads it by URL.

Warm: the cache holds every record; random batches of --batch through ds[idx] and gather_into,
and the DataLoader loop, remote against local, timed round-robin (the remote read path adds
Fetcher.reading: the cache gate's flock pair and a presence check per batch).
Cold: a fresh cache behind tools/netproxy.py, which adds 20 ms per request and caps responses at
50 MB/s; one epoch of the DataLoader (look-ahead on) as fast as it can go: the records' bytes per
second as a share of the link. Then a second fresh cache with a consumer that spends the link's
time per batch plus half (a training step the link can feed): the share of its time spent waiting
in next() after the first steps, and the requests and bytes the proxy forwarded per epoch.
Peers (MosaicML Streaming, LitData) run in their own venv: layers/remote_peers.py.

Needs obstore and moto (the project's test environment), so compare.py runs this layer in its own
interpreter rather than the bench venv.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Final

import numpy as np

from . import data, env, report, stores, timing
from .report import Column, Report, Table

LATENCY_S: Final = 0.020
LINK_BYTES_S: Final = 50e6
WARMUP_STEPS: Final = 3  # steps of the wait measurement left out: the look-ahead's first fetches
STEP_SLACK: Final = 1.5  # the paced consumer's step lasts the link's time per batch times this
ENV_NAMES: Final = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                    "AWS_REGION", "AWS_ALLOW_HTTP")


def _kit() -> tuple[type, type]:
    """The S3 server kit of the tests and the proxy of tools/ (both in the repository)."""
    for path in (str(env.ROOT), str(env.ROOT / "tests")):
        if path not in sys.path:
            sys.path.insert(0, path)
    from remote.s3_server import S3Server  # tests/remote/s3_server.py
    from tools.netproxy import NetProxy

    return S3Server, NetProxy


@contextmanager
def endpoint(url: str) -> Iterator[None]:
    """The AWS variables obstore reads, pointing at `url`, restored afterwards."""
    from remote.s3_server import ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY

    saved = {name: os.environ.get(name) for name in ENV_NAMES}
    os.environ.update({"AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
                       "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY, "AWS_REGION": REGION,
                       "AWS_ALLOW_HTTP": "true"})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def warm_table(args: argparse.Namespace, rep: Report, local: Path, url: str, cache: Path,
               array: np.ndarray) -> None:
    from loaderx.dataloader import DataLoader
    from loaderx.dataset import DenseDataset

    near, far = DenseDataset(str(local)), DenseDataset(url, cache_dir=cache)
    try:
        for start in range(0, len(array), 1024):  # fill the cache: every record present
            far[np.arange(start, min(start + 1024, len(array)))]
        batches = data.batches(len(array), args.batch, 64, seed=7)
        for ds in (near, far):
            if not np.array_equal(ds[batches[0]], array[batches[0]]):
                raise AssertionError("a dataset returned wrong records")
        calls: dict[str, Callable[[], object]] = {}
        loaders = []
        for label, ds in (("local", near), ("remote", far)):
            calls[f"ds[idx], {label}"] = _cycled(lambda idx, ds=ds: ds[idx], batches)
            out = np.empty((args.batch, *array.shape[1:]), array.dtype)
            calls[f"gather_into, {label}"] = _cycled(
                lambda idx, ds=ds, out=out: ds.gather_into(idx, out), batches)
            loader = DataLoader({"x": ds}, batch_size=args.batch, seed=0)
            loaders.append(loader)
            calls[f"DataLoader, {label}"] = loader.__next__
        try:
            timings = timing.interleave(calls, rounds=args.rounds, block_seconds=args.block)
        finally:
            for loader in loaders:
                loader.close()
        fetched = far._remote.fetcher.records_fetched  # type: ignore[union-attr]
    finally:
        near.close()
        far.close()
    table = Table("remote", f"Remote, warm cache: random batches of {args.batch} records, "
                  "remote dataset (cache holds all) vs the same dataset on local disk", [
                      Column("read", "read"),
                      Column("per_call", "per call", report.duration),
                      Column("per_s", "calls/s", report.per_second),
                      Column("vs_local", "vs local", report.ratio),
                  ])
    for name, t in timings.items():
        local_median = timings[name.rsplit(", ", 1)[0] + ", local"].median
        table.add(read=name, per_call=t.median, per_s=1.0 / t.median,
                  vs_local=local_median / t.median, timing=t.as_json())
        if name.endswith("remote"):
            rep.target("issue 37", f"warm {name.rsplit(',', 1)[0]} remote vs local",
                       local_median / t.median, 0.95)
    table.notes.append(f"records fetched while filling the cache: {fetched:,} (no fetch after)")
    rep.emit(table)


def _cycled(call: Callable[[np.ndarray], object], batches: list[np.ndarray]) -> Callable[[], object]:
    position = [0]

    def step() -> object:
        idx = batches[position[0] % len(batches)]
        position[0] += 1
        return call(idx)

    return step


def cold_pass(url: str, cache: Path, batch: int, steps: int, step_s: float) -> dict[str, float]:
    """One epoch of a DataLoader over a fresh cache; a consumer that spends step_s per batch
    (0: none). Returns the wall time, and the wait in next() after the warm-up steps."""
    from loaderx.dataloader import DataLoader
    from loaderx.dataset import DenseDataset

    ds = DenseDataset(url, cache_dir=cache)
    try:
        waits: list[float] = []
        started = time.perf_counter()  # before the loader: its look-ahead starts at once
        with DataLoader({"x": ds}, batch_size=batch, seed=0, mode="iid") as loader:
            for _ in range(steps):
                asked = time.perf_counter()
                next(loader)
                waits.append(time.perf_counter() - asked)
                if step_s:
                    time.sleep(step_s)  # the training step: the GIL is free, as in a GPU step
            wall = time.perf_counter() - started
        fetcher = ds._remote.fetcher  # type: ignore[union-attr]
        late = waits[WARMUP_STEPS:]
        late_total = sum(late) + step_s * len(late)
        return {"wall": wall, "wait_after": sum(late) / late_total if late_total else 0.0,
                "requests": fetcher.requests, "bytes": fetcher.bytes_fetched,
                "records": fetcher.records_fetched}
    finally:
        ds.close()


def cold_table(args: argparse.Namespace, rep: Report, server_url: str, url: str,
               workdir: Path, record_bytes: int, records: int) -> None:
    _, NetProxy = _kit()
    steps = records // args.batch
    batch_link_s = args.batch * record_bytes / LINK_BYTES_S
    rows = []
    with NetProxy(server_url, latency_s=LATENCY_S, bytes_per_s=LINK_BYTES_S) as proxy:
        with endpoint(proxy.url):
            for label, step_s in (("as fast as it goes", 0.0),
                                  (f"paced, {batch_link_s * STEP_SLACK * 1e3:.0f} ms/step",
                                   batch_link_s * STEP_SLACK)):
                cache = workdir / f"cold-cache-{uuid.uuid4().hex[:8]}"
                proxy.reset_stats()
                result = cold_pass(url, cache, args.batch, steps, step_s)
                seen = proxy.stats()
                stores.remove(cache)
                delivered = steps * args.batch * record_bytes / result["wall"]
                rows.append((label, result, seen, delivered))
    table = Table("remote", f"Remote, cold cache through the proxy ({LINK_BYTES_S / 1e6:.0f} MB/s, "
                  f"{LATENCY_S * 1e3:.0f} ms per request): one epoch of {steps} iid batches of "
                  f"{args.batch}, look-ahead on", [
                      Column("consumer", "consumer"),
                      Column("wall", "epoch", report.duration),
                      Column("records_s", "records/s", report.per_second),
                      Column("link_share", "of link", report.ratio),
                      Column("wait", "waiting in next()", _percent),
                      Column("requests", "requests"),
                      Column("bytes", "bytes", report.mib),
                      Column("fetched", "records fetched"),
                  ])
    for label, result, seen, delivered in rows:
        table.add(consumer=label, wall=result["wall"],
                  records_s=steps * args.batch / result["wall"],
                  link_share=delivered / LINK_BYTES_S, wait=result["wait_after"],
                  requests=seen.requests, bytes=seen.response_bytes,
                  fetched=int(result["records"]))
    table.notes.append(f"of link: record bytes delivered per second / {LINK_BYTES_S / 1e6:.0f} MB/s; "
                       f"waiting: time in next() over the steps' time, after the first "
                       f"{WARMUP_STEPS} steps; requests and bytes: the proxy's counters for the "
                       "epoch (opening included)")
    rep.emit(table)
    rep.target("issue 37", "cold pass: records' bytes per second / link bandwidth",
               rows[0][3] / LINK_BYTES_S, 0.8)
    rep.target("issue 37", "cold pass, paced consumer: % of time waiting on the network",
               rows[1][1]["wait_after"] * 100, 5, lower_is_better=True)


def _percent(value: object) -> str:
    return "-" if value is None else f"{float(value) * 100:.1f}%"  # type: ignore[arg-type]


def run(args: argparse.Namespace, rep: Report, workdir: Path) -> None:
    try:
        import moto  # noqa: F401
        import obstore  # noqa: F401

        S3Server, _ = _kit()
    except Exception as error:  # noqa: BLE001
        rep.skip("remote layer", f"{type(error).__name__}: {error} (needs obstore and moto)")
        return
    from . import remote_peers

    folder = workdir / "remote"
    folder.mkdir(parents=True, exist_ok=True)
    records = args.remote_records
    array = data.generate("mild", records, args.shape, seed=0)
    local = folder / "local"
    # Shards of --shard-records (12 MiB): moto answers a range read of a larger object by
    # copying it from its spool file (42 ms per request for 48 MiB, 6 ms at 12 MiB or less).
    from .shards import write_sharded

    write_sharded(local, array, "raw", args.shard_records)
    record_bytes = int(np.prod(args.shape))
    bucket = f"bench-{uuid.uuid4().hex[:12]}"
    with S3Server() as server:  # stopped on the way out, also on failure
        server.create_bucket(bucket)
        server.upload_tree(local, bucket, "ds")
        url = f"s3://{bucket}/ds"
        with endpoint(server.endpoint):
            warm_table(args, rep, local, url, folder / "warm-cache", array)
        cold_table(args, rep, server.endpoint, url, folder, record_bytes, records)
        if not args.no_peers:
            remote_peers.run(args, rep, server, array, folder, url)
    stores.remove(folder)
