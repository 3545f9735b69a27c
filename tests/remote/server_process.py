"""A test server as a child process: what moto's S3 server (s3_server.py) and Azurite
(azurite_server.py) share. A free port on 127.0.0.1, a start that tries a few ports and waits
until the server answers, a stop that terminates it (then kills it if it lingers), its log, and
a server that dies with the test process whatever happens to the fixtures.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Final, Self

HOST: Final = "127.0.0.1"
# Either server starts in a second or two; a loaded machine (2 cores, several workers) can take
# far longer.
READY_TIMEOUT_S: Final = 60.0
STOP_TIMEOUT_S: Final = 10.0
# A freely chosen port can be taken between our probe and the server's bind: try a few.
START_ATTEMPTS: Final = 3
LOG_TAIL_CHARS: Final = 4000


class ServerError(RuntimeError):
    """A test server did not start, or its kit was used wrongly."""


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on right now (the OS picks it for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def without_variables(prefixes: tuple[str, ...]) -> dict[str, str]:
    """This process's environment without the variables whose names start with `prefixes`: a
    server never sees the developer's own credentials or endpoints."""
    return {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}


class ServerProcess:
    """One server process on 127.0.0.1:`port`, started by `_start()` and stopped by `stop()`; a
    context manager that starts it and closes it. A subclass names the server in messages
    (`label`), says how to run it (`_command`, `_environment`, `_work_dir`), how to tell that it
    answers (`_answers`) and what `close()` removes besides stopping it."""

    label = "the server"

    def __init__(self, port: int, log_path: Path) -> None:
        self.port = port
        self.log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.close()  # __exit__ does not run when __enter__ raises
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    def start(self) -> None:
        self._start(other_port_allowed=True)

    def stop(self) -> None:
        """Stops the server (terminate, then kill if it lingers); a stopped server stays so."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def close(self) -> None:
        self.stop()

    def log_tail(self) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return text[-LOG_TAIL_CHARS:]

    def _start(self, *, other_port_allowed: bool) -> None:
        """Launches the server and waits until it answers, on another free port when the
        chosen one was taken (if `other_port_allowed`)."""
        if self.running:
            raise ServerError(f"{self.label} at {self.endpoint} is already running")
        for attempt in range(START_ATTEMPTS):
            self._launch()
            try:
                self._wait_ready()
                return
            except ServerError:
                self.stop()
                if not other_port_allowed or attempt == START_ATTEMPTS - 1:
                    raise
                self.port = free_port()

    def _launch(self) -> None:
        # A test process that dies without its fixtures' teardown (a crash, a SIGKILL) must
        # not leave the server running: Linux stops it with its parent (_die_with_parent).
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                self._command(), cwd=self._work_dir(), stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, env=self._environment(), preexec_fn=_die_with_parent)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise ServerError(f"{self.label} exited with status {self._process.returncode} "
                                  f"before answering on {self.endpoint}; its log:\n{self.log_tail()}")
            if self._answers():
                return
            time.sleep(0.05)
        raise ServerError(f"{self.label} did not answer on {self.endpoint} within "
                          f"{READY_TIMEOUT_S:.0f} s; its log:\n{self.log_tail()}")

    def _command(self) -> Sequence[str]:
        raise NotImplementedError

    def _environment(self) -> Mapping[str, str]:
        raise NotImplementedError

    def _work_dir(self) -> Path | None:
        return None

    def _answers(self) -> bool:
        raise NotImplementedError


def _die_with_parent() -> None:
    """In the server's process, before it runs: SIGTERM when the process that started it
    dies (Linux's PR_SET_PDEATHSIG; elsewhere nothing, and the fixtures' stop() remains)."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
