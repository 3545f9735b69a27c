"""`--plot FILE.png`: the store and loader tables as horizontal bar charts (matplotlib).

matplotlib lives in the benchmark environment only; without it the plot is skipped with a line
saying so. One panel per store table (gather MiB/s, log scale: the peers span three orders of
magnitude) and one for the loader table (batches/s). loaderx is blue, the same run's references
(npy-mmap, one-thread zstd decode, the bare gather) orange, the peers gray.
"""

from __future__ import annotations

from pathlib import Path

from .report import Report, Table


def panels(rep: Report) -> list[tuple[Table, str, str]]:
    chosen: list[tuple[Table, str, str]] = []
    for table in rep.tables:
        if table.layer == "store":
            chosen.append((table, "store", "gather_mib_s"))
        elif table.layer == "loader":
            chosen.append((table, "loader", "batches_s"))
    return chosen


def color(name: str) -> str:
    """References orange, loaderx blue, peers gray."""
    if name == "npy-mmap" or "bare-gather" in name or name.startswith("zstd decode"):
        return "tab:orange"
    return "tab:blue" if name.startswith("loaderx") else "tab:gray"


def draw(rep: Report, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        print(f"skipped the plot: matplotlib is not importable ({error})")
        return
    chosen = panels(rep)
    if not chosen:
        print("skipped the plot: no store or loader table in this run")
        return
    heights = [max(2.0, 0.32 * len(t.rows) + 1.0) for t, _, _ in chosen]
    fig, axes = plt.subplots(len(chosen), 1, figsize=(9, sum(heights)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, (table, name_key, value_key) in zip(axes[:, 0], chosen):
        rows = [r for r in table.rows if r.get(value_key) is not None]
        names = [str(r[name_key]) for r in rows]
        values = [float(r[value_key]) for r in rows]  # type: ignore[arg-type]
        colors = [color(n) for n in names]
        ax.barh(names[::-1], values[::-1], color=colors[::-1])
        if table.layer == "store":
            ax.set_xscale("log")
            ax.set_xlabel("gather MiB/s (log scale)")
        else:
            ax.set_xlabel("batches/s")
        ax.set_title(table.title, fontsize=9)
        ax.tick_params(axis="y", labelsize=8)
        for y, v in enumerate(values[::-1]):
            ax.text(v, y, f" {v:,.0f}", va="center", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")
