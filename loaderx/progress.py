"""A tiny progress line for long conversions: records done, MiB/s and ETA, written to stderr.

Quiet unless the caller asks for it (progress=True) or, when the caller leaves it to us
(progress=None), stderr is a terminal. The line is redrawn at most a few times a second.
"""

from __future__ import annotations

import sys
import time
from typing import Final, TextIO

_INTERVAL_S: Final = 0.5
_MIB: Final = float(1 << 20)


def wanted(progress: bool | None, stream: TextIO | None = None) -> bool:
    """Whether to report: the caller's explicit choice, else whether the stream is a terminal."""
    if progress is not None:
        return bool(progress)
    target = sys.stderr if stream is None else stream
    try:
        return target.isatty()
    except (AttributeError, ValueError):
        return False


def _clock(seconds: float) -> str:
    whole = int(seconds + 0.5)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


class Progress:
    """Counts records and bytes and redraws one status line while enabled."""

    label: str
    total: int | None
    enabled: bool
    records: int
    nbytes: int
    _stream: TextIO | None
    _started: float
    _drawn: float

    def __init__(
        self,
        label: str,
        total: int | None,
        progress: bool | None = None,
        stream: TextIO | None = None,
    ) -> None:
        self.label = label
        self.total = total
        self.enabled = wanted(progress, stream)
        self.records = 0
        self.nbytes = 0
        self._stream = stream
        self._started = time.monotonic()
        self._drawn = 0.0

    def line(self) -> str:
        """The current status line (without the carriage return)."""
        elapsed = max(time.monotonic() - self._started, 1e-9)
        rate = self.nbytes / _MIB / elapsed
        text = f"{self.label}: {self.records:,}"
        if self.total is not None:
            text += f"/{self.total:,} records"
            if self.total > 0:
                text += f" ({100.0 * self.records / self.total:.1f}%)"
        else:
            text += " records"
        text += f", {rate:.1f} MiB/s"
        if self.total is not None and 0 < self.records < self.total:
            remaining = elapsed * (self.total - self.records) / self.records
            text += f", ETA {_clock(remaining)}"
        return text

    def update(self, records: int, nbytes: int) -> None:
        """Adds records and bytes done, redrawing the line if enough time has passed."""
        self.records += records
        self.nbytes += nbytes
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._drawn >= _INTERVAL_S:
            self._drawn = now
            self._write("\r" + self.line())

    def finish(self) -> None:
        """Draws the final line and ends it."""
        if self.enabled:
            elapsed = time.monotonic() - self._started
            self._write("\r" + self.line() + f", done in {_clock(elapsed)}\n")

    def _write(self, text: str) -> None:
        stream = sys.stderr if self._stream is None else self._stream
        stream.write(text)
        stream.flush()
