"""`--plot FILE.png`: the run's tables as bar charts a reader can take in without the text.

matplotlib lives in the benchmark environment only; without it the plot is skipped with a line
saying so. One panel per store table (gather MiB/s), per loader table (batches/s) and per record
size sweep (loaderx's speed as a multiple of NumPy's at each size, grouped bars with the 1.0x
line drawn). Every axis starts at zero and is linear, so bar lengths compare honestly (the slowest
peers then show as slivers; their figure is printed beside every bar). Colours: loaderx blue,
the same run's references (npy-mmap, NumPy, one-thread zstd decode, the bare gather) orange,
peers gray, with a legend. A compressed store's bar says how much smaller its data is on disk.
The machine and its load at the start of the run are written under the title.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .report import Report, Table

LOADERX, REFERENCE, PEER = "tab:blue", "tab:orange", "tab:gray"
# Which value each layer's panel draws, and the axis label.
PANEL_VALUES = {
    "store": ("gather_mib_s", "gather MiB/s (higher is better)"),
    "loader": ("batches_s", "batches/s (higher is better)"),
}


def panels(rep: Report) -> list[tuple[Table, str, str, str]]:
    """(table, name column, value column, axis label) for each table worth drawing."""
    chosen: list[tuple[Table, str, str, str]] = []
    for table in rep.tables:
        if table.layer == "sweep" and table.rows:
            chosen.append((table, "size", "read_vs_fancy", "loaderx / NumPy (higher is better)"))
        elif table.layer in PANEL_VALUES:
            value_key, label = PANEL_VALUES[table.layer]
            name_key = "store" if table.layer == "store" else "loader"
            if any(value_key in row for row in table.rows):
                chosen.append((table, name_key, value_key, label))
    return chosen


def is_reference(name: str) -> bool:
    lowered = name.lower()
    return (name == "npy-mmap" or "bare-gather" in lowered or "bare gather" in lowered
            or lowered.startswith(("zstd decode", "numpy", "np.")))


def color(name: str) -> str:
    """References orange, loaderx blue, peers gray."""
    if is_reference(name):
        return REFERENCE
    return LOADERX if name.startswith("loaderx") else PEER


def bar_label(value: float, row: dict[str, object]) -> str:
    """The figure, plus the compression ratio of a store that stores its data smaller."""
    label = f" {value:,.0f}"
    ratio = row.get("ratio")
    if isinstance(ratio, (int, float)) and ratio >= 1.05:
        label += f"   ({ratio:.1f}x smaller on disk)"
    return label


def subtitle(rep: Report) -> str:
    machine = dict(rep.machine)
    parts = [machine.get("CPU", ""), machine.get("python", ""),
             f"load {machine.get('load average', 'unknown')}"]
    return " | ".join(p for p in parts if p)


def draw_panel(ax: Any, table: Table, name_key: str, value_key: str, label: str) -> None:
    rows = [r for r in table.rows if r.get(value_key) is not None]
    names = [str(r[name_key]) for r in rows][::-1]
    values = [float(r[value_key]) for r in rows][::-1]  # type: ignore[arg-type]
    ax.barh(names, values, color=[color(n) for n in names])
    ax.set_xlim(0, max(values) * 1.45 if values else 1)
    ax.set_xlabel(f"{label}; linear axis from 0")
    ax.set_title(table.title, fontsize=9, loc="left")
    ax.tick_params(axis="y", labelsize=8)
    for y, (value, row) in enumerate(zip(values, rows[::-1])):
        ax.text(value, y, bar_label(value, row), va="center", fontsize=7)


# The sweep's two comparisons: (ratio column, what it compares, colour of its bars).
SWEEP_RATIOS = (("read_vs_fancy", "ds[idx] / numpy a[idx]", LOADERX),
                ("into_vs_take", "gather_into / np.take(out=, mode='raise')", "tab:cyan"))


def draw_sweep(ax: Any, table: Table, label: str) -> None:
    """Per record size, loaderx's speed as a multiple of NumPy's: above the line is faster."""
    sizes = [str(r["size"]) for r in table.rows]
    width = 0.38
    for offset, (key, name, bar_color) in zip((-width / 2, width / 2), SWEEP_RATIOS):
        values = [float(r[key]) for r in table.rows]  # type: ignore[arg-type]
        positions = [i + offset for i in range(len(sizes))]
        ax.bar(positions, values, width, color=bar_color, label=name)
        for x, value in zip(positions, values):
            ax.text(x, value, f"{value:.2f}", ha="center", va="bottom", fontsize=6)
    ax.axhline(1.0, color=REFERENCE, linewidth=1, label="NumPy (1.0x)")
    ax.set_xticks(range(len(sizes)), sizes, fontsize=8)
    ax.set_ylim(0, None)
    ax.set_xlabel("record size")
    ax.set_ylabel(f"{label}; linear from 0", fontsize=8)
    ax.set_title(table.title, fontsize=9, loc="left")
    ax.legend(fontsize=7, loc="upper left")


def draw(rep: Report, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError as error:
        print(f"skipped the plot: matplotlib is not importable ({error})")
        return
    chosen = panels(rep)
    if not chosen:
        print("skipped the plot: no store or loader table in this run")
        return
    heights = [3.5 if t.layer == "sweep" else max(2.0, 0.32 * len(t.rows) + 1.2)
               for t, _, _, _ in chosen]
    fig, axes = plt.subplots(len(chosen), 1, figsize=(10, sum(heights) + 1.2),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, (table, name_key, value_key, label) in zip(axes[:, 0], chosen):
        if table.layer == "sweep":
            draw_sweep(ax, table, label)
        else:
            draw_panel(ax, table, name_key, value_key, label)
    total = sum(heights) + 1.2
    fig.suptitle(f"loaderx benchmarks (python3 build.py bench)\n{subtitle(rep)}", fontsize=8,
                 x=0.01, y=0.998, ha="left", va="top")
    legend = [Patch(color=LOADERX, label="loaderx"),
              Patch(color=REFERENCE, label="reference measured in the same run"),
              Patch(color=PEER, label="peer library")]
    fig.legend(handles=legend, loc="upper right", bbox_to_anchor=(0.995, 1 - 0.42 / total),
               fontsize=8, ncols=3, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.75 / total))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"wrote {path}")
