"""Trains a small CNN with JAX on batches from loaderx, in the style of Data2Latent.

    pip install jax flax optax       # flax and optax are optional: without them, pure JAX
    python examples/jax_flax_train.py --steps 200

The model is the Data2Latent layout: convolutions at half resolution, a global average (layer
normalised), a 2-D latent, then class logits. With flax (the NNX API) and optax installed it is an nnx.Module
trained by an nnx.Optimizer with AdamW inside nnx.jit; otherwise the same network is written
with jax.lax and trained by a hand-written Adam inside jax.jit (--backend picks one explicitly).

The DataLoader is the whole input pipeline: its threads sample, gather and collate the next
batches while the jitted step runs, and loaderx.jax.device_prefetch keeps the next two batches
already on their way to the device, so the host-to-device copy of step k+1 overlaps step k.
The loop never waits for the device to log: losses stay device arrays and are read only at
--log-every steps (a float(loss) per step would serialise host and device). Without --data the script makes a small image set
(loaderx.demo.synthetic_images) in a temporary folder; with --data DIR it reads DIR/train_data
and DIR/train_label written by from_numpy, as in the Quick Start. The printed (seed, step) is a
checkpoint of the data stream: --seed and --start-step resume it exactly.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from loaderx.converter import from_numpy
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset
from loaderx.demo import synthetic_images
from loaderx.jax import device_prefetch

CLASSES = 10
StepFn = Callable[[dict[str, jax.Array]], jax.Array]


def collate(batch: dict[str, np.ndarray[Any, Any]]) -> dict[str, Any]:
    """Runs on the loader's threads: uint8 NHWC images become float32 in [-0.5, 0.5]."""
    images = batch["data"].astype(np.float32)
    images *= 1.0 / 255.0
    images -= 0.5
    return {"data": images, "label": batch["label"].astype(np.int32)}


def pool2(x: jax.Array) -> jax.Array:
    """2x2 max pooling of an NHWC batch with even sides."""
    n, h, w, c = x.shape
    return x.reshape(n, h // 2, 2, w // 2, 2, c).max(axis=(2, 4))


def half(x: jax.Array) -> jax.Array:
    """2x2 average pooling: the network works at half resolution."""
    n, h, w, c = x.shape
    return x.reshape(n, h // 2, 2, w // 2, 2, c).mean(axis=(2, 4))


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    log_probs = jax.nn.log_softmax(logits)
    return -jnp.take_along_axis(log_probs, labels[:, None], axis=1).mean()


# --- flax NNX + optax ----------------------------------------------------------------------


def flax_step_fn(seed: int, lr: float) -> StepFn:
    import optax
    from flax import nnx

    class LatentCNN(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.conv1 = nnx.Conv(3, 16, kernel_size=(3, 3), padding="SAME", rngs=rngs)
            self.conv2 = nnx.Conv(16, 32, kernel_size=(3, 3), padding="SAME", rngs=rngs)
            self.norm = nnx.LayerNorm(32, rngs=rngs)
            self.embed = nnx.Linear(32, 2, rngs=rngs)
            self.logits = nnx.Linear(2, CLASSES, rngs=rngs)

        def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
            x = pool2(nnx.relu(self.conv1(half(x))))
            x = nnx.relu(self.conv2(x)).mean(axis=(1, 2))
            latent = self.embed(self.norm(x))
            return latent, self.logits(latent)

    model = LatentCNN(nnx.Rngs(seed))
    try:  # flax >= 0.11 names what to optimise; older releases do not take wrt
        optimizer = nnx.Optimizer(model, optax.adamw(lr), wrt=nnx.Param)
        new_api = True
    except TypeError:
        optimizer = nnx.Optimizer(model, optax.adamw(lr))
        new_api = False

    def loss_fn(model: LatentCNN, batch: dict[str, jax.Array]) -> jax.Array:
        _latent, logits = model(batch["data"])
        return cross_entropy(logits, batch["label"])

    @nnx.jit
    def train_step(model: LatentCNN, optimizer: Any, batch: dict[str, jax.Array]) -> jax.Array:
        loss, grads = nnx.value_and_grad(loss_fn)(model, batch)
        if new_api:
            optimizer.update(model, grads)
        else:
            optimizer.update(grads)
        return loss

    def step(batch: dict[str, jax.Array]) -> jax.Array:
        return train_step(model, optimizer, batch)

    return step


# --- pure JAX --------------------------------------------------------------------------------

Params = dict[str, jax.Array]


def init_params(key: jax.Array) -> Params:
    keys = jax.random.split(key, 4)

    def he(k: jax.Array, shape: tuple[int, ...], fan_in: int) -> jax.Array:
        return jax.random.normal(k, shape, jnp.float32) * jnp.sqrt(2.0 / fan_in)

    return {
        "conv1_w": he(keys[0], (3, 3, 3, 16), 3 * 3 * 3), "conv1_b": jnp.zeros(16),
        "conv2_w": he(keys[1], (3, 3, 16, 32), 3 * 3 * 16), "conv2_b": jnp.zeros(32),
        "embed_w": he(keys[2], (32, 2), 32), "embed_b": jnp.zeros(2),
        "logits_w": he(keys[3], (2, CLASSES), 2), "logits_b": jnp.zeros(CLASSES),
    }


def conv(x: jax.Array, w: jax.Array, b: jax.Array) -> jax.Array:
    y = jax.lax.conv_general_dilated(
        x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )
    return y + b


def forward(params: Params, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    x = pool2(jax.nn.relu(conv(half(x), params["conv1_w"], params["conv1_b"])))
    x = jax.nn.relu(conv(x, params["conv2_w"], params["conv2_b"])).mean(axis=(1, 2))
    x = (x - x.mean(axis=1, keepdims=True)) / jnp.sqrt(x.var(axis=1, keepdims=True) + 1e-5)
    latent = x @ params["embed_w"] + params["embed_b"]
    return latent, latent @ params["logits_w"] + params["logits_b"]


def jax_step_fn(seed: int, lr: float) -> StepFn:
    params = init_params(jax.random.PRNGKey(seed))
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    state: list[Any] = [params, zeros, zeros, jnp.zeros((), jnp.float32)]

    def loss_fn(params: Params, images: jax.Array, labels: jax.Array) -> jax.Array:
        _latent, logits = forward(params, images)
        return cross_entropy(logits, labels)

    @jax.jit
    def train_step(
        params: Params, m: Params, v: Params, t: jax.Array, images: jax.Array, labels: jax.Array
    ) -> tuple[Params, Params, Params, jax.Array, jax.Array]:
        loss, grads = jax.value_and_grad(loss_fn)(params, images, labels)
        t = t + 1
        m = jax.tree_util.tree_map(lambda a, g: 0.9 * a + 0.1 * g, m, grads)
        v = jax.tree_util.tree_map(lambda a, g: 0.999 * a + 0.001 * g * g, v, grads)
        m_scale = 1.0 / (1.0 - 0.9**t)
        v_scale = 1.0 / (1.0 - 0.999**t)
        params = jax.tree_util.tree_map(
            lambda p, a, b: p - lr * (a * m_scale) / (jnp.sqrt(b * v_scale) + 1e-8), params, m, v
        )
        return params, m, v, t, loss

    def step(batch: dict[str, jax.Array]) -> jax.Array:
        *new_state, loss = train_step(*state, batch["data"], batch["label"])
        state[:] = new_state
        return loss

    return step


# --- the loop --------------------------------------------------------------------------------


def make_dataset(folder: Path, records: int) -> None:
    images, labels = synthetic_images(records, seed=1)
    from_numpy(folder / "train_data", images, codec="zstd")
    from_numpy(folder / "train_label", labels, codec="raw")


def pick_backend(name: str) -> str:
    if name != "auto":
        return name
    try:
        import flax.nnx  # noqa: F401
        import optax  # noqa: F401
    except ImportError:
        return "jax"
    return "flax"


def train(folder: Path, args: argparse.Namespace) -> None:
    backend = pick_backend(args.backend)
    make_step = flax_step_fn if backend == "flax" else jax_step_fn
    train_step = make_step(args.seed, args.lr)
    streams = {
        "data": DenseDataset(folder / "train_data"),
        "label": DenseDataset(folder / "train_label"),
    }
    losses: list[jax.Array] = []
    started = time.perf_counter()
    loader = DataLoader(
        streams, batch_size=args.batch_size, transform=collate, seed=args.seed,
        start_step=args.start_step,
    )
    # Leaving device_prefetch's block leaves the loader open (it is ours): close it with ours.
    with loader, device_prefetch(loader, size=2) as batches:
        for batch in batches:
            losses.append(train_step(batch))  # dispatched; nothing waits for the device here
            done = batches.step - args.start_step
            if done % args.log_every == 0 or done == args.steps:
                print(f"step {batches.step}: loss {float(losses[-1]):.4f}", flush=True)
            if done >= args.steps:
                break
        checkpoint = (batches.state_dict()["seed"], batches.step)
    elapsed = time.perf_counter() - started
    for dataset in streams.values():
        dataset.close()
    values = np.asarray(jnp.stack(losses))  # one transfer for the whole run
    window = max(1, len(values) // 5)
    first = float(values[:window].mean())
    last = float(values[-window:].mean())
    print(f"[{backend}] trained {len(losses)} steps in {elapsed:.1f} s; mean loss first "
          f"{first:.4f} last {last:.4f}; resume with seed={checkpoint[0]} "
          f"start_step={checkpoint[1]}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--records", type=int, default=2048)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--start-step", type=int, default=0)
    parser.add_argument("--log-every", type=int, default=50)
    parser.add_argument("--backend", choices=("auto", "flax", "jax"), default="auto")
    parser.add_argument("--data", default=None, help="folder with train_data and train_label")
    args = parser.parse_args(argv)
    if args.data is not None:
        train(Path(args.data), args)
        return
    with tempfile.TemporaryDirectory(prefix="loaderx-jax-") as tmp:
        make_dataset(Path(tmp), args.records)
        train(Path(tmp), args)


if __name__ == "__main__":
    main()
