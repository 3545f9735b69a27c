"""The command's exit statuses and Problem, the one-line failure that ends a run with status 1."""

from __future__ import annotations

from typing import Final

EXIT_OK: Final = 0
EXIT_PROBLEM: Final = 1
EXIT_USAGE: Final = 2
# 128 + SIGINT, as shells report a command stopped by Ctrl-C.
EXIT_INTERRUPTED: Final = 130


class Problem(Exception):
    """Something the user should hear about in one line, with exit status 1."""
