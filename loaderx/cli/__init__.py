"""The `loaderx` command (also `python -m loaderx`): inspect, convert and check stores.

A thin layer over the public API. Every subcommand has --help; the exit status is 0 when all
is well, 1 when a problem was found (a store that cannot be opened, a failed check), 2 for
a usage error (argparse's own convention) and 130 after Ctrl-C. Subcommands whose output is
data take --json.

Modules, one job each: parser (the subcommands and their options), command (running one, its
exit status), job (the thread it runs in, so that Ctrl-C is prompt), inspection (info, stats, head, verify), convert (convert, recode) over npz (the
.npz reader), maintenance (compact), bench (the gather benchmark); stores, arguments, sizes and
exits are what they share.
"""

from __future__ import annotations

from loaderx.cli.command import entry_point, main
from loaderx.cli.exits import EXIT_INTERRUPTED, EXIT_OK, EXIT_PROBLEM, EXIT_USAGE
from loaderx.cli.parser import build_parser

__all__ = [
    "build_parser", "entry_point", "main", "EXIT_OK", "EXIT_PROBLEM", "EXIT_USAGE",
    "EXIT_INTERRUPTED",
]
