"""The command line: one argparse subcommand per command, wired to the function that runs it."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TextIO

from loaderx import __version__
from loaderx._store.schema import CODEC_NAMES
from loaderx.cli.arguments import dict_size_option, int_option, seconds_option
from loaderx.cli.bench import BENCH_RECORDS_MAX, cmd_bench
from loaderx.cli.convert import cmd_convert, cmd_recode
from loaderx.cli.inspection import cmd_head, cmd_info, cmd_stats, cmd_verify
from loaderx.cli.maintenance import cmd_compact


def build_parser() -> argparse.ArgumentParser:
    """The `loaderx` parser: each subcommand's `run` default is the function that runs it."""
    parser = argparse.ArgumentParser(
        prog="loaderx",
        description="Inspect, convert and check loaderx datasets and Zrecord stores.",
        epilog="Exit status: 0 all is well, 1 a problem was found, 2 usage error, 130 "
               "interrupted (Ctrl-C).",
    )
    # As git, zstd and pip do: the program's name and version on stdout, exit status 0.
    parser.add_argument("--version", action="version", version=f"loaderx {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, summary: str, run: Callable[[argparse.Namespace, TextIO], int]
                ) -> argparse.ArgumentParser:
        made = sub.add_parser(name, help=summary, description=summary)
        made.set_defaults(run=run)
        return made

    info = command("info", "kind, dtype, shape, codec, records, bytes and compression ratio",
                   cmd_info)
    info.add_argument("path")
    info.add_argument("--json", action="store_true", help="print JSON")

    stats = command("stats", "the store's record and byte counts, record sizes", cmd_stats)
    stats.add_argument("path")
    stats.add_argument("--json", action="store_true", help="print JSON")

    head = command("head", "the first records, printed as NumPy prints them", cmd_head)
    head.add_argument("path")
    head.add_argument("-n", type=int_option(0), default=5, help="how many records (default 5)")

    verify = command("verify", "check every record (table against chunks, checksums, frames) "
                     "in parallel; exit 1 listing the bad records", cmd_verify)
    verify.add_argument("path")
    verify.add_argument("--json", action="store_true", help="print JSON")
    verify.add_argument("--progress", action="store_true",
                        help="the time taken so far on stderr even when it is not a terminal")

    for name, summary, run in (
        ("convert", "a .npy (memory-mapped) or .npz file into datasets (an .npz: one per array, "
         "in DEST/<name>), or a Parquet file or folder (one per column, in DEST/<column>; "
         "needs pyarrow)", cmd_convert),
        ("recode", "a dataset into another with another codec", cmd_recode),
    ):
        made = command(name, summary, run)
        made.add_argument("source")
        made.add_argument("dest")
        made.add_argument("--codec", default="zstd", choices=CODEC_NAMES)
        made.add_argument("--dict-size", type=dict_size_option, default="balanced",
                          help="zstd_dict dictionary: small, balanced, max or a byte count")
        made.add_argument("--overwrite", action="store_true",
                          help="replace an existing store at DEST (only ever a loaderx store)")
        shown = made.add_mutually_exclusive_group()
        shown.add_argument("--quiet", action="store_true", help="no progress line")
        shown.add_argument("--progress", action="store_true",
                           help="progress even when stderr is not a terminal (a log, CI, a "
                           "notebook): a plain line every few seconds")

    compact = command("compact", "reclaim the bytes of deleted records, in place (offline)",
                      cmd_compact)
    compact.add_argument("path")

    bench = command("bench", "this dataset's random-gather speed next to a NumPy memmap of the "
                    "same records", cmd_bench)
    bench.add_argument("path")
    bench.add_argument("--batch", type=int_option(1), default=256,
                       help="records per batch (default 256)")
    bench.add_argument("--records", type=int_option(1), default=BENCH_RECORDS_MAX,
                       help=f"use the first N records (default {BENCH_RECORDS_MAX:,})")
    bench.add_argument("--rounds", type=int_option(1), default=5,
                       help="interleaved rounds (default 5)")
    bench.add_argument("--seconds", type=seconds_option, default=0.3,
                       help="seconds per contender and round (default 0.3)")
    bench.add_argument("--tmp", default=None, help="folder for the temporary .npy copy")
    bench.add_argument("--json", action="store_true", help="print JSON")
    return parser
