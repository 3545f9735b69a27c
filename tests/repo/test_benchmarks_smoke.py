"""Smoke test of the benchmark harness (benchmarks/compare.py) at minimal sizes.

It runs every layer end to end in this interpreter (`--here`: no benchmark venv, so only loaderx
and numpy take part) and checks the JSON report: the loaderx rows exist, which means the
harness wrote each store, read two batches back and found them identical to the source array.
Figures are not checked: at these sizes they mean nothing. The Markdown report (`--report`) is
checked on one layer: its header's fields, and the tables the run printed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_compare_runs_every_layer_end_to_end(tmp_path: Path) -> None:
    report = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "compare.py"), "all", "--here", "--tiny",
         "--workdir", str(tmp_path / "work"), "--json", str(report)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("Machine\n")
    doc = json.loads(report.read_text())
    assert {"CPU", "memory", "python"} <= set(doc["machine"])
    layers = [table["layer"] for table in doc["tables"]]
    assert layers == ["sampler", "store", "store", "sweep", "sweep-overhead", "loader", "ragged",
                      "ragged", "scale", "scale", "memory", "shards", "shards", "shards", "convert",
                      "parquet"]
    rows = {t["title"].split(":")[0]: {str(r.get("store") or r.get("loader") or r.get("sampler")
                                           or r.get("codec")) for r in t["rows"]}
            for t in doc["tables"]}
    store_rows = {"loaderx raw", "loaderx zstd", "npy-mmap", "memcpy 1-thread", "memcpy 2-thread"}
    assert store_rows <= rows["Store (mild)"]
    assert store_rows <= rows["Store (smooth)"]
    assert {"loaderx raw", "loaderx bare-gather raw", "loaderx raw + labels"} <= rows["Loader"]
    assert {f"loaderx {kind} {codec}" for kind in ("dense", "packed", "padded",
                                                   "padded to 1024, truncated")
            for codec in ("raw", "zstd")} | {"loaderx dense raw, off pages"} == rows["Ragged loader"]
    assert {"loaderx dense raw", "loaderx packed raw"} == rows["Ragged loader, short sequences"]
    sweep = next(t for t in doc["tables"] if t["layer"] == "sweep")
    assert [r["size_bytes"] for r in sweep["rows"]] == [8, 4096]
    for row in sweep["rows"]:  # every contender was timed at every size
        assert all(row[name] > 0 for name in ("numpy a[idx]", "np.take raise",
                                              "loaderx ds[idx]", "loaderx gather_into"))
    overhead = next(t for t in doc["tables"] if t["layer"] == "sweep-overhead")
    assert [r["call"] for r in overhead["rows"]][1:] == [
        "ds.gather_into(idx, out)", "ds[idx] (less np.empty of its result)"]
    assert {"loaderx iid", "loaderx cyclic", "numpy default_rng"} <= rows["Sampler"]
    assert {"raw", "zstd"} <= rows["Memory"]
    shards = [t for t in doc["tables"] if t["layer"] == "shards"]
    assert {r["read"] for r in shards[0]["rows"]} >= {"raw gather_into, 64 shards",
                                                       "zstd ds[idx], 1 store",
                                                       "raw gather_into, 1 store again"}
    paired = {r["read"]: r["pair_ratios"] for r in shards[0]["rows"] if r["pair_ratios"]}
    assert set(paired) == {"raw gather_into, 64 shards", "raw ds[idx], 64 shards",
                           "zstd gather_into, 64 shards", "zstd ds[idx], 64 shards",
                           "raw gather_into, 1 store again",
                           "raw gather_into, 1 store, a second copy"}
    assert all(len(ratios) >= 2 and min(ratios) > 0 for ratios in paired.values())
    assert {r["loader"] for r in shards[1]["rows"]} >= {"loader raw, 64 shards"}
    loader_pairs = {r["loader"]: r["pair_ratios"] for r in shards[1]["rows"] if r["pair_ratios"]}
    assert set(loader_pairs) == {"loader raw, 64 shards", "loader zstd, 64 shards"}
    assert all(len(ratios) >= 2 and min(ratios) > 0 for ratios in loader_pairs.values())
    assert [r["records"] for r in shards[2]["rows"]] == ["10,000", "30,000"]
    convert = {str(r["group"]) + " / " + str(r["contender"]) for r in doc["tables"][-2]["rows"]}
    assert {"from_iterator, ~1 ms Python/item / workers=2",
            "from_numpy zstd, in memory / workers=2"} <= convert
    convert_pairs = {str(r["contender"]): r["pair_ratios"] for r in doc["tables"][-2]["rows"]
                     if r["pair_ratios"]}
    assert list(convert_pairs) == ["workers=2"]  # from_numpy's, beside its workers=1
    assert len(convert_pairs["workers=2"]) >= 2 and min(convert_pairs["workers=2"]) > 0
    parquet = doc["tables"][-1]["rows"]  # each conversion ran in its child and said how it went
    assert [r["codec"] for r in parquet] == ["raw", "zstd"]
    assert all(r["peak"] >= r["baseline"] > 0 and r["rows"] > 0 for r in parquet)
    assert not (tmp_path / "work").exists(), "the stores written must be removed"


def test_the_loader_layer_shows_threads_and_processes_with_a_gil_releasing_transform(
    tmp_path: Path
) -> None:
    """Issue 38: `--transform release` runs the thread loader and worker processes side by side
    and writes their ratio as a target line."""
    report = tmp_path / "bench.json"
    done = subprocess.run(
        # Not --tiny, which drops every row with workers: small sizes by hand instead.
        [sys.executable, str(ROOT / "benchmarks" / "compare.py"), "loader", "--here",
         "--records", "512", "--rounds", "1", "--block", "0.05",
         "--transform", "release", "--workers", "2", "--only", "loaderx raw",
         "--workdir", str(tmp_path / "work"), "--json", str(report)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(report.read_text())
    loader = next(t for t in doc["tables"] if t["layer"] == "loader")
    assert {"loaderx raw", "loaderx raw processes w2"} <= {r["loader"] for r in loader["rows"]}
    assert "loaderx threads vs processes w2, transform release" in done.stdout
    # The run's own bound on that ratio: the transform alone in two processes against one.
    assert "this run's headroom: release alone (no loader) ran" in done.stdout
    # And what part of a worker's step is the transform: a share strictly between 0 and 1.
    share = done.stdout.split("a worker's step: the transform is ", 1)[1].split()[0]
    assert 0.0 < float(share) < 1.0



def test_the_peer_loaders_run_the_transform_asked_for(tmp_path: Path) -> None:
    """torch's and grain's datasets in the loader layer apply the --transform chosen (per
    sample where they transform samples): once they ran `augment` whatever was asked, so a
    `--transform release` run compared loaderx's release against the peers' augment."""
    torch = pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location(
        "bench_loaders", ROOT / "benchmarks" / "layers" / "loaders.py")
    assert spec is not None and spec.loader is not None
    loaders = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaders)
    array = np.random.default_rng(0).integers(0, 256, size=(4, 8, 6, 3), dtype=np.uint8)
    npy = tmp_path / "records.npy"
    np.save(npy, array)
    rows = list(range(len(array)))
    for transform in (loaders.augment, loaders.release):
        wanted = transform(array)
        assert not np.array_equal(wanted, array)
        samples = loaders.MemmapSamples(npy, transform)
        assert np.array_equal(torch.stack([samples[i] for i in rows]).numpy(), wanted)
        batches = loaders.MemmapBatches(npy, transform)
        assert np.array_equal(batches[rows].numpy(), wanted)
        grain_source = loaders.GrainSource(npy, transform)
        assert np.array_equal(np.stack([grain_source[i] for i in rows]), wanted)
    assert np.array_equal(loaders.GrainSource(npy, None)[0], array[0])


def run_probe(name: str, *arguments: str) -> list[str]:
    """benchmarks/probes/<name>.py at minimal sizes (600 records, one round of 0.02 s blocks,
    then `arguments`): its output lines, once it exited 0 (each probe checks its rows' records
    before timing them and exits non-zero if one differs)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "probes" / f"{name}.py"),
         "--records", "600", "--rounds", "1", "--block", "0.02", *arguments],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.splitlines()


def test_loader_overhead_tool_runs_every_row_on_the_right_records() -> None:
    """benchmarks/probes/loader_overhead.py (a README command) at minimal sizes: it checks each
    row's first three batches against the records its sampler names before timing, and exits
    non-zero if one differs."""
    lines = run_probe("loader_overhead")
    assert lines[0].startswith("row") and lines[-1].startswith("medians of 1 interleaved round")
    rows = lines[1:-1]
    names = [line[:38].strip() for line in rows]
    assert names == ["bare gather, 1 buffer", "bare gather, ring of 2", "bare gather, ring of 5",
                     "bare gather, 1 buffer, streaming", "bare gather, ring of 2, streaming",
                     "bare gather, ring of 2, cached", "loader, records", "loader, records + labels",
                     "loader, records + labels, 2 workers", "loader, records + labels, last held",
                     "lock handoff, records + labels"]
    assert rows[0].split()[-2] == "1.00x"


def test_packed_step_probe_checks_its_rows_and_prints_every_one() -> None:
    """benchmarks/probes/packed_step.py (a report's command) at minimal sizes: it compares each
    row's first batches with `ds[idx]` before timing, and exits non-zero if one differs."""
    lines = run_probe("packed_step")
    assert [line[:22].strip() for line in lines[:7]] == [
        "dense bare", "dense loader", "dense 4100 B bare", "dense 4100 B loader", "packed bare",
        "packed stream", "packed loader"]
    assert all(float(line.split()[-4]) > 0 for line in lines[:7])
    assert lines[-1].startswith("packed stream adds")


def test_destination_offsets_tool_checks_its_bytes_and_prints_every_offset() -> None:
    """benchmarks/probes/destination_offsets.py (a README command) at minimal sizes: it compares
    each row's last batch with the records before timing, and exits non-zero if one differs."""
    lines = run_probe("destination_offsets", "--offsets", "0,16,2048")
    assert lines[0].startswith("ring of 5 arrays")
    assert [int(line.split()[0]) for line in lines[2:]] == [0, 16, 2048]
    assert all(float(line.split()[1].replace(",", "")) > 0 for line in lines[2:])


def test_store_handles_probe_checks_every_handle_and_prints_every_row() -> None:
    """benchmarks/probes/store_handles.py (a report's command) at minimal sizes: it checks each
    handle's first batch against the records before timing, and exits non-zero if one differs."""
    lines = run_probe("store_handles", "--single", "2", "--sharded", "1", "--stores", "cached")
    assert [line[:22].strip() for line in lines[:3]] == [
        "1 store, handle 1", "1 store, handle 2", "64 shards, handle 1"]
    assert all(float(line.split()[-3]) > 0 for line in lines[:3])
    assert lines[-1].startswith("medians of 1 interleaved rounds, stores cached")


def report_header(text: str) -> dict[str, str]:
    """The header block of a Markdown report: its first ```text block, as {field: value}."""
    block = text.split("```text\n", 1)[1].split("```", 1)[0]
    return {line[:9].strip(): line[10:] for line in block.splitlines()}


def test_compare_writes_a_markdown_report_of_its_run(tmp_path: Path) -> None:
    """`--report FILE` (what `python3 build.py bench LAYER --report FILE` hands on) writes the
    run as Markdown: a header with the command, the commit, the machine, the load before and
    after and the date, then the machine block and every table the run printed."""
    report = tmp_path / "reports" / "sampler.md"
    command = f"python3 build.py bench sampler --tiny --report {report}"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "compare.py"), "sampler", "--here", "--tiny",
         "--workdir", str(tmp_path / "work"), "--report", str(report)],
        capture_output=True, text=True, timeout=300,
        env=dict(os.environ, LOADERX_BENCH_COMMAND=command),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    text = report.read_text()
    assert text.startswith("# Benchmarks: sampler\n")
    header = report_header(text)
    assert list(header) == ["command", "commit", "machine", "load", "date"]
    assert header["command"] == command
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                          capture_output=True, text=True)
    if head.returncode == 0:
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, capture_output=True, text=True).stdout.strip()
        assert header["commit"] == head.stdout.strip() + (" + uncommitted changes" if dirty else "")
    else:  # the copied tests of install-check: no repository around them
        assert header["commit"] == "not recorded (not a git checkout)"
    assert re.fullmatch(r".+, \d+ cores / \d+ threads, L3 .+, memory .+ GiB.*, .+",
                        header["machine"])
    assert re.fullmatch(r"\d+\.\d\d before, \d+\.\d\d after \(1-minute load average\)",
                        header["load"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC \(the run took \d+ s\)", header["date"])
    assert "## Machine\n\n```text\nMachine\n  CPU " in text
    # The sampler table as the run printed it: the same title, one Markdown row per printed row.
    title = next(line for line in done.stdout.splitlines() if line.startswith("Sampler: "))
    table = text.split(f"## {title}\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert table[:2] == ["| sampler | batch | per batch | vs default_rng |", "|---|---:|---:|---:|"]
    rows = [line.split(" | ")[0].removeprefix("| ") + " " + line.split(" | ")[1]
            for line in table[2:]]
    assert {"numpy default_rng 256", "loaderx iid 256", "loaderx cyclic 8192"} <= set(rows)
    assert all(re.search(r"\| [\d.]+ (us|ms|s) \| [\d.]+x \|$", line) for line in table[2:])


def test_the_remote_layer_reads_through_a_real_server_and_proxy(tmp_path: Path) -> None:
    """`bench remote` (not part of all) starts moto's S3 server and the proxy, reads the dataset
    warm and cold, and stops both; its peers (their own venv) are left out here."""
    report = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "compare.py"), "remote", "--here", "--tiny",
         "--no-peers", "--workdir", str(tmp_path / "work"), "--json", str(report)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(report.read_text())
    warm, cold = doc["tables"]
    assert [t["layer"] for t in doc["tables"]] == ["remote", "remote"]
    assert {r["read"] for r in warm["rows"]} == {
        f"{call}, {where}" for call in ("ds[idx]", "gather_into", "DataLoader")
        for where in ("local", "remote")}
    for row in cold["rows"]:  # every epoch went through the proxy and fetched records
        assert row["requests"] > 0 and row["bytes"] > 0 and row["fetched"] > 0
    assert not (tmp_path / "work").exists(), "the stores and caches written must be removed"
