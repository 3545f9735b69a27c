"""Tables and the JSON report: raw figures in, aligned text and a JSON document out.

A layer fills a Table with rows of raw numbers (seconds, bytes, ratios); formatting happens
only when printing, so `--json` gets the unrounded figures.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

Format = Callable[[object], str]


def text(value: object) -> str:
    return "-" if value is None else str(value)


def mib_s(value: object) -> str:
    return "-" if value is None else f"{float(value):,.0f} MiB/s"  # type: ignore[arg-type]


def ratio(value: object) -> str:
    return "-" if value is None else f"{float(value):.2f}x"  # type: ignore[arg-type]


def mib(value: object) -> str:
    return "-" if value is None else f"{float(value) / (1 << 20):,.1f} MiB"  # type: ignore[arg-type]


def per_second(value: object) -> str:
    return "-" if value is None else f"{float(value):,.1f}"  # type: ignore[arg-type]


def duration(value: object) -> str:
    """Seconds shown in the unit that keeps three significant digits readable."""
    if value is None:
        return "-"
    seconds = float(value)  # type: ignore[arg-type]
    if seconds < 1e-3:
        return f"{seconds * 1e6:,.2f} us"
    if seconds < 1.0:
        return f"{seconds * 1e3:,.2f} ms"
    return f"{seconds:,.2f} s"


@dataclass
class Column:
    key: str
    header: str
    fmt: Format = text


@dataclass
class Table:
    layer: str
    title: str
    columns: list[Column]
    rows: list[dict[str, object]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, **row: object) -> None:
        self.rows.append(row)

    def render(self) -> str:
        header = [c.header for c in self.columns]
        body = [[c.fmt(row.get(c.key)) for c in self.columns] for row in self.rows]
        widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]

        def line(cells: list[str]) -> str:
            # First column left-aligned (names), figures right-aligned.
            out = [cells[0].ljust(widths[0])]
            out += [cell.rjust(width) for cell, width in zip(cells[1:], widths[1:])]
            return "  ".join(out).rstrip()

        parts = [self.title, line(header), "  ".join("-" * w for w in widths)]
        parts += [line(cells) for cells in body]
        parts += [f"  {note}" for note in self.notes]
        return "\n".join(parts)

    def as_json(self) -> dict[str, object]:
        return {"layer": self.layer, "title": self.title, "rows": self.rows, "notes": self.notes}


@dataclass
class Report:
    """Everything one run measured, in the order it was printed."""

    machine: list[tuple[str, str]] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    targets: list[dict[str, object]] = field(default_factory=list)
    settings: dict[str, object] = field(default_factory=dict)

    def emit(self, table: Table) -> None:
        self.tables.append(table)
        print(table.render(), end="\n\n", flush=True)

    def skip(self, what: str, why: str) -> None:
        line = f"skipped {what}: {why}"
        self.skipped.append(line)
        print(line, flush=True)

    def target(self, issue: str, claim: str, measured: float, wanted: float,
               lower_is_better: bool = False) -> None:
        met = measured <= wanted if lower_is_better else measured >= wanted
        self.targets.append({"issue": issue, "claim": claim, "measured": measured,
                             "wanted": wanted, "met": met, "lower_is_better": lower_is_better})

    def render_targets(self) -> str:
        lines = ["Targets from the issues (measured in this run)"]
        for t in self.targets:
            verdict = "met" if t["met"] else "MISSED"
            measured, wanted = float(t["measured"]), float(t["wanted"])  # type: ignore[arg-type]
            if t["lower_is_better"]:
                shown = f"{measured:.1f} (wanted <= {wanted:.0f})"
            else:
                shown = f"{measured:.3f}x (wanted >= {wanted:.2f}x)"
            lines.append(f"  [{verdict:6}] {t['issue']}: {t['claim']}: {shown}")
        return "\n".join(lines)

    def write_json(self, path: Path) -> None:
        doc = {
            "machine": dict(self.machine),
            "settings": self.settings,
            "tables": [t.as_json() for t in self.tables],
            "skipped": self.skipped,
            "targets": self.targets,
        }
        path.write_text(json.dumps(doc, indent=1, default=str))


def render_machine(rows: list[tuple[str, str]]) -> str:
    width = max(len(k) for k, _ in rows)
    return "\n".join(["Machine", *(f"  {k.ljust(width)}  {v}" for k, v in rows)])
