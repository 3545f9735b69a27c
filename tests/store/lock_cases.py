"""What the locking tests (test_zrecord_locks.py, test_zrecord_readonly.py,
test_zrecord_links.py) share: records that carry their own id, a digest of a folder's files,
and a Python child process driven line by line."""

from __future__ import annotations

import hashlib
import os
import pwd
import subprocess
import sys
import textwrap
from pathlib import Path


REPO: str = str(Path(__file__).resolve().parents[2])


def record(ident: int) -> bytes:
    """Record `ident`: its id followed by bytes derived from it (so any mix-up shows)."""
    body = hashlib.sha256(ident.to_bytes(8, "little")).digest() * (1 + ident % 5)
    return ident.to_bytes(8, "little") + body


def ident_of(data: bytes) -> int:
    ident = int.from_bytes(data[:8], "little")
    assert data == record(ident), f"record {ident} has wrong bytes"
    return ident


def folder_digest(path: str) -> dict[str, tuple[int, str]]:
    """Every file's size and the sha256 of its first MiB (the header, the table of the first
    65,536 records and the start of each chunk: all these small tests use), to prove nothing
    changed. Reading whole files would read the sparse 4 GiB chunks."""
    out = {}
    for name in sorted(os.listdir(path)):
        with open(os.path.join(path, name), "rb") as f:
            out[name] = (os.fstat(f.fileno()).st_size, hashlib.sha256(f.read(1 << 20)).hexdigest())
    return out


def python(code: str, *, user: str | None = None) -> subprocess.Popen[str]:
    """Starts `code` in a fresh interpreter (optionally as another user), pipes on stdin/stdout."""
    command = [sys.executable, "-c", textwrap.dedent(code)]
    if user is not None:
        entry = pwd.getpwnam(user)
        ids = [f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups"]
        command = ["setpriv", *ids, *command]
    env = {**os.environ, "PYTHONPATH": REPO}
    return subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=env, cwd="/",
    )


def finish(process: subprocess.Popen[str]) -> str:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, f"child failed ({process.returncode}):\n{err}"
    return out
