"""The machine block printed before any table: what the numbers were measured on.

Everything is read from the running system (lscpu, /proc, /sys, cgroup files) so the block
describes the box and the interpreter of this very run, never a remembered one.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path


def lscpu() -> dict[str, str]:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    fields: dict[str, str] = {}
    for line in out.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    return fields


def read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def cpu_line(info: dict[str, str]) -> str:
    model = info.get("Model name") or platform.processor() or "unknown"
    sockets = info.get("Socket(s)", "?")
    cores = info.get("Core(s) per socket", "?")
    threads = os.cpu_count() or 0
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else threads
    line = f"{model}, {sockets} socket(s), {cores} core(s) per socket, {threads} threads"
    if affinity != threads:
        line += f" ({affinity} usable by this process)"
    return line


def frequency_line(info: dict[str, str]) -> str:
    low = info.get("CPU min MHz")
    high = info.get("CPU max MHz")
    if low and high:
        return f"{float(low):.0f}-{float(high):.0f} MHz"
    current = read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq")
    if current:
        return f"{int(current) // 1000} MHz (current; no range exposed)"
    mhz = [line.split(":")[1].strip() for line in (read("/proc/cpuinfo") or "").splitlines()
           if line.startswith("cpu MHz")]
    if mhz:
        return f"{float(mhz[0]):.0f} MHz nominal (no range exposed by the hypervisor)"
    return "not exposed"


def caches_line(info: dict[str, str]) -> str:
    parts = []
    for key, label in (("L1d cache", "L1d"), ("L1i cache", "L1i"), ("L2 cache", "L2"),
                       ("L3 cache", "L3")):
        if key in info:
            parts.append(f"{label} {info[key]}")
    return ", ".join(parts) or "not exposed"


def numa_line(info: dict[str, str]) -> str:
    nodes = info.get("NUMA node(s)")
    return f"{nodes} node(s)" if nodes else "not exposed"


def gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def memory_line() -> str:
    total = 0
    for line in (read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            total = int(line.split()[1]) * 1024
    limit = read("/sys/fs/cgroup/memory.max") or read("/sys/fs/cgroup/memory/memory.limit_in_bytes")
    if limit is None or limit == "max" or int(limit) >= total:
        cgroup = "not limited by cgroup"
    else:
        cgroup = f"cgroup limit {gib(int(limit))}"
    cpu_max = read("/sys/fs/cgroup/cpu.max")
    quota = ""
    if cpu_max and not cpu_max.startswith("max"):
        q, period = cpu_max.split()
        quota = f", CPU quota {int(q) / int(period):.1f} cores"
    return f"{gib(total)} ({cgroup}{quota})"


def os_line() -> str:
    pretty = "unknown"
    for line in (read("/etc/os-release") or "").splitlines():
        if line.startswith("PRETTY_NAME="):
            pretty = line.split("=", 1)[1].strip('"')
    return f"{pretty}, kernel {platform.release()}"


def python_line() -> str:
    import numpy

    gil_check = getattr(sys, "_is_gil_enabled", None)
    if gil_check is None:
        gil = "GIL (no free-threaded support in this build)"
    elif gil_check():
        gil = "GIL enabled"
    else:
        gil = "free-threaded (GIL disabled)"
    return (f"{platform.python_implementation()} {platform.python_version()}, "
            f"numpy {numpy.__version__}, {gil}")


def load_line() -> str:
    try:
        one, five, _ = os.getloadavg()
    except OSError:
        return "not exposed"
    return f"{one:.2f} (1 min), {five:.2f} (5 min) at start"


def one_minute_load() -> float | None:
    """The 1-minute load average now; None where the system does not expose it."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def summary_line() -> str:
    """The machine in one line, for a report's header: CPU model, cores and threads, L3, memory
    and OS (the machine block has the rest)."""
    info = lscpu()
    model = info.get("Model name") or platform.processor() or "unknown CPU"
    threads = os.cpu_count() or 0
    try:
        cores = int(info["Socket(s)"]) * int(info["Core(s) per socket"])
    except (KeyError, ValueError):
        cores = threads
    l3 = info.get("L3 cache")
    # lscpu says "32 MiB (1 instance)": the size is what a reader compares between machines.
    cache = f"L3 {l3.split(' (')[0]}" if l3 else "L3 not exposed"
    return (f"{model}, {cores} cores / {threads} threads, {cache}, memory {memory_line()}, "
            f"{os_line()}")


def machine_rows() -> list[tuple[str, str]]:
    info = lscpu()
    return [
        ("CPU", cpu_line(info)),
        ("frequency", frequency_line(info)),
        ("caches", caches_line(info)),
        ("NUMA", numa_line(info)),
        ("memory", memory_line()),
        ("OS", os_line()),
        ("python", python_line()),
        ("load average", load_line()),
    ]
