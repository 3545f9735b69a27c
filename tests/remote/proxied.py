"""tools/netproxy.py for the remote tests, and a dataset on the test S3 server reached through
it: the proxy delays, fails or cuts requests, and stops and starts again on its port."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from loaderx.converter import from_numpy

from .s3_server import S3Server
from .test_remote_read import images, publish

ROOT = Path(__file__).resolve().parents[2]
if not (ROOT / "tools" / "netproxy.py").exists():
    pytest.skip("the repository's tools/ is not beside these tests", allow_module_level=True)
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools.netproxy import NetProxy  # noqa: E402


@contextmanager
def proxied_images(s3_env: S3Server, bucket: str, tmp_path: Path,
                   monkeypatch: pytest.MonkeyPatch, *, retry_seconds: float,
                   timeout_seconds: float) -> Iterator[tuple[str, np.ndarray, NetProxy]]:
    """300 zstd records of 500 bytes published on the server; yields their URL, the data and
    the proxy the environment's endpoint points at, with the retry budget and request timeout
    given (short, so that a read fails within seconds once the proxy stops)."""
    data = images(300, 500)
    from_numpy(str(tmp_path / "local"), data, codec="zstd")
    url = publish(s3_env, bucket, tmp_path / "local")
    with NetProxy(s3_env.endpoint) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        monkeypatch.setenv("LOADERX_REMOTE_RETRY_SECONDS", str(retry_seconds))
        monkeypatch.setenv("LOADERX_REMOTE_TIMEOUT_SECONDS", str(timeout_seconds))
        yield url, data, proxy


__all__ = ["NetProxy", "ROOT", "proxied_images"]
