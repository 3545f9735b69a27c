"""Tests for loaderx._data.progress: in a real pseudo-terminal of 40, 80 and 120 columns, in logs and
through a user's callback."""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loaderx.converter import from_iterator, from_numpy, recode
from loaderx.dataset import DenseDataset
from loaderx._data.progress import Progress

ROOT = Path(__file__).resolve().parents[2]

# Draws lines that first grow, then shrink (a falling rate, a vanishing ETA), then a conversion
# with progress left to its default, which must detect the terminal by itself.
CHILD = r"""
import sys, numpy as np
from loaderx._data.progress import Progress
from loaderx.converter import from_iterator, from_numpy
report = Progress("convert images", 100_000)
report.interval = 0.0
for done, nbytes, age in [(1, 1 << 50, 1000.0), (39_999, 1 << 40, 3.0), (59_000, 1 << 20, 3000.0), (1_000, 0, 3000.0)]:
    report._started -= age
    report.update(done, nbytes)
report.finish()
from_numpy(sys.argv[1] + "/auto", np.zeros((300, 1000), dtype=np.uint8), chunk_bytes=20_000)
"""


def run_in_terminal(columns: int, folder: Path) -> bytes:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("COLUMNS", None)
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(folder)], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=slave, env=env)
    os.close(slave)
    output = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        output += chunk
    os.close(master)
    assert child.wait(timeout=120) == 0
    return output


def screen_of(output: str, columns: int) -> list[str]:
    """What a terminal shows after output: carriage return, newline and erase-to-end-of-line,
    checking that nothing is ever written into the last column (where the terminal wraps)."""
    lines = [""]
    column = 0
    position = 0
    while position < len(output):
        char = output[position]
        if output.startswith("\x1b[K", position):
            lines[-1] = lines[-1][:column]
            position += 3
            continue
        if char == "\r":
            column = 0
        elif char == "\n":
            lines.append("")
            column = 0
        else:
            assert char.isprintable(), repr(char)
            assert column < columns - 1, f"wrote into column {column + 1} of {columns}: wraps"
            line = lines[-1].ljust(column)
            lines[-1] = line[:column] + char + line[column + 1:]
            column += 1
        position += 1
    return lines


@pytest.mark.parametrize("columns", [40, 80, 120])
def test_redraws_cleanly_within_the_terminal_width(columns: int, tmp_path: Path) -> None:
    output = run_in_terminal(columns, tmp_path).decode()
    assert output.count("\r\n") == 2  # one finished line per job: no stack of wrapped lines
    screen = [line for line in screen_of(output, columns) if line]
    assert len(screen) == 2
    first, second = screen
    # The first job's redraws shrink at the end (the ETA goes, the rate falls); the screen must
    # show exactly the last one, with nothing stale after it.
    draws = [d.replace("\x1b[K", "") for d in output.split("\r\n")[0].split("\r") if d]
    assert len(draws) == 5 and max(len(d) for d in draws) <= columns - 1
    if columns >= 120:  # narrower, the bar takes up the slack and every draw is equally long
        assert any(len(later) < len(earlier) for earlier, later in zip(draws, draws[1:]))
    # After every redraw, and not only the last, the terminal shows exactly that draw.
    job = output.split("\r\n")[0]
    ends = [i for i in range(1, len(job)) if job[i] == "\r"] + [len(job)]
    assert [screen_of(job[:end], columns)[-1] for end in ends] == draws
    assert first == draws[-1]
    assert "100.0% 100,000/100,000, " in first and first.endswith(", done in 1:56:43")
    assert "300/300" in second and "done in" in second
    if columns >= 80:
        assert "auto: [########" in second  # the label keeps the end of the path
    assert (tmp_path / "auto").is_dir()


def test_logs_get_plain_lines_and_callbacks_get_counts(tmp_path: Path) -> None:
    log = io.StringIO()
    report = Progress("job", 10, True, log)
    report.interval = 0.0
    report.update(4, 400)
    report.finish()
    lines = log.getvalue().splitlines()
    assert lines[0].startswith("job: 4/10 records (40.0%), ") and "\r" not in log.getvalue()
    assert lines[1].startswith("job: 4/10 records (40.0%), ") and "done in" in lines[1]
    calls: list[tuple[int, int | None, int]] = []
    data = np.arange(1000, dtype=np.int64)
    from_numpy(tmp_path / "x", data, chunk_bytes=800,
               progress=lambda done, total, nbytes: calls.append((done, total, nbytes)))
    assert calls[0] == (100, 1000, 800)
    assert calls[-2] == calls[-1] == (1000, 1000, 8000)  # the last block, then finish()
    assert [c[0] for c in calls[:-1]] == list(range(100, 1001, 100))


def test_a_terminal_that_reports_no_width_gets_80_columns(tmp_path: Path) -> None:
    """A pseudo-terminal whose size nobody set reports 0 columns: the line used to be cut to a
    single character ("\\r1\\x1b[K"); it is drawn for 80 columns, as shutil does."""
    output = run_in_terminal(0, tmp_path).decode()
    screen = [line for line in screen_of(output, 80) if line]
    assert len(screen) == 2
    assert "images: [####" in screen[0] and screen[0].endswith(", done in 1:56:43")
    assert "auto: [########" in screen[1] and "300/300" in screen[1]
    assert 70 < max(len(line) for line in screen) <= 79


class TerminalLike(io.StringIO):
    """A stream that says it is a terminal (its width falls back to COLUMNS or 80)."""

    def isatty(self) -> bool:
        return True


def test_a_failed_job_ends_its_status_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A conversion that failed midway left the status line open: the error (the CLI's one
    line, a traceback, the shell's prompt) was written right after its last redraw."""
    terminal = TerminalLike()
    monkeypatch.setattr(sys, "stderr", terminal)

    def records() -> Iterator[np.ndarray]:
        for index in range(100):
            yield np.arange(index % 7, dtype=np.int32)
        raise OSError("the source went away")

    with pytest.raises(OSError, match="the source went away"):
        from_iterator(tmp_path / "r", records(), chunk_bytes=64, progress=True)
    drawn = terminal.getvalue()
    # The rate is whatever this machine managed: only its form is checked.
    assert drawn.startswith("\r")
    assert re.search(r" records, [0-9]+\.[0-9] MiB/s\x1b\[K\n$", drawn), drawn
    assert drawn.count("\n") == 1  # nothing else was drawn: the line ended once
    assert not (tmp_path / "r").exists()
    # Done, the line ends once; written to a log, nothing is added to the plain lines.
    for stream, fails in ((TerminalLike(), False), (io.StringIO(), True)):
        with pytest.raises(ValueError) if fails else contextlib.nullcontext():
            with Progress("job", 10, True, stream) as report:
                report.update(4, 400)
                if fails:
                    raise ValueError("stop")
                report.finish()
        text = stream.getvalue()
        assert text.endswith("\n") and text.count("\n") == 1
        assert ("done in" in text) != fails


def test_a_progress_that_is_no_option_is_refused_before_any_work(tmp_path: Path) -> None:
    """progress= took anything: a string or a stream counted as True, so progress="quiet" drew
    the status line and progress=sys.stdout drew it on stderr, after the work had started. It
    is a TypeError before anything is written now; NumPy's bools are bools."""
    values = np.arange(10, dtype=np.int64)
    numpy_false: Any = np.False_
    from_numpy(tmp_path / "src", values, progress=numpy_false)
    bad_options: list[Any] = ["quiet", io.StringIO(), 1, 0.0]
    for bad in bad_options:
        message = ("progress must be None, True, False or a callable fn(records_done, "
                   f"records_total, bytes_done), got {bad!r}")
        with pytest.raises(TypeError, match=re.escape(message)):
            from_numpy(tmp_path / "x", values, progress=bad)
        with pytest.raises(TypeError, match=re.escape(message)):
            from_iterator(tmp_path / "x", [values], progress=bad)
        with pytest.raises(TypeError, match=re.escape(message)):
            recode(tmp_path / "src", tmp_path / "x", progress=bad)
        assert not (tmp_path / "x").exists()
    with DenseDataset(tmp_path / "src") as ds:
        np.testing.assert_array_equal(ds[:], values)
