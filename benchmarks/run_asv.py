"""`python3 build.py asv`: the asv suite over the last commits, on every interpreter found.

Steps: install asv 0.6.6 into the project's .venv if it is missing (also in the dev environment
build.py makes), make every configured interpreter findable, `asv machine --yes`, `asv run` over the
last N commits (default 2) for each interpreter, then `asv publish` (HTML in .asv/html) with its
JavaScript and CSS fetched from the npm registry (benchmarks/dashboard.py), so it renders offline.
The machine's load is logged before and after each run (.asv/load.log) and recorded by the suite
itself (bench_machine). Nothing here gates CI.

Other modes: `--check` publishes and checks the dashboard in headless Chromium (screenshots in
.asv/screenshots); `--compare main` benchmarks main and HEAD and exits 1 on a regression beyond
REGRESSION_FACTOR; `--noise-check` shows that this factor tells noise from a real 2x slowdown
(benchmarks/asv_noise.py); `--dry-run` prints the interpreters found and the asv command.

Interpreters: 3.11 and 3.13 from asv.conf.json, plus 3.14 and 3.14t (free-threaded) whenever a
python3.14 / python3.14t is on PATH, so GIL and free-threaded results share one dashboard.
pyenv detail: with several pyenv versions installed, the python3.13 shim exits 127 unless 3.13
is among the active versions, so this script puts each matching pyenv version's bin folder
first on PATH and also sets PYENV_VERSION to all of them (e.g. 3.11.7:3.13.0).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import asv_noise, dashboard  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ASV_VERSION = "0.6.6"
CONFIGURED = ("3.11", "3.13")
EXTRA = ("3.14", "3.14t")  # used when installed; not in asv.conf.json
# A change beyond this factor is a regression: asv.conf.json's threshold 0.5 means 1.5x.
REGRESSION_FACTOR = 1.5
# The graph --check opens (a benchmark that every run has).
CHECK_GRAPH = "bench_store.Gather.time_getitem"


def log(message: str) -> None:
    print(f"[asv] {message}", flush=True)


def ensure_asv() -> None:
    try:
        import asv  # type: ignore[import-untyped]  # noqa: F401
        import virtualenv  # noqa: F401
    except ImportError:
        log(f"installing asv=={ASV_VERSION} and virtualenv into {sys.prefix}")
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet",
                        f"asv=={ASV_VERSION}", "virtualenv"], check=True)


def pyenv_versions(root: Path, wanted: tuple[str, ...]) -> list[Path]:
    """The newest installed pyenv version folder for each wanted X.Y."""
    found: list[Path] = []
    versions = root / "versions"
    for minor in wanted:
        matches = sorted((p for p in versions.glob(f"{minor}.*") if (p / "bin").is_dir()
                          and p.name.count(".") == 2 and p.name.split(".")[2].isdigit()),
                         key=lambda p: int(p.name.split(".")[2]))
        if matches:
            found.append(matches[-1])
    return found


def interpreter_env() -> dict[str, str]:
    env = dict(os.environ)
    root = Path(env.get("PYENV_ROOT", Path.home() / ".pyenv"))
    if (root / "versions").is_dir():
        chosen = pyenv_versions(root, CONFIGURED + EXTRA)
        if chosen:
            env["PATH"] = os.pathsep.join([*(str(p / "bin") for p in chosen), env["PATH"]])
            env["PYENV_VERSION"] = ":".join(p.name for p in chosen)
            log(f"pyenv versions first on PATH: {env['PYENV_VERSION']}")
    return env


def available(env: dict[str, str], wanted: list[str]) -> list[str]:
    found = []
    for version in wanted:
        exe = shutil.which(f"python{version}", path=env["PATH"])
        ok = exe is not None and subprocess.run([exe, "-c", "pass"], env=env,
                                                capture_output=True).returncode == 0
        log(f"python{version}: {exe if ok else 'not found, skipped'}")
        if ok:
            found.append(version)
    return found


def asv(args: list[str], env: dict[str, str], check: bool = True, cwd: Path = ROOT) -> int:
    cmd = [sys.executable, "-m", "asv", *args]
    log(" ".join(cmd[2:]))
    code = subprocess.run(cmd, cwd=cwd, env=env).returncode
    if check and code != 0:
        raise SystemExit(f"asv {args[0]} failed with exit code {code}")
    return code


def environments(pythons: list[str]) -> list[str]:
    """asv's -E arguments: one virtualenv per interpreter; a free-threaded build keeps its "t"
    (python3.14t), so its results sit beside 3.14's on the dashboard as their own line."""
    return [arg for version in pythons for arg in ("-E", f"virtualenv:{version}")]


def plan_run(pythons: list[str], commits: int, bench: str | None, quick: bool) -> list[str]:
    """The `asv run` arguments for the last `commits` commits on every interpreter."""
    run = ["run", "--show-stderr", f"HEAD~{commits}..HEAD", *environments(pythons)]
    if bench:
        run += ["--bench", bench]
    if quick:
        run.append("--quick")
    return run


def plan_compare(reference: str, pythons: list[str], bench: str | None) -> list[str]:
    """`asv continuous`: benchmarks reference and HEAD and exits 1 when HEAD is slower by more
    than the factor that asv.conf.json's regressions_thresholds also uses."""
    args = ["continuous", "--show-stderr", "--factor", str(REGRESSION_FACTOR), "--split",
            *environments(pythons[:1]), reference, "HEAD"]
    if bench:
        args += ["--bench", bench]
    return args


def record_load(label: str) -> None:
    """Appends the machine's load to .asv/load.log: the context a reader of the numbers needs."""
    one, five, fifteen = os.getloadavg()
    path = ROOT / ".asv" / "load.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    with path.open("a") as log_file:
        log_file.write(f"{stamp} {label}: load {one:.2f} {five:.2f} {fifteen:.2f}\n")
    log(f"load average {one:.2f} {five:.2f} {fifteen:.2f} ({label}; kept in {path})")


def publish(env: dict[str, str]) -> Path:
    asv(["publish"], env)
    html = ROOT / ".asv" / "html"
    dashboard.localize(html, ROOT / ".cache" / "npm")
    log(f"dashboard: {html / 'index.html'} (serve it with: .venv/bin/python -m asv preview)")
    return html


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="build.py asv", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=2, help="how many recent commits")
    parser.add_argument("--python", action="append",
                        help="interpreter versions (default: 3.11, 3.13 and 3.14/3.14t if found)")
    parser.add_argument("--bench", help="only benchmarks matching this regular expression")
    parser.add_argument("--quick", action="store_true", help="one sample each (noise)")
    parser.add_argument("--no-publish", action="store_true")
    parser.add_argument("--check", action="store_true",
                        help="publish only (no run) and check the dashboard in headless Chromium")
    parser.add_argument("--compare", metavar="REF",
                        help="benchmark REF (e.g. main) and HEAD; exit 1 on a real regression")
    parser.add_argument("--noise-check", action="store_true",
                        help="show that the same commit twice flags nothing and a 2x slowdown is "
                             "flagged (about 15 minutes)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the interpreters found and the asv commands, run nothing")
    args = parser.parse_args(argv)
    env = interpreter_env()
    pythons = available(env, args.python or [*CONFIGURED, *EXTRA])
    if args.dry_run:
        log(f"would run: asv {' '.join(plan_run(pythons or ['3.11'], args.commits, args.bench, args.quick))}")
        return 0
    ensure_asv()
    if args.check:
        html = publish(env)
        dashboard.check(html, ROOT / ".asv" / "screenshots", CHECK_GRAPH)
        return 0
    if not pythons:
        raise SystemExit("no configured interpreter found")
    if args.noise_check:
        record_load("before noise check")
        code = asv_noise.run(asv, REGRESSION_FACTOR, env, pythons[0])
        record_load("after noise check")
        return code
    asv(["machine", "--yes"], env)
    record_load("before")
    if args.compare:
        code = asv(plan_compare(args.compare, pythons, args.bench), env, check=False)
        record_load("after")
        log("no regression beyond the factor" if code == 0 else f"regression found (exit {code})")
        return code
    code = asv(plan_run(pythons, args.commits, args.bench, args.quick), env, check=False)
    record_load("after")
    if code != 0:
        log(f"asv run exited with {code} (a build or a benchmark failed; see above)")
    if not args.no_publish:
        publish(env)
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
