"""Side-by-side benchmarks of loaderx against the alternatives: `python3 build.py bench [LAYER...]`.

Layers: sampler, store, loader, ragged, scale, memory, shards, convert, parquet, or all (the
default), and
remote (not part of all: it starts an S3 server and a proxy, and runs its peers in their own
venv). The machine block comes
first, then one table per layer; every table's contenders are timed round-robin in this run and
compared with a reference measured in the same run. The peers live in a separate environment
per interpreter (.cache/bench-venv-cp311, ...) that this script creates on first use and
re-runs itself in; `--here` runs in the current interpreter instead, skipping whatever peer it
lacks. Examples:

    python3 build.py bench all --json bench.json --plot bench.png
    python3 build.py bench store --shape 256,256,3 --dict-tiers
    python3 build.py bench store --only zarr,h5py-gzip
    python3 build.py bench loader --transform augment --only loaderx,torch,grain
    python3 build.py bench loader --transform release --workers 2 --only 'loaderx raw,torch'
    python3 build.py bench ragged --report benchmarks/reports/ragged-loader.md
    python3 build.py bench sampler --report benchmarks/reports/sampler-run.md
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

# benchmarks/ for the layers package; the repository root so that loaderx is the working tree's
# (the bench venv also gets it through PYTHONPATH, --here relies on this line).
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from layers import data, env, machine, markdown, workdir  # noqa: E402
from layers.report import Report, render_machine  # noqa: E402

LAYERS = ("sampler", "store", "loader", "ragged", "scale", "memory", "shards", "convert", "parquet",
          "remote")
# Layers that "all" leaves out; the remote layer also runs in the project's own environment
# (obstore, moto), never in the bench venv: its peers have a venv of their own.
NOT_IN_ALL = ("remote",)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="build.py bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("layers", nargs="*", default=["all"],
                        help=f"any of {', '.join(LAYERS)}, or all")
    parser.add_argument("--only", type=lambda s: [p for p in s.split(",") if p], default=None,
                        help="comma-separated contenders (slugs such as loaderx, h5py-gzip, "
                             "zarr, torch, grain); heavy ones run only when named here")
    parser.add_argument("--shape", type=data.parse_shape, default=(64, 64, 3),
                        help="record shape of uint8 (default 64,64,3 = 12 KiB)")
    parser.add_argument("--records", type=int, default=10_000, help="records per store")
    parser.add_argument("--batch", type=int, default=256, help="records per batch")
    parser.add_argument("--sweep-mib", type=int, default=512,
                        help="MiB of data per record size in the store layer's record-size "
                             "sweep (default 512: far out of the CPU caches)")
    parser.add_argument("--no-sweep", action="store_true",
                        help="store layer without the record-size sweep")
    parser.add_argument("--dict-tiers", action="store_true",
                        help="one zstd_dict row per DICT_TIERS tier")
    parser.add_argument("--transform", choices=("none", "augment", "release"), default="none",
                        help="loader transform: none, augment (a Python-bound per-sample loop) "
                             "or release (whole-batch NumPy calls that release the GIL)")
    parser.add_argument("--workers", type=lambda s: [int(p) for p in s.split(",")],
                        default=[0, 2, 4], help="torch num_workers values (default 0,2,4)")
    parser.add_argument("--big", action="store_true",
                        help="memory and parquet layers over 4 GiB, not 1 GiB")
    parser.add_argument("--shard-records", type=int, default=1024,
                        help="shards layer: records per shard of the gather and loader tables "
                             "(64 shards; default 1024: 12 MiB shards of 12 KiB records)")
    parser.add_argument("--lookup-records", type=int, default=100_000_000,
                        help="shards layer: the large record count of the lookup table")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per table")
    parser.add_argument("--block", type=float, default=0.2, help="seconds per timed block")
    parser.add_argument("--tiny", action="store_true",
                        help="minimal sizes: checks the harness end to end, measures nothing")
    parser.add_argument("--json", type=Path, help="write every figure to this JSON file")
    parser.add_argument("--report", type=Path,
                        help="write the run as a Markdown report to this file: the command, "
                             "commit, machine, load before and after, date, then every table")
    parser.add_argument("--plot", type=Path,
                        help="draw the store, record-size sweep and loader tables (PNG)")
    parser.add_argument("--here", action="store_true",
                        help="run in this interpreter; do not create or use the bench venv")
    parser.add_argument("--retry-peers", action="store_true",
                        help="retry installing peers whose install failed before")
    parser.add_argument("--remote-records", type=int, default=4000,
                        help="remote layer: records in the dataset on the S3 server (default "
                             "4000: 47 MiB of 12 KiB records, about a second at 50 MB/s)")
    parser.add_argument("--no-peers", action="store_true",
                        help="remote layer without MosaicML Streaming and LitData (their venv)")
    parser.add_argument("--workdir", type=Path, default=env.ROOT / ".cache" / "bench-data")
    parser.add_argument("--keep", action="store_true", help="keep the stores written")
    args = parser.parse_args(argv)
    everything = tuple(layer for layer in LAYERS if layer not in NOT_IN_ALL)
    named = tuple(layer for layer in args.layers if layer != "all")
    chosen = (*everything, *named) if "all" in args.layers else named
    unknown = [layer for layer in chosen if layer not in LAYERS]
    if unknown:
        parser.error(f"unknown layer(s) {unknown}; choose from {', '.join(LAYERS)} or all")
    args.layers = [layer for layer in LAYERS if layer in chosen]
    if args.tiny:
        args.records, args.rounds, args.block = min(args.records, 512), 2, 0.01
        args.shard_records = min(args.shard_records, 8)
        args.remote_records = min(args.remote_records, 256)
        args.workers = [w for w in args.workers if w == 0]
    return args


def wanted_peers(args: argparse.Namespace) -> dict[str, str]:
    peers = dict(env.PEERS)
    for name, requirement in env.OPTIONAL_PEERS.items():
        if args.only and name in args.only:
            peers[name] = requirement
    return peers


def run_layers(args: argparse.Namespace, rep: Report) -> None:
    from layers import (convert, loader, memory, parquet, ragged, remote, sampler, scale, shards,
                        store)

    args.workdir.mkdir(parents=True, exist_ok=True)
    for layer in args.layers:
        started = time.monotonic()
        if layer == "sampler":
            sampler.run(args, rep)
        elif layer == "store":
            store.run(args, rep, args.workdir)
        elif layer == "loader":
            loader.run(args, rep, args.workdir)
        elif layer == "ragged":
            ragged.run(args, rep, args.workdir)
        elif layer == "scale":
            scale.run(args, rep, args.workdir)
        elif layer == "memory":
            memory.run(args, rep, args.workdir)
        elif layer == "shards":
            shards.run(args, rep, args.workdir)
        elif layer == "convert":
            convert.run(args, rep, args.workdir)
        elif layer == "parquet":
            parquet.run(args, rep, args.workdir)
        elif layer == "remote":
            remote.run(args, rep, args.workdir)
        print(f"({layer} layer took {time.monotonic() - started:.0f} s)\n", flush=True)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    in_own_env = set(args.layers) <= set(NOT_IN_ALL)
    if not args.here and not in_own_env and not env.inside_bench_venv():
        env.reexec([str(Path(__file__).resolve()), *argv], wanted_peers(args), args.retry_peers)
    started = time.monotonic()
    facts = markdown.start(argv)
    rep = Report(machine=machine.machine_rows())
    rep.settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    print(render_machine(rep.machine), end="\n\n", flush=True)
    if env.inside_bench_venv():
        for requirement, why in env.install_failures().items():
            rep.skip(requirement, why)
    # lance warns at every fork once imported; torch's workers fork after the store layer.
    warnings.filterwarnings("ignore", message="lance is not fork-safe")
    os.environ.setdefault("LANCE_LOG", "error")  # its Rust logger chats on stderr otherwise
    workdir.configure(args.workdir)
    try:
        run_layers(args, rep)
    finally:
        if not args.keep:
            workdir.discard(args.workdir)
            workdir.empty_trash_later()
    if args.tiny:
        print("(--tiny: sizes too small to mean anything; the issue targets are not judged)")
    elif rep.targets:
        print(rep.render_targets(), flush=True)
    if args.json:
        rep.write_json(args.json)
        print(f"wrote {args.json}")
    if args.report:
        facts.load_after = machine.one_minute_load()
        facts.seconds, facts.tiny = time.monotonic() - started, args.tiny
        markdown.write(args.report, rep, facts)
        print(f"wrote {args.report}")
    if args.plot:
        from layers import plot

        plot.draw(rep, args.plot)
    print(f"total {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
