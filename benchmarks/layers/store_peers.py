"""The store layer's rows that run in another venv: MosaicML Streaming (local MDS) and LitData.

Streaming pins numpy below 2.2, so neither enters the bench venv: both run in the remote layer's
peers venv (remote_peers.PEERS_VENV, made on first use with its pinned requirements) through
store_peer_side.py, which gets the same records, the same batches of indices and loaderx's
result for the first two of them, checks each peer's batches byte for byte against loaderx's,
and times npy-mmap, loaderx raw and the peers round-robin in its own process. Their rows in the
store table carry that process's figures; "vs npy-mmap" is against the npy-mmap timed there.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path
from typing import Final

import numpy as np

from . import env, remote_peers, select
from .report import Report, Table

SIDE: Final = Path(__file__).resolve().parent / "store_peer_side.py"
NAMES: Final = ("mosaicml-streaming mds raw", "litdata raw")
SIDE_TIMEOUT_S: Final = 900.0
MIB: Final = float(1 << 20)


def wanted(args: argparse.Namespace) -> list[str]:
    return [name for name in NAMES if select.wanted(name, False, args.only)]


def measure(args: argparse.Namespace, rep: Report, array: np.ndarray, batches: list[np.ndarray],
            expected: list[np.ndarray], loaderx_store: Path | None,
            folder: Path) -> dict[str, object] | None:
    """Runs the side; its JSON, or None after a skip line saying why."""
    what = f"{', '.join(wanted(args))} ({'smooth' if 'smooth' in folder.name else 'mild'})"
    if args.here:
        rep.skip(what, "--here: they run only in their own venv (remote_peers.PEERS_VENV)")
        return None
    try:
        python = remote_peers.peers_python()
    except (subprocess.CalledProcessError, OSError) as error:
        rep.skip(what, f"their venv could not be made: {error}")
        return None
    work = folder / "side"
    work.mkdir(parents=True, exist_ok=True)
    np.save(work / "records.npy", array)
    np.save(work / "batches.npy", np.stack(batches))
    np.save(work / "expected.npy", np.stack(expected))
    argv = [str(python), "-P", str(SIDE), str(work), str(args.rounds), str(args.block)]
    if loaderx_store is not None:
        argv.append(str(loaderx_store))
    variables = dict(os.environ)
    variables.pop(env.MARKER, None)  # not the bench venv
    variables["PYTHONPATH"] = str(env.ROOT)  # loaderx from the working tree, as in the bench venv
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=variables,
                              timeout=SIDE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        rep.skip(what, f"their side did not finish within {SIDE_TIMEOUT_S:.0f} s")
        return None
    if done.returncode != 0:
        rep.skip(what, f"their side exited {done.returncode}: {done.stderr.strip()[-600:]}")
        return None
    figures: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def add_rows(table: Table, rep: Report, figures: dict[str, object], names: list[str],
             batch_bytes: int, total_bytes: int) -> None:
    """One row per peer that passed its check, plus a note with the same-process ratios."""
    errors: dict[str, str] = figures["errors"]  # type: ignore[assignment]
    timings: dict[str, dict[str, float]] = figures["timings"]  # type: ignore[assignment]
    npy = timings["npy-mmap"]["median_s"]
    ours = timings.get("loaderx raw")
    kind = table.title.split(":")[0]
    for name, why in errors.items():
        rep.skip(f"{name} ({kind}, peers' venv)", why)
    ratios: list[str] = []
    for name in names:
        t = timings.get(name)
        if t is None:
            continue
        written = float(figures.get(f"{name} write_s") or 0.0)  # type: ignore[arg-type]
        on_disk = int(figures.get(f"{name} disk_bytes") or 0)  # type: ignore[call-overload]
        table.add(store=name, write_mib_s=total_bytes / written / MIB if written else None,
                  gather_mib_s=batch_bytes / t["median_s"] / MIB,
                  gather_best_mib_s=batch_bytes / t["best_s"] / MIB, gather_s=t,
                  vs_npy=npy / t["median_s"], disk_bytes=on_disk or None,
                  ratio=total_bytes / on_disk if on_disk else None, peers_venv=True)
        if ours is not None:
            ratios.append(f"{t['median_s'] / ours['median_s']:.2f}x {name}")
    if ratios:
        table.notes.append("mosaicml-streaming 0.13.0 and litdata 0.2.76 ran in their own venv "
                           "(numpy 2.1.3), timed round-robin there with npy-mmap (their 'vs "
                           "npy-mmap') and loaderx raw ds[idx]; loaderx raw there: "
                           + ", ".join(ratios))
