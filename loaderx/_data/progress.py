"""Progress of long conversions: one status line on a terminal, plain lines in a log, or yours.

``progress=`` of the converters takes:

- ``None`` (the default): a status line on stderr when stderr is a terminal, nothing otherwise;
- ``True`` / ``False``: always / never. On a terminal the line is redrawn in place; written to
  anything else (a log file, a pipe), each report is a plain line of its own;
- a callable ``fn(records_done, records_total, bytes_done)`` (total is None when unknown),
  called after every block and once at the end: plug in tqdm, rich or your logger.

A job that fails or is interrupted ends its status line (``with Progress(...)``), so that the
error starts on a line of its own.

On a terminal the line fits the window's width (read at every redraw, so a resize is followed),
never touches the last column (which would wrap), and ends with "erase to end of line", so a
shorter line leaves no stale characters behind. Redraws happen at most twice a second, and at
least once a second while a job runs (a thread redraws the rate and ETA when a block takes
long), so the line never stands still. Plain lines come at most every 5 seconds, and at least
that often too.

A step with no records to count (training a dictionary is one native call) is reported by
Elapsed: its label and the time it has taken so far, redrawn in the same way.

The command line ends every open status line before it reports Ctrl-C, and draws no more
(silence): a job it leaves running in a thread must not draw over its message.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Final, TextIO, TypeAlias

import numpy as np

from loaderx._os.event_flag import EventFlag
from loaderx._os.fork_safe_lock import ForkSafeLock

Callback: TypeAlias = Callable[[int, "int | None", int], None]
ProgressOption: TypeAlias = "bool | None | Callback"

INTERVAL_S: Final = 0.5
# Plain lines (a log, CI, a notebook) at most this often: a line each half second floods them.
LOG_INTERVAL_S: Final = 5.0
# While a job runs, its terminal line is redrawn at least this often (the ticker thread).
TICK_S: Final = 1.0
_MIB: Final = float(1 << 20)
_ERASE_LINE: Final = "\x1b[K"
_BAR_MIN: Final = 10
_BAR_MAX: Final = 40
_ELLIPSIS: Final = "..."
# A label cut below this many characters says nothing: it is left out instead.
_LABEL_MIN: Final = 8


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class _Screen:
    """What every status line of the process shares: the one left open on a terminal, and
    whether drawing was stopped (silence)."""

    lock: ForkSafeLock  # proof against a Ctrl-C as it is taken: the command prints after one
    open_stream: TextIO | None
    silent: bool

    def __init__(self) -> None:
        self.lock = ForkSafeLock()
        self.open_stream = None
        self.silent = False

    def write(self, stream: TextIO, text: str, leaves_open: bool) -> None:
        with self.lock:
            if self.silent:
                return
            stream.write(text)
            stream.flush()
            self.open_stream = stream if leaves_open else None

    def end_line(self, stream: TextIO) -> None:
        """Ends stream's open status line (if it is the open one)."""
        with self.lock:
            if self.open_stream is stream:
                self.open_stream = None
                stream.write("\n")
                stream.flush()


_SCREEN: Final = _Screen()


def silence() -> None:
    """Ends the open status line and draws nothing more until allow(): what the command does
    on Ctrl-C before its message, while the job may still be running in another thread."""
    with _SCREEN.lock:
        _SCREEN.silent = True
        stream = _SCREEN.open_stream
        _SCREEN.open_stream = None
        if stream is not None:
            stream.write("\n")
            stream.flush()


def allow() -> None:
    """Drawing as usual again (each command starts with it)."""
    with _SCREEN.lock:
        _SCREEN.silent = False


class _Ticker:
    """A daemon thread that calls redraw until stop(): first after `every` seconds, then after
    as many seconds as redraw returns (when the next redraw is due)."""

    _stop: EventFlag
    _thread: threading.Thread | None

    def __init__(self, every: float, redraw: Callable[[], float]) -> None:
        self._stop = EventFlag()
        self._every = every
        self._redraw = redraw
        self._thread = threading.Thread(target=self._run, name="loaderx-progress", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        wait = self._every
        while not self._stop.wait(wait):
            wait = self._redraw()

    def stop(self) -> None:
        self._stop.set()
        thread = self._thread
        self._thread = None
        if thread is not None and thread is not threading.current_thread():
            thread.join(self._every + 1.0)


def check_progress(progress: object) -> ProgressOption:
    """progress= as the converters take it, refused (TypeError) before any work when it is
    none of None, True, False or a callable: a string or a stream was taken for True, so
    progress="quiet" drew the status line, and progress=sys.stdout drew it on stderr."""
    if progress is None or isinstance(progress, (bool, np.bool_)):
        return None if progress is None else bool(progress)
    if callable(progress):
        return progress  # its signature cannot be checked here
    raise TypeError(
        "progress must be None, True, False or a callable fn(records_done, records_total, "
        f"bytes_done), got {progress!r}"
    )


def wanted(progress: ProgressOption, stream: TextIO | None = None) -> bool:
    """Whether to draw: the caller's explicit choice, else whether the stream is a terminal.

    A callback is the caller's own report, so nothing is drawn for it.
    """
    if callable(progress):
        return False
    if progress is not None:
        return bool(progress)
    return _is_terminal(sys.stderr if stream is None else stream)


def _clock(seconds: float) -> str:
    whole = int(seconds + 0.5)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def terminal_width(stream: TextIO) -> int:
    """Columns of the terminal behind stream (COLUMNS, then 80, when it cannot be asked or
    reports none: a new pseudo-terminal, a serial console say 0 until someone sets a size)."""
    try:
        columns = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):
        columns = 0
    return columns if columns > 0 else shutil.get_terminal_size().columns


def _bar(fraction: float, width: int) -> str:
    filled = min(width, int(fraction * width))
    return "[" + "#" * filled + "-" * (width - filled) + "]"


def _fit_label(label: str, room: int) -> str:
    """label cut from the left (the end of a path says the most) to at most room characters."""
    if len(label) <= room:
        return label
    if room <= len(_ELLIPSIS):
        return label[len(label) - max(room, 0):] if room > 0 else ""
    return _ELLIPSIS + label[len(label) - room + len(_ELLIPSIS):]


class Progress:
    """Counts records and bytes and reports them as the module docstring describes."""

    label: str
    total: int | None
    enabled: bool
    records: int
    nbytes: int
    interval: float
    _callback: Callback | None
    _stream: TextIO | None
    _started: float
    _drawn: float
    _ticker: _Ticker | None

    def __init__(
        self,
        label: str,
        total: int | None,
        progress: ProgressOption = None,
        stream: TextIO | None = None,
    ) -> None:
        self.label = label
        self.total = total
        self.enabled = wanted(progress, stream)
        self._callback = progress if callable(progress) else None
        self.records = 0
        self.nbytes = 0
        self._stream = stream
        self.interval = INTERVAL_S if _is_terminal(self._out()) else LOG_INTERVAL_S
        self._started = time.monotonic()
        self._drawn = 0.0
        self._ticker = None

    def _out(self) -> TextIO:
        return sys.stderr if self._stream is None else self._stream

    def __enter__(self) -> Progress:
        """Starts the redraws that keep the line moving while a block takes long."""
        if self.enabled:
            every = TICK_S if _is_terminal(self._out()) else LOG_INTERVAL_S
            self._ticker = _Ticker(every, lambda: self._tick(every))
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop_ticker()
        if kind is not None:
            self.abandon()

    def _tick(self, every: float) -> float:
        """Redraws if the last draw is `every` seconds old, and says when to look again: at
        that draw's age of `every`. Ticking at a fixed period instead let a line stand still
        for almost two periods: a block's draw just after a tick made the next tick too early
        to draw, and the one after it the first to draw."""
        now = time.monotonic()
        due = self._drawn + every
        if now < due:
            return due - now
        self._drawn = now
        self._draw("")
        return every

    def _stop_ticker(self) -> None:
        ticker = self._ticker
        self._ticker = None
        if ticker is not None:
            ticker.stop()

    def abandon(self) -> None:
        """Ends the status line of a job that failed or was interrupted, so that what follows
        (the error, a traceback, the shell's prompt) starts on a line of its own, not after the
        last redraw."""
        self._stop_ticker()
        _SCREEN.end_line(self._out())

    def _extras(self, elapsed: float) -> list[str]:
        """Rate and ETA, most important first (a narrow terminal drops them from the end)."""
        extras = [f"{self.nbytes / _MIB / max(elapsed, 1e-9):.1f} MiB/s"]
        if self.total is not None and 0 < self.records < self.total:
            extras.append(f"ETA {_clock(elapsed * (self.total - self.records) / self.records)}")
        return extras

    def line(self, width: int | None = None, suffix: str = "") -> str:
        """The report. Without a width, a plain sentence for logs; with one, fitted into
        width - 1 columns: label (cut from the left), bar, percentage, counts, rate, ETA."""
        elapsed = time.monotonic() - self._started
        extras = self._extras(elapsed)
        known = self.total is not None and self.total > 0
        if width is None:
            count = f"{self.records:,}" + (f"/{self.total:,}" if self.total is not None else "")
            count += " records" + (f" ({self._percent():.1f}%)" if known else "")
            return f"{self.label}: " + ", ".join([count, *extras]) + suffix
        room = max(1, width - 1)
        count = f"{self.records:,}" + (f"/{self.total:,}" if self.total is not None else " records")
        if known:
            count = f"{self._percent():.1f}% {count}"
        stats = ", ".join([count, *extras]) + suffix
        while extras and len(stats) > room:
            extras.pop()
            stats = ", ".join([count, *extras]) + suffix
        rest = room - len(stats)
        bar_room = _BAR_MIN + 1 if known and rest - _BAR_MIN - 3 >= _LABEL_MIN else 0
        label_room = rest - bar_room - 2
        label = _fit_label(self.label, label_room) if label_room >= _LABEL_MIN else ""
        head = f"{label}: " if label else ""
        if bar_room and self.total:
            inner = min(_BAR_MAX, room - len(head) - len(stats) - 3)
            head += _bar(self.records / self.total, inner) + " "
        return (head + stats)[:room]

    def _percent(self) -> float:
        return 100.0 * self.records / self.total if self.total else 0.0

    def update(self, records: int, nbytes: int) -> None:
        """Adds records and bytes done; reports if enough time has passed since the last one."""
        self.records += records
        self.nbytes += nbytes
        if self._callback is not None:
            self._callback(self.records, self.total, self.nbytes)
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._drawn >= self.interval:
            self._drawn = now
            self._draw("")

    def finish(self) -> None:
        """The final report (with the total time), ending the line."""
        self._stop_ticker()
        if self._callback is not None:
            self._callback(self.records, self.total, self.nbytes)
        if self.enabled:
            self._draw(f", done in {_clock(time.monotonic() - self._started)}", final=True)

    def _draw(self, suffix: str, final: bool = False) -> None:
        stream = self._out()
        if _is_terminal(stream):
            text = "\r" + self.line(terminal_width(stream), suffix) + _ERASE_LINE
            _SCREEN.write(stream, text + ("\n" if final else ""), leaves_open=not final)
        else:
            _SCREEN.write(stream, self.line(None, suffix) + "\n", leaves_open=False)


class Elapsed:
    """A step without records to count (training a dictionary): its label and the time it has
    taken, redrawn while it runs as Progress redraws its line (module docstring), then "done
    in". Use it as a context manager around the step."""

    label: str
    enabled: bool
    _stream: TextIO | None
    _started: float
    _ticker: _Ticker | None

    def __init__(self, label: str, progress: ProgressOption = None,
                 stream: TextIO | None = None) -> None:
        self.label = label
        self.enabled = wanted(progress, stream)
        self._stream = stream
        self._started = time.monotonic()
        self._ticker = None

    def _out(self) -> TextIO:
        return sys.stderr if self._stream is None else self._stream

    def line(self, width: int | None, suffix: str) -> str:
        """"label: 0:00:12 elapsed" (or the suffix), fitted into width - 1 columns if given."""
        state = suffix or f"{_clock(time.monotonic() - self._started)} elapsed"
        if width is None:
            return f"{self.label}: {state}"
        room = max(1, width - 1)
        label_room = room - len(state) - 2
        label = _fit_label(self.label, label_room) if label_room >= _LABEL_MIN else ""
        return ((f"{label}: " if label else "") + state)[:room]

    def _draw(self, suffix: str = "", final: bool = False) -> None:
        stream = self._out()
        if _is_terminal(stream):
            text = "\r" + self.line(terminal_width(stream), suffix) + _ERASE_LINE
            _SCREEN.write(stream, text + ("\n" if final else ""), leaves_open=not final)
        else:
            _SCREEN.write(stream, self.line(None, suffix) + "\n", leaves_open=False)

    def _redraw(self, every: float) -> float:
        self._draw()
        return every

    def __enter__(self) -> Elapsed:
        if self.enabled:
            self._started = time.monotonic()
            self._draw()
            every = TICK_S if _is_terminal(self._out()) else LOG_INTERVAL_S
            self._ticker = _Ticker(every, lambda: self._redraw(every))
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        ticker = self._ticker
        self._ticker = None
        if ticker is None:
            return
        ticker.stop()
        if kind is None:
            self._draw(f"done in {_clock(time.monotonic() - self._started)}", final=True)
        else:
            _SCREEN.end_line(self._out())
