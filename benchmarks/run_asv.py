"""`python3 build.py asv`: the asv suite over the last commits, on every interpreter found.

Steps: install asv 0.6.6 into the project's .venv if it is missing (asv is not a project or CI
dependency), make every configured interpreter findable, `asv machine --yes`, `asv run` over the
last N commits (default 2) for each interpreter, then `asv publish` (HTML in .asv/html). The
timings are for the dashboard only: nothing here gates CI.

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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ASV_VERSION = "0.6.6"
CONFIGURED = ("3.11", "3.13")
EXTRA = ("3.14", "3.14t")  # used when installed; not in asv.conf.json


def log(message: str) -> None:
    print(f"[asv] {message}", flush=True)


def ensure_asv() -> None:
    try:
        import asv  # noqa: F401
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


def asv(args: list[str], env: dict[str, str], check: bool = True) -> int:
    cmd = [sys.executable, "-m", "asv", *args]
    log(" ".join(cmd[2:]))
    code = subprocess.run(cmd, cwd=ROOT, env=env).returncode
    if check and code != 0:
        raise SystemExit(f"asv {args[0]} failed with exit code {code}")
    return code


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="build.py asv", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=2, help="how many recent commits")
    parser.add_argument("--python", action="append",
                        help="interpreter versions (default: 3.11, 3.13 and 3.14/3.14t if found)")
    parser.add_argument("--bench", help="only benchmarks matching this regular expression")
    parser.add_argument("--quick", action="store_true", help="one sample each (noise)")
    parser.add_argument("--no-publish", action="store_true")
    args = parser.parse_args(argv)
    ensure_asv()
    env = interpreter_env()
    pythons = available(env, args.python or [*CONFIGURED, *EXTRA])
    if not pythons:
        raise SystemExit("no configured interpreter found")
    asv(["machine", "--yes"], env)
    run = ["run", "--show-stderr", f"HEAD~{args.commits}..HEAD"]
    for version in pythons:
        run += ["-E", f"virtualenv:{version}"]
    if args.bench:
        run += ["--bench", args.bench]
    if args.quick:
        run.append("--quick")
    code = asv(run, env, check=False)
    if code != 0:
        log(f"asv run exited with {code} (a build or a benchmark failed; see above)")
    if not args.no_publish:
        asv(["publish"], env)
        log(f"dashboard: {ROOT / '.asv' / 'html' / 'index.html'} "
            "(serve it with: .venv/bin/python -m asv preview)")
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
