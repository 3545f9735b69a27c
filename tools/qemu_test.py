"""Runs the Zig test suite cross-compiled for aarch64 Linux under qemu user-mode emulation.

    python3 build.py qemu-test

Two targets, each in Debug and ReleaseFast (the `test` step of zig/build.zig):
- aarch64-linux-musl: static test binaries, qemu-aarch64 runs them as they are;
- aarch64-linux-gnu.2.17 (the manylinux target): dynamic binaries, loaded by Debian's arm64
  glibc from /usr/aarch64-linux-gnu (`--libc-runtimes /usr` gives qemu `-L` that folder).
Needs Debian's `qemu-user` (qemu-aarch64; bookworm's own 7.2 works, as does 10.0 from
bookworm-backports) and `libc6-arm64-cross`:
    apt-get install -y qemu-user libc6-arm64-cross
The run fails unless every test step really ran on the emulator and passed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import build as project_build  # noqa: E402
from tools.wheels import log, nice  # noqa: E402

CROSS_GLIBC: Final = Path("/usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1")
TARGETS: Final = ("aarch64-linux-musl", "aarch64-linux-gnu.2.17")


def zig_test(target: str, zstd: Path) -> str:
    cmd = [sys.executable, "-m", "ziglang", "build", "test", f"-Dtarget={target}", f"-Dzstd={zstd}",
           "-fqemu", "--summary", "all"]
    if "-gnu" in target:
        cmd += ["--libc-runtimes", "/usr"]
    log(" ".join(cmd))
    done = subprocess.run(nice(cmd), cwd=ROOT / "zig", capture_output=True, text=True)
    sys.stderr.write(done.stderr)
    if done.returncode != 0:
        raise SystemExit(f"[qemu-test] {target}: zig build test failed (exit {done.returncode})")
    return done.stderr


def passed_counts(summary: str) -> list[int]:
    """Tests passed per run step, from `--summary all` ('run test NAME 35 pass, 1 skip (36 total)')."""
    return [int(n) for n in re.findall(r"run test \S+ (\d+) pass", summary)]


def main() -> None:
    if shutil.which("qemu-aarch64") is None:
        raise SystemExit("[qemu-test] qemu-aarch64 not found: apt-get install -y qemu-user")
    if not CROSS_GLIBC.exists():
        raise SystemExit(f"[qemu-test] {CROSS_GLIBC} not found: apt-get install -y libc6-arm64-cross")
    zstd = project_build.fetch_zstd()
    for target in TARGETS:
        summary = zig_test(target, zstd)
        counts = passed_counts(summary)
        # A skip is allowed (one test is ReleaseFast-only by design); a failure or crash is not.
        if len(counts) != 2 or min(counts) == 0 or re.search(r"\d+ (fail|crash|timeout)", summary):
            raise SystemExit(f"[qemu-test] {target}: expected two test runs with passing tests, "
                             f"found {counts} (see the summary above)")
        log(f"{target}: Debug and ReleaseFast suites passed under qemu ({counts} tests)")


if __name__ == "__main__":
    main()
