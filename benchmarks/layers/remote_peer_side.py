"""The peers' side of the remote layer, run by the peers' venv (never imported by loaderx's side).

    python remote_peer_side.py write NPY OUT SHARD_BYTES     # OUT/mds and OUT/litdata
    python remote_peer_side.py read KIND URL CACHE BATCH      # prints one JSON line

`write` turns the records of NPY (uint8, N x shape) into MosaicML Streaming's MDS and LitData's
optimize() output. `read` opens the uploaded copy at URL (s3://...) with the library's own
StreamingDataset and cache, in random order, batches of BATCH through a torch DataLoader without
worker processes, for two epochs: the first over an empty cache (cold), the second warm. The
endpoint comes from the environment, as each library expects it (S3_ENDPOINT_URL for Streaming,
AWS_ENDPOINT_URL for LitData's boto3). The first batch is checked against the source records.
"""

from __future__ import annotations

import importlib.machinery
import json
import sys
import time
import types
from pathlib import Path

import numpy as np


def stand_in_for_torchvision() -> None:
    """Streaming's package imports its vision datasets, which import torchvision; no torchvision
    wheel this machine has loads against the CPU torch (its operators fail to register), so the
    peers' venv has none, and these empty modules satisfy the import. Nothing measured here uses
    them: MDSWriter and StreamingDataset are Streaming's base package."""
    names = ("torchvision", "torchvision.datasets", "torchvision.transforms",
             "torchvision.transforms.functional")
    modules = {name: types.ModuleType(name) for name in names}
    modules["torchvision.datasets"].VisionDataset = object  # type: ignore[attr-defined]
    modules["torchvision.datasets"].CIFAR10 = object  # type: ignore[attr-defined]
    modules["torchvision.transforms.functional"].to_tensor = None  # type: ignore[attr-defined]
    for name, module in modules.items():
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)  # find_spec asks for it
        sys.modules.setdefault(name, module)


stand_in_for_torchvision()


def write(npy: str, out: str, shard_bytes: int) -> None:
    records = np.load(npy)
    shape = records.shape[1:]
    from streaming import MDSWriter

    with MDSWriter(out=str(Path(out) / "mds"), columns={"x": f"ndarray:uint8:{','.join(map(str, shape))}",
                                                        "i": "int"},
                   compression=None, size_limit=shard_bytes) as writer:
        for i, record in enumerate(records):
            writer.write({"x": record, "i": i})
    from litdata import optimize

    optimize(fn=_lit_item, inputs=[(npy, i) for i in range(len(records))],
             output_dir=str(Path(out) / "litdata"), chunk_bytes=shard_bytes, num_workers=1,
             mode="overwrite")


_MAPPED: dict[str, np.ndarray] = {}


def _lit_item(pair: tuple[str, int]) -> dict[str, object]:
    npy, i = pair
    if npy not in _MAPPED:
        _MAPPED[npy] = np.load(npy, mmap_mode="r")
    return {"x": np.array(_MAPPED[npy][i]), "i": i}


def loader(kind: str, url: str, cache: str, batch: int) -> object:
    import torch.utils.data

    if kind == "mds":
        from streaming import StreamingDataset

        ds = StreamingDataset(remote=url, local=cache, shuffle=True, shuffle_seed=0,
                              batch_size=batch)
        return torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=0)
    from litdata import StreamingDataLoader, StreamingDataset as LitDataset
    from litdata.streaming import downloader

    # LitData downloads chunks with obstore using fixed client options, which refuse a plain
    # http endpoint (the local server); allowing it keeps LitData on its own fastest path.
    downloader._OBSTORE_CLIENT_OPTIONS["allow_http"] = True  # type: ignore[index]

    lit = LitDataset(url, cache_dir=cache, shuffle=True, seed=0)
    return StreamingDataLoader(lit, batch_size=batch, num_workers=0)


def read(kind: str, url: str, cache: str, batch: int, npy: str) -> None:
    source = np.load(npy, mmap_mode="r")
    stream = loader(kind, url, cache, batch)
    figures = {}
    for label in ("cold", "warm"):
        samples = 0
        started = time.perf_counter()
        for got in stream:  # type: ignore[attr-defined]
            x, i = got["x"].numpy(), got["i"].numpy()
            if samples == 0 and not np.array_equal(x, source[i]):
                raise AssertionError(f"{kind} returned records that differ from the source")
            samples += len(x)
        figures[label] = samples / (time.perf_counter() - started)
        figures[f"{label}_samples"] = samples
    print(json.dumps(figures))


def main(argv: list[str]) -> int:
    if argv[0] == "write":
        write(argv[1], argv[2], int(argv[3]))
    elif argv[0] == "read":
        read(argv[1], argv[2], argv[3], int(argv[4]), argv[5])
    else:
        raise SystemExit(f"unknown command {argv[0]!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
