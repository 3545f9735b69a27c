"""build.py's own behaviour: fetching zstd's sources, the venv, and how a failed step ends.

Each case runs build.py's functions against a scratch folder with a stand-in for pip and a small
tarball shaped like the pinned sdist, so nothing is downloaded and the real .cache is untouched.
They need the repository's build.py, so they skip against an installed package's copied tests/.
"""

from __future__ import annotations

import hashlib
import io
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if not (ROOT / "build.py").exists() or not (ROOT / "zig").is_dir():
    pytest.skip("the repository's build.py is not beside these tests", allow_module_level=True)

sys.path.insert(0, str(ROOT))
import build  # noqa: E402

# Stands in for `python -m pip download ... --dest DIR ...`: copies $FAKE_SDIST into DIR, or
# fails as pip does when $FAKE_SDIST is unset (no network, no such version).
FAKE_PIP = """#!/bin/sh
dest=""
while [ $# -gt 0 ]; do
    if [ "$1" = "--dest" ]; then dest="$2"; fi
    shift
done
if [ -z "$FAKE_SDIST" ]; then
    echo "ERROR: No matching distribution found" >&2
    exit 1
fi
cp "$FAKE_SDIST" "$dest/"
"""


def fake_sdist(folder: Path, header: bytes = b"/* zstd.h */\n") -> Path:
    """A tarball named and laid out like the pinned sdist (just zstd.h and LICENSE)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / build.ZSTD_SDIST_FILE
    with tarfile.open(path, "w:gz") as archive:
        for name, data in (("lib/zstd.h", header), ("LICENSE", b"BSD\n")):
            info = tarfile.TarInfo(build.ZSTD_TREE_PREFIX + name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def pinned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """A good sdist in tmp_path/registry, pinned by its checksum; returns it and the fake pip."""
    good = fake_sdist(tmp_path / "registry")
    monkeypatch.setattr(build, "ZSTD_SDIST_SHA256", hashlib.sha256(good.read_bytes()).hexdigest())
    pip = tmp_path / "fake-python"
    pip.write_text(FAKE_PIP)
    pip.chmod(0o755)
    return good, str(pip)


def test_a_failed_download_says_what_failed_and_the_next_run_recovers(
        pinned: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good, pip = pinned
    cache = tmp_path / "cache"
    monkeypatch.delenv("FAKE_SDIST", raising=False)
    with pytest.raises(SystemExit) as failed:
        build.fetch_zstd(cache=cache, python=pip)
    message = str(failed.value.code)
    assert f"could not download {build.ZSTD_SDIST_NAME}=={build.ZSTD_SDIST_VERSION}" in message
    assert "run the command again" in message
    monkeypatch.setenv("FAKE_SDIST", str(good))
    tree = build.fetch_zstd(cache=cache, python=pip)
    assert (tree / "lib" / "zstd.h").read_bytes() == b"/* zstd.h */\n"


def test_a_checksum_mismatch_is_refused_and_the_next_run_downloads_again(
        pinned: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good, pip = pinned
    cache = tmp_path / "cache"
    tampered = fake_sdist(tmp_path / "tampered", header=b"/* not zstd's */\n")
    monkeypatch.setenv("FAKE_SDIST", str(tampered))
    with pytest.raises(SystemExit) as failed:
        build.fetch_zstd(cache=cache, python=pip)
    message = str(failed.value.code)
    assert hashlib.sha256(tampered.read_bytes()).hexdigest() in message
    assert f"expected {build.ZSTD_SDIST_SHA256}" in message and "refusing it" in message
    assert not (cache / f"zstd-from-{build.ZSTD_SDIST_NAME}-{build.ZSTD_SDIST_VERSION}").exists()
    monkeypatch.setenv("FAKE_SDIST", str(good))
    tree = build.fetch_zstd(cache=cache, python=pip)
    assert (tree / "LICENSE").read_bytes() == b"BSD\n"


def test_an_interrupted_extraction_is_redone(pinned: tuple[Path, str], tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    good, pip = pinned
    cache = tmp_path / "cache"
    tree = cache / f"zstd-from-{build.ZSTD_SDIST_NAME}-{build.ZSTD_SDIST_VERSION}"
    # What a kill leaves: a half-filled staging folder, and a tree without zstd.h.
    (cache / "zstd-staging" / "half").mkdir(parents=True)
    (tree / "lib").mkdir(parents=True)
    (tree / "lib" / "zstd_partial.c").write_text("")
    monkeypatch.setenv("FAKE_SDIST", str(good))
    assert build.fetch_zstd(cache=cache, python=pip) == tree
    assert sorted(p.name for p in (tree / "lib").iterdir()) == ["zstd.h"]
    assert not (cache / "zstd-staging").exists()
    # Once complete, a re-run neither downloads nor unpacks.
    monkeypatch.delenv("FAKE_SDIST")
    (cache / "downloads" / build.ZSTD_SDIST_FILE).unlink()
    assert build.fetch_zstd(cache=cache, python=pip) == tree


def run_main(monkeypatch: pytest.MonkeyPatch, command: object) -> str:
    monkeypatch.setattr(build, "reexec_in_venv", lambda: None)
    monkeypatch.setattr(build, "COMMANDS", {"step": command})
    monkeypatch.setattr(sys, "argv", ["build.py", "step"])
    with pytest.raises(SystemExit) as ended:
        build.main()
    return str(ended.value.code)


def test_a_failed_step_ends_with_a_message_not_a_traceback(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def fails(_: list[str]) -> None:
        build.run([sys.executable, "-c", "raise SystemExit(3)"])

    message = run_main(monkeypatch, fails)
    assert message.startswith("[build] failed (exit status 3): ")
    assert "raise SystemExit(3)" in message and "run the same command again" in message


def test_an_interrupted_step_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(_: list[str]) -> None:
        raise KeyboardInterrupt

    assert run_main(monkeypatch, interrupted) == "130"


def test_a_venv_whose_python_is_gone_is_made_anew(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A venv made from an interpreter that was since removed or upgraded: bin/python dangles."""
    venv = tmp_path / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    for name in ("python", "python3"):
        (venv / "bin" / name).unlink()
        (venv / "bin" / name).symlink_to(tmp_path / "uninstalled" / "python3")
    (venv / ".loaderx-requirements").write_text("\n".join(build.DEV_REQUIREMENTS + build.TEST_EXTRAS))
    monkeypatch.setattr(build, "VENV", venv)
    installs: list[list[str]] = []
    real_run_long = build.run_long

    def run_long(cmd: list[str], doing: str, expect: str, cwd: Path = build.ROOT,
                 env: dict[str, str] | None = None) -> None:
        if "pip" in cmd:
            installs.append(cmd)  # the real pip installs would take minutes
        else:
            real_run_long(cmd, doing, expect, cwd, env)

    monkeypatch.setattr(build, "run_long", run_long)
    build.ensure_venv()
    done = subprocess.run([str(venv / "bin" / "python"), "-c", "import pip, sys; print(sys.prefix)"],
                          capture_output=True, text=True, check=True)
    assert Path(done.stdout.strip()) == venv
    assert len(installs) == 2 and installs[-1][-1] == build.TEST_EXTRAS[-1]

