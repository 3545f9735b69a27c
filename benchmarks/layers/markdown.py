"""The Markdown report of a run (`--report FILE`): what was measured, where and when; the tables.

The header block names the command, the commit, the machine, the load before and after and the
date; the machine block and every table the run printed follow, in the order it printed them."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from layers import env, machine
from layers.report import Report, Table, render_machine

# build.py sets this to the command as the user typed it (`python3 build.py bench ...`):
# compare.py itself only sees its own arguments, and may have re-run itself in the bench venv.
COMMAND_VARIABLE = "LOADERX_BENCH_COMMAND"


@dataclass
class Run:
    """What the header says about one run, gathered while it ran."""

    command: str
    commit: str
    machine: str
    load_before: float | None
    load_after: float | None
    started: datetime
    seconds: float
    tiny: bool


def shown_path(path: Path) -> str:
    """A path as typed from the repository root, where build.py runs its commands."""
    try:
        return str(path.relative_to(env.ROOT))
    except ValueError:
        return str(path)


def run_command(argv: list[str]) -> str:
    """The command that started this run: build.py's, else compare.py's own command line."""
    given = os.environ.get(COMMAND_VARIABLE)
    if given:
        return given
    # In the bench venv this interpreter is the venv's, which compare.py started itself: the
    # one the user typed is gone, and python3 is what the README tells them to type.
    python = "python3" if env.inside_bench_venv() else shown_path(Path(sys.executable))
    return shlex.join([python, shown_path(Path(sys.argv[0]).resolve()), *argv])


def git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=env.ROOT, capture_output=True, text=True,
                              check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.strip()


def commit_line() -> str:
    """The commit measured: `git rev-parse --short HEAD`, and whether tracked files differ from it
    (untracked files, such as a report being written, do not make a tree dirty here)."""
    head = git("rev-parse", "--short", "HEAD")
    if not head:
        return "not recorded (not a git checkout)"
    changes = git("status", "--porcelain", "--untracked-files=no")
    return head + (" + uncommitted changes" if changes else "")


def start(argv: list[str]) -> Run:
    """The header's facts known before the first table: taken at the start of the run."""
    return Run(command=run_command(argv), commit=commit_line(), machine=machine.summary_line(),
               load_before=machine.one_minute_load(), load_after=None,
               started=datetime.now(timezone.utc), seconds=0.0, tiny=False)


def load_text(load: float | None) -> str:
    return "not exposed" if load is None else f"{load:.2f}"


def header(run: Run) -> str:
    took = f"{run.seconds:.0f} s"
    rows = [
        ("command", run.command),
        ("commit", run.commit),
        ("machine", run.machine),
        ("load", f"{load_text(run.load_before)} before, {load_text(run.load_after)} after "
                 "(1-minute load average)"),
        ("date", f"{run.started:%Y-%m-%d %H:%M} UTC (the run took {took})"),
    ]
    return "\n".join(["```text", *(f"{key:<9} {value}" for key, value in rows), "```"])


def cell(text: str) -> str:
    """A table cell: a pipe would end the cell early."""
    return text.replace("|", "\\|")


def table_markdown(table: Table) -> str:
    """One table as Markdown, its figures formatted as the run printed them; notes below it."""
    lines = [f"## {table.title}", ""]
    lines.append("| " + " | ".join(cell(column.header) for column in table.columns) + " |")
    # Names left, figures right, as in the printed tables.
    lines.append("|" + "|".join(["---", *("---:" for _ in table.columns[1:])]) + "|")
    for row in table.rows:
        cells = [cell(column.fmt(row.get(column.key))) for column in table.columns]
        lines.append("| " + " | ".join(cells) + " |")
    if table.notes:
        lines.append("")
        lines += [f"- {note}" for note in table.notes]
    return "\n".join(lines)


def document(rep: Report, run: Run) -> str:
    layers = ", ".join(dict.fromkeys(table.layer for table in rep.tables)) or "no tables"
    parts = [f"# Benchmarks: {layers}", header(run)]
    if run.tiny:
        parts.append("`--tiny`: sizes too small to mean anything; the issue targets are not "
                     "judged.")
    parts.append("\n".join(["## Machine", "", "```text", render_machine(rep.machine), "```"]))
    parts += [table_markdown(table) for table in rep.tables]
    if rep.targets and not run.tiny:
        parts.append("\n".join(["## Targets", "", "```text", rep.render_targets(), "```"]))
    if rep.skipped:
        parts.append("\n".join(["## Skipped", "", *(f"- {line}" for line in rep.skipped)]))
    return "\n\n".join(parts) + "\n"


def write(path: Path, rep: Report, run: Run) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(document(rep, run))
