"""Checks the tests of every server kit share: whether a process lives, whether a port listens,
and that a kit's server started and closed leaves no process, no listener and no files."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from .server_process import HOST, ServerProcess


def process_exists(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie would be one we forgot to wait for)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


def accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1.0):
            return True
    except OSError:
        return False


def assert_leaves_nothing(server: ServerProcess, files: Path) -> None:
    """Runs `server` as a context manager, checking it serves inside, and that afterwards its
    process, its port and `files` (its log or work folder) are gone; stopping again is harmless."""
    with server:
        pid = server.pid
        assert pid is not None and server.running and process_exists(pid)
        assert accepts_connections(server.port)
        assert files.exists()
    assert not server.running and server.pid is None
    assert not process_exists(pid)
    assert not accepts_connections(server.port)
    assert not files.exists()
    server.stop()
    assert not server.running
