"""Running one command: its exit status for every outcome, and what Ctrl-C left behind."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Final, TextIO

from loaderx._data.progress import allow, silence
from loaderx.cli.exits import EXIT_INTERRUPTED, EXIT_OK, EXIT_PROBLEM, Problem
from loaderx.cli.job import Job
from loaderx.cli.parser import build_parser
from loaderx.errors import LoaderxError

# What Ctrl-C leaves behind, by command: the writing commands stage or move record by record,
# so an interruption never leaves a half-written store; the others write nothing.
_INTERRUPTED: Final = {
    "convert": "a destination not reported done was left as it was",
    "recode": "the destination was left as it was",
    "compact": "the store is whole (compact moves one record at a time; run it again to "
               "finish)",
}


# Commands left running inside a native call after Ctrl-C (Job.abandoned).
_ABANDONED: Final[list[Job]] = []


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Runs one command; returns the exit status (argparse exits with 2 on a usage error)."""
    args = build_parser().parse_args(argv)
    stream = sys.stdout if out is None else out
    if stream is None:
        # Started with stdout closed (`loaderx info x >&-`): Python leaves sys.stdout None and
        # print() drops every line, so a command would run and report nothing.
        print(f"loaderx {args.command}: standard output is closed; nothing was done",
              file=sys.stderr)
        return EXIT_PROBLEM
    allow()
    job = Job(args, stream)
    try:
        status: int = job.result()
        stream.flush()
        return status
    except KeyboardInterrupt:
        if job.abandoned:
            _ABANDONED.append(job)
        silence()  # ends a status line left open, and stops the job's redraws
        left = _INTERRUPTED.get(args.command)
        print(f"loaderx {args.command}: interrupted" + (f"; {left}" if left else ""),
              file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`loaderx head ... | head -3`): not a problem with the store.
        # Point stdout at /dev/null so that the interpreter's final flush stays quiet.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except FileExistsError as error:
        text = str(error).replace("overwrite=True", "--overwrite")
        print(f"loaderx {args.command}: {text}", file=sys.stderr)
        return EXIT_PROBLEM
    except MemoryError as error:
        # NumPy's says how much it wanted (`head -n 100000` of 1 MiB records: 98 GiB).
        print(f"loaderx {args.command}: out of memory ({error})", file=sys.stderr)
        return EXIT_PROBLEM
    except (Problem, LoaderxError, OSError) as error:
        print(f"loaderx {args.command}: {error}", file=sys.stderr)
        return EXIT_PROBLEM


def entry_point() -> None:
    """The console script: exit with main()'s status. After Ctrl-C in a long native call
    the process ends at once, leaving that call behind (loaderx.cli.job)."""
    status = main()
    if _ABANDONED:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
        os._exit(status)
    sys.exit(status)
