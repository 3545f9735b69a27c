"""verify() of a dataset opened from a URL, cut short by a real Ctrl-C: the window of ranges it
had queued is not downloaded on, neither by the pool nor by the close() that waits for it."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from loaderx._remote import range_plan  # private: small ranges, so that a window holds many
from loaderx.dataset import DenseDataset

from .proxied import proxied_images
from .s3_server import S3Server

IN_FLIGHT = 2
LATENCY_S = 0.2


def test_ctrl_c_in_a_remote_verify_leaves_its_window_undownloaded(
        s3_env: S3Server, s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranges of about 2 kB (some 70 in verify's 64 MiB window), two requests in flight, 0.2 s
    a request: a SIGINT 0.6 s in. The verify's queued ranges used to run on after it (they
    sent their requests whether or not anything waited for them), and close() waited for every
    one: the whole window, which with a store down is each request's retry budget in turn.
    Now the interrupted verify cancels those not started, a queued one refuses once close()
    began, and only the requests in flight at the interrupt are sent after it."""
    monkeypatch.setattr(range_plan, "RANGE_BYTES_MAX", 2000)
    monkeypatch.setenv("LOADERX_REMOTE_REQUESTS", str(IN_FLIGHT))
    with proxied_images(s3_env, s3_bucket, tmp_path, monkeypatch,
                        retry_seconds=3, timeout_seconds=2) as (url, data, proxy):
        ds = DenseDataset(url, cache_dir=tmp_path / "cache")
        proxy.set_latency(LATENCY_S)
        proxy.reset_stats()
        seen: list[int] = []

        def interrupt(*_: object) -> None:
            seen.append(proxy.stats().requests)
            signal.raise_signal(signal.SIGINT)

        previous = signal.signal(signal.SIGALRM, interrupt)
        try:
            signal.setitimer(signal.ITIMER_REAL, 3 * LATENCY_S)
            with pytest.raises(KeyboardInterrupt):
                ds.verify()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            ds.close()
        time.sleep(2 * LATENCY_S)  # not a check: a request still sent would be counted by now
        after = proxy.stats().requests
    assert seen and 0 < seen[0] < 30, seen  # it was interrupted early in its window
    # Those in flight at the interrupt, and one each that a pool thread had just taken.
    assert after <= seen[0] + 2 * IN_FLIGHT, (seen, after)
