"""Trains a small CNN with PyTorch on batches from loaderx (torch.from_numpy: zero copy).

    pip install torch==2.13.0        # the version this project tests against
    python examples/torch_train.py --steps 200

Without --data it makes a small image set (loaderx.demo.synthetic_images), converts it with
from_numpy into a temporary folder and trains on that; with --data DIR it expects DIR/train_data
and DIR/train_label written by from_numpy, as in the Quick Start. The model follows the
Data2Latent layout: convolutions, a 2-D latent, then class logits.

The loader hands over plain NumPy arrays made for each step, so torch.from_numpy shares their
memory instead of copying; the loader's threads gather the next batches while the model trains.
At the end the script prints the checkpoint, (seed, step), that resumes the data stream exactly.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from loaderx.converter import from_numpy
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset
from loaderx.demo import synthetic_images


class LatentCNN(nn.Module):
    """Half resolution, two convolution blocks, a global average, a 2-D latent, then logits."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.AvgPool2d(2),
            nn.Conv2d(3, 16, kernel_size=3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, kernel_size=3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        )
        self.embed = nn.Linear(32, 2)
        self.logits = nn.Linear(2, classes)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        latent = self.embed(self.features(x).mean(dim=(2, 3)))
        return latent, self.logits(latent)


def collate(batch: dict[str, np.ndarray[Any, Any]]) -> dict[str, Any]:
    """Runs on the loader's threads: NHWC uint8 images become NCHW float32 in [0, 1]."""
    images = batch["data"].transpose(0, 3, 1, 2).astype(np.float32)
    images *= 1.0 / 255.0
    return {"data": images, "label": batch["label"]}


def make_dataset(folder: Path, records: int) -> None:
    images, labels = synthetic_images(records, seed=1)
    from_numpy(folder / "train_data", images, codec="zstd")
    from_numpy(folder / "train_label", labels, codec="raw")


def train(folder: Path, args: argparse.Namespace) -> None:
    torch.manual_seed(args.seed)
    model = LatentCNN()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    streams = {
        "data": DenseDataset(folder / "train_data"),
        "label": DenseDataset(folder / "train_label"),
    }
    losses: list[float] = []
    started = time.perf_counter()
    with DataLoader(
        streams, batch_size=args.batch_size, transform=collate, seed=args.seed,
        start_step=args.start_step,
    ) as loader:
        for batch in loader:
            images = torch.from_numpy(batch["data"])  # shares the loader's array, no copy
            labels = torch.from_numpy(batch["label"])
            _latent, logits = model(images)
            loss = loss_fn(logits, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            done = loader.step - args.start_step
            if done % args.log_every == 0 or done == args.steps:
                print(f"step {loader.step}: loss {losses[-1]:.4f}", flush=True)
            if done >= args.steps:
                break
        checkpoint = (loader.seed, loader.step)
    elapsed = time.perf_counter() - started
    for dataset in streams.values():
        dataset.close()
    window = max(1, len(losses) // 5)
    first = sum(losses[:window]) / window
    last = sum(losses[-window:]) / window
    print(f"trained {len(losses)} steps in {elapsed:.1f} s; mean loss first {first:.4f} "
          f"last {last:.4f}; resume with seed={checkpoint[0]} start_step={checkpoint[1]}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--records", type=int, default=2048)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--start-step", type=int, default=0)
    parser.add_argument("--log-every", type=int, default=50)
    parser.add_argument("--data", default=None, help="folder with train_data and train_label")
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    if args.data is not None:
        train(Path(args.data), args)
        return
    with tempfile.TemporaryDirectory(prefix="loaderx-torch-") as tmp:
        make_dataset(Path(tmp), args.records)
        train(Path(tmp), args)


if __name__ == "__main__":
    main()
