"""MosaicML Streaming and LitData against loaderx, all three reading the same records from the same
S3 server through the same proxy (remote.py's link), same batch, random order, cold then warm.

The peers pin numpy below 2.2 (Streaming), so they live in a venv of their own,
.cache/remote-peers-venv, made on first use with exactly PEER_REQUIREMENTS, and run in a
subprocess (remote_peer_side.py). loaderx's side runs here: two epochs of a DataLoader over a
fresh cache, the first cold, the second warm. Every side reads one epoch per pass with no worker
processes (loaderx's DataLoader uses its threads, the peers their own download threads).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Final

import numpy as np

from . import env, report, stores
from .report import Column, Report, Table

PEERS_VENV: Final = env.ROOT / ".cache" / "remote-peers-venv"
# msgpack lets the store layer's side (store_peer_side.py) import loaderx from the working tree
# and time it in the same process as the peers.
PEER_REQUIREMENTS: Final = ("torch==2.13.0", "mosaicml-streaming==0.13.0", "litdata==0.2.76",
                            "numpy==2.1.3", "boto3==1.44.18", "msgpack==1.2.4")
SIDE: Final = Path(__file__).resolve().parent / "remote_peer_side.py"
SHARD_BYTES: Final = 8 << 20  # MDS shards and LitData chunks: 8 MiB
PEER_TIMEOUT_S: Final = 900.0
PEERS: Final = {"mds": "MosaicML Streaming 0.13.0", "litdata": "LitData 0.2.76"}


def peers_python() -> Path:
    """The peers venv's interpreter, made (and filled with the pinned peers) when missing."""
    python = PEERS_VENV / "bin" / "python"
    stamp = PEERS_VENV / ".loaderx-peers.json"
    if python.exists() and stamp.exists() and json.loads(stamp.read_text()) == list(PEER_REQUIREMENTS):
        return python
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(PEERS_VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *PEER_REQUIREMENTS], check=True,
                   stderr=subprocess.DEVNULL)
    # torchvision comes with Streaming but does not load against the CPU torch here; the side
    # script stands in for the part Streaming imports (remote_peer_side.stand_in_for_torchvision).
    subprocess.run([str(python), "-m", "pip", "uninstall", "-q", "-y", "torchvision"], check=True)
    stamp.write_text(json.dumps(list(PEER_REQUIREMENTS)))
    return python


def peer_env(endpoint: str) -> dict[str, str]:
    from remote.s3_server import ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY

    variables = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_"))}
    variables.pop("PYTHONPATH", None)  # the peers' venv only, not the repository
    variables.update({"AWS_ENDPOINT_URL": endpoint, "S3_ENDPOINT_URL": endpoint,
                      "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
                      "AWS_REGION": REGION, "AWS_DEFAULT_REGION": REGION, "AWS_ALLOW_HTTP": "true"})
    return variables


def run_side(python: Path, argv: list[str], endpoint: str) -> str:
    # -P: the script's folder (benchmarks/layers, which has a select.py) stays off sys.path.
    done = subprocess.run([str(python), "-P", str(SIDE), *argv], capture_output=True, text=True,
                          env=peer_env(endpoint), timeout=PEER_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"exit {done.returncode}: {done.stderr.strip()[-1500:]}")
    return done.stdout


def loaderx_passes(url: str, cache: Path, batch: int, records: int) -> dict[str, float]:
    from loaderx.dataloader import DataLoader
    from loaderx.dataset import DenseDataset

    steps = records // batch
    figures: dict[str, float] = {}
    with DenseDataset(url, cache_dir=cache) as ds:
        # The same seed twice: the warm epoch reads exactly the records the cold one fetched
        # (steps * batch of them; another order would find the rest of the dataset missing).
        for label in ("cold", "warm"):
            started = time.perf_counter()  # before the loader: its threads start at once
            with DataLoader({"x": ds}, batch_size=batch, seed=0, mode="cyclic") as loader:
                for _ in range(steps):
                    next(loader)
                figures[label] = steps * batch / (time.perf_counter() - started)
    return figures


def run(args: argparse.Namespace, rep: Report, server: object, array: np.ndarray, folder: Path,
        url: str) -> None:
    from tools.netproxy import NetProxy

    from .remote import LATENCY_S, LINK_BYTES_S, endpoint

    try:
        python = peers_python()
    except (subprocess.CalledProcessError, OSError) as error:
        rep.skip("remote peers", f"their venv could not be made: {error}")
        return
    npy = folder / "records.npy"
    np.save(npy, array)
    out = folder / "peers"
    stores.remove(out)
    try:
        run_side(python, ["write", str(npy), str(out), str(SHARD_BYTES)], "http://127.0.0.1:9")
    except (RuntimeError, subprocess.TimeoutExpired) as error:
        rep.skip("remote peers", f"writing their formats failed: {error}")
        return
    bucket = url.split("/")[2]
    server.upload_tree(out / "mds", bucket, "mds")  # type: ignore[attr-defined]
    server.upload_tree(out / "litdata", bucket, "litdata")  # type: ignore[attr-defined]
    results: dict[str, dict[str, float] | str] = {}
    with NetProxy(server.endpoint, latency_s=LATENCY_S,  # type: ignore[attr-defined]
                  bytes_per_s=LINK_BYTES_S) as proxy:
        with endpoint(proxy.url):
            results["loaderx"] = loaderx_passes(url, folder / f"peer-cache-{uuid.uuid4().hex[:8]}",
                                                args.batch, len(array))
        for kind in PEERS:
            cache = folder / f"{kind}-cache-{uuid.uuid4().hex[:8]}"
            try:
                line = run_side(python, ["read", kind, f"s3://{bucket}/{kind}", str(cache),
                                         str(args.batch), str(npy)], proxy.url)
                results[kind] = json.loads(line.strip().splitlines()[-1])
            except (RuntimeError, subprocess.TimeoutExpired, ValueError) as error:
                results[kind] = str(error)
                rep.skip(PEERS[kind], str(error))
    emit(args, rep, results, len(array))


def emit(args: argparse.Namespace, rep: Report, results: dict[str, dict[str, float] | str],
         records: int) -> None:
    from .remote import LINK_BYTES_S

    ours = results["loaderx"]
    assert isinstance(ours, dict)
    table = Table("remote", f"Remote vs peers: one epoch of {records} records in batches of "
                  f"{args.batch}, random order, from the same S3 server through the same proxy "
                  f"({LINK_BYTES_S / 1e6:.0f} MB/s, 20 ms per request), cold cache then warm", [
                      Column("reader", "reader"),
                      Column("cold", "cold samples/s", report.per_second),
                      Column("warm", "warm samples/s", report.per_second),
                      Column("cold_ratio", "loaderx / it, cold", report.ratio),
                      Column("warm_ratio", "loaderx / it, warm", report.ratio),
                  ])
    table.add(reader="loaderx", cold=ours["cold"], warm=ours["warm"])
    for kind, name in PEERS.items():
        theirs = results.get(kind)
        if not isinstance(theirs, dict):
            table.add(reader=f"{name} (failed)")
            continue
        table.add(reader=name, cold=theirs["cold"], warm=theirs["warm"],
                  cold_ratio=ours["cold"] / theirs["cold"], warm_ratio=ours["warm"] / theirs["warm"])
        for label in ("cold", "warm"):
            rep.target("issue 37", f"loaderx / {name}, {label}", ours[label] / theirs[label], 1.5)
    table.notes.append(f"peers' shards (MDS) and chunks (LitData) of {SHARD_BYTES >> 20} MiB, "
                       "uncompressed; torch DataLoader without workers for the peers")
    rep.emit(table)

