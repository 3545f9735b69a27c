"""tools/netproxy.py between obstore and moto's real server: bytes pass unchanged, latency and the
bandwidth cap show, injected 500s, truncations and a stopped endpoint reach the client as errors.

Timings are asserted as lower bounds only: a loaded machine makes everything slower, never faster.
"""

from __future__ import annotations

import http.client
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import obstore
import pytest
from obstore.exceptions import GenericError
from obstore.store import S3Store

from .s3_server import S3Server, s3_store
from .server_process import HOST

ROOT = Path(__file__).resolve().parents[2]
if not (ROOT / "tools" / "netproxy.py").exists():
    pytest.skip("the repository's tools/ is not beside these tests", allow_module_level=True)
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools.netproxy import PIECE_SIZE, NetProxy, ProxyError  # noqa: E402

OBJECT_SIZE = 3_000_000


@pytest.fixture
def proxy(s3_server: S3Server) -> Iterator[NetProxy]:
    with NetProxy(s3_server.endpoint) as started:
        yield started


@pytest.fixture
def data(s3_server: S3Server, s3_bucket: str) -> bytes:
    """OBJECT_SIZE random bytes at s3://<bucket>/obj, put directly (not through the proxy)."""
    payload = os.urandom(OBJECT_SIZE)
    s3_server.put(s3_bucket, "obj", payload)
    return payload


def through(proxy: NetProxy, bucket: str, max_retries: int = 0) -> S3Store:
    return s3_store(proxy.url, bucket, max_retries=max_retries)


def elapsed(action: Callable[[], object]) -> float:
    started = time.monotonic()
    action()
    return time.monotonic() - started


def test_gets_ranges_and_puts_pass_byte_exact(proxy: NetProxy, s3_server: S3Server,
                                              s3_bucket: str, data: bytes) -> None:
    store = through(proxy, s3_bucket)
    assert bytes(obstore.get(store, "obj").bytes()) == data
    assert bytes(obstore.get_range(store, "obj", start=12_345, end=1_234_567)) == data[12_345:1_234_567]
    ranges = obstore.get_ranges(store, "obj", starts=[0, 999_999, OBJECT_SIZE - 10],
                                ends=[1, 2_000_000, OBJECT_SIZE])
    assert [bytes(r) for r in ranges] == [data[:1], data[999_999:2_000_000], data[-10:]]
    small, large = os.urandom(1000), os.urandom(11_000_000)
    obstore.put(store, "put/small", small)
    obstore.put(store, "put/empty", b"")
    obstore.put(store, "put/large", large, use_multipart=True, chunk_size=5 * 1024 * 1024)
    direct = s3_store(s3_server.endpoint, s3_bucket)
    assert bytes(obstore.get(direct, "put/small").bytes()) == small
    assert bytes(obstore.get(direct, "put/empty").bytes()) == b""
    assert bytes(obstore.get(direct, "put/large").bytes()) == large
    assert bytes(obstore.get(store, "put/empty").bytes()) == b""
    assert obstore.head(store, "obj")["e_tag"] == obstore.head(direct, "obj")["e_tag"]
    listed = sorted(m["path"] for m in obstore.list(store).collect())
    assert listed == ["obj", "put/empty", "put/large", "put/small"]


def test_keep_alive_carries_many_requests_on_one_connection(proxy: NetProxy, s3_bucket: str,
                                                            data: bytes) -> None:
    """moto closes after every response; the proxy still keeps the client's connection open."""
    store = through(proxy, s3_bucket)
    for start in range(0, 20_000, 1000):
        assert bytes(obstore.get_range(store, "obj", start=start, length=100)) == data[start:start + 100]
    stats = proxy.stats()
    assert stats.requests == stats.forwarded == 20
    assert stats.connections < 20


def test_counts_requests_and_bytes_and_resets_them(proxy: NetProxy, s3_bucket: str,
                                                   data: bytes) -> None:
    store = through(proxy, s3_bucket)
    obstore.get(store, "obj").bytes()
    obstore.put(store, "up", b"x" * 5000)
    stats = proxy.reset_stats()
    assert (stats.requests, stats.forwarded, stats.failed, stats.truncated) == (2, 2, 0, 0)
    assert OBJECT_SIZE < stats.response_bytes < OBJECT_SIZE + 10_000
    assert 5000 < stats.request_bytes < 5000 + 10_000
    assert proxy.stats().requests == 0 and proxy.stats().response_bytes == 0


def test_requests_after_the_named_one_wait_until_release(proxy: NetProxy, s3_bucket: str,
                                                         data: bytes) -> None:
    store = through(proxy, s3_bucket)
    proxy.hold_after("/marker")
    obstore.put(store, "before", b"b")
    obstore.put(store, "marker", b"m")  # answered: what follows waits
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(bytes(obstore.get(store, "before").bytes())),
                              daemon=True)
    reader.start()
    while proxy.stats().requests < 3:  # the GET has reached the proxy
        time.sleep(0.005)
    reader.join(0.3)
    assert reader.is_alive() and proxy.stats().forwarded == 2  # held, not sent on
    proxy.release()
    reader.join(60)
    assert got == [b"b"] and proxy.stats().forwarded == 3


def test_latency_is_added_to_every_request(s3_server: S3Server, s3_bucket: str,
                                           data: bytes) -> None:
    with NetProxy(s3_server.endpoint, latency_s=0.05) as slow:
        store = through(slow, s3_bucket)
        took = elapsed(lambda: [obstore.head(store, "obj") for _ in range(8)])
    assert took >= 8 * 0.05


def test_bandwidth_cap_bounds_one_transfer_and_all_together(s3_server: S3Server, s3_bucket: str,
                                                            data: bytes) -> None:
    rate = 10e6
    burst = PIECE_SIZE  # the link grants one piece ahead when it was idle
    with NetProxy(s3_server.endpoint, bytes_per_s=rate) as capped:
        store = through(capped, s3_bucket)
        took = elapsed(lambda: obstore.get(store, "obj").bytes())
        assert took >= (OBJECT_SIZE - burst) / rate
        # Two clients at once share the one link: together no faster than one.
        results: list[bytes] = []

        def fetch() -> None:
            results.append(bytes(obstore.get(through(capped, s3_bucket), "obj").bytes()))

        def both() -> None:
            threads = [threading.Thread(target=fetch) for _ in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()

        took = elapsed(both)
    assert results == [data, data]
    assert took >= (2 * OBJECT_SIZE - burst) / rate


def test_injected_500s_fail_a_client_without_retries(proxy: NetProxy, s3_bucket: str,
                                                     data: bytes) -> None:
    store = through(proxy, s3_bucket, max_retries=0)
    proxy.set_faults(fail_next=2)
    for _ in range(2):
        with pytest.raises(GenericError, match="(?s)500 Internal Server Error.*<Code>InternalError</Code>"):
            obstore.get(store, "obj").bytes()
    assert proxy.faults().fail_next == 0
    assert bytes(obstore.get(store, "obj").bytes()) == data
    stats = proxy.stats()
    assert (stats.requests, stats.failed, stats.forwarded) == (3, 2, 1)


def test_injected_500s_are_retried_by_a_client_with_retries(proxy: NetProxy, s3_bucket: str,
                                                            data: bytes) -> None:
    proxy.set_faults(fail_next=3)
    assert bytes(obstore.get(through(proxy, s3_bucket, max_retries=5), "obj").bytes()) == data
    stats = proxy.stats()
    assert (stats.requests, stats.failed, stats.forwarded) == (4, 3, 1)


def test_every_kth_get_fails_and_other_methods_pass(proxy: NetProxy, s3_bucket: str,
                                                    data: bytes) -> None:
    store = through(proxy, s3_bucket, max_retries=0)
    proxy.set_faults(fail_every=3)
    outcomes: list[bool | None] = []
    for index in range(9):
        obstore.head(store, "obj")  # HEAD is not among the faulted methods: never fails
        try:
            got = bytes(obstore.get_range(store, "obj", start=index, length=10))
            outcomes.append(got == data[index:index + 10])
        except GenericError:
            outcomes.append(None)
    assert outcomes == [True, True, None] * 3
    proxy.set_faults()
    assert bytes(obstore.get(store, "obj").bytes()) == data


def test_a_truncated_body_is_an_error_not_short_data(proxy: NetProxy, s3_bucket: str,
                                                     data: bytes) -> None:
    store = through(proxy, s3_bucket, max_retries=0)
    proxy.set_faults(truncate_next=1)
    obstore.head(store, "obj")  # no body: not the one cut
    with pytest.raises(GenericError, match="body error"):
        obstore.get(store, "obj").bytes()
    proxy.set_faults(truncate_next=1)
    with pytest.raises(GenericError):
        obstore.get_range(store, "obj", start=100, end=200_100)
    stats = proxy.stats()
    assert stats.truncated == 2
    assert bytes(obstore.get(store, "obj").bytes()) == data


def test_stop_breaks_connections_and_restart_serves_again_on_the_same_port(
        proxy: NetProxy, s3_bucket: str, data: bytes) -> None:
    store = through(proxy, s3_bucket, max_retries=0)
    assert bytes(obstore.get_range(store, "obj", start=0, length=10)) == data[:10]
    port = proxy.port
    proxy.stop()
    assert not proxy.running
    with pytest.raises(GenericError):
        obstore.get_range(store, "obj", start=0, length=10)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((HOST, port), timeout=2).close()
    proxy.restart()
    assert proxy.port == port and proxy.running
    assert bytes(obstore.get(store, "obj").bytes()) == data


def test_stop_in_the_middle_of_a_transfer_fails_it(s3_server: S3Server, s3_bucket: str,
                                                   data: bytes) -> None:
    errors: list[BaseException] = []
    with NetProxy(s3_server.endpoint, bytes_per_s=1e6) as slow:  # 3 s for the object
        store = through(slow, s3_bucket)

        def fetch() -> None:
            try:
                obstore.get(store, "obj").bytes()
            except GenericError as error:
                errors.append(error)

        reader = threading.Thread(target=fetch)
        reader.start()
        time.sleep(0.5)
        slow.stop()
        reader.join(60)
        assert not reader.is_alive()
        slow.start()
        assert bytes(obstore.get(store, "obj").bytes()) == data
    assert len(errors) == 1


def test_a_server_killed_and_restarted_behind_the_proxy(s3_bucket: str) -> None:
    """The S3 server itself dies (the proxy stays up): clients fail, then recover with the same
    bytes once it is back."""
    payload = os.urandom(100_000)
    with S3Server() as server, NetProxy(server.endpoint) as front:
        server.create_bucket(s3_bucket)
        etag = server.put(s3_bucket, "k", payload)
        store = through(front, s3_bucket)
        assert bytes(obstore.get(store, "k").bytes()) == payload
        server.stop()
        with pytest.raises(GenericError):
            obstore.get(store, "k").bytes()
        server.start()
        assert bytes(obstore.get(store, "k").bytes()) == payload
        assert obstore.head(store, "k")["e_tag"] == etag


class ChunkedHandler(http.server.BaseHTTPRequestHandler):
    """A real HTTP/1.1 server whose responses are chunked (/chunked), framed by the end of the
    connection (/eof) or empty (HEAD): the framings moto does not use."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802  (http.server's name)
        pieces = [b"a" * 10, b"b" * 70_000, b"c"]
        if self.path == "/eof":
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b"".join(pieces))
            self.close_connection = True
            return
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for piece in pieces:
            self.wfile.write(f"{len(piece):x};ext=1\r\n".encode() + piece + b"\r\n")
        self.wfile.write(b"0\r\nX-Trailer: yes\r\n\r\n")

    def do_PUT(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[::-1])

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture
def chunked_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer((HOST, 0), ChunkedHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{HOST}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_chunked_eof_framed_and_bodiless_responses_on_one_client_connection(
        chunked_server: str) -> None:
    expected = b"a" * 10 + b"b" * 70_000 + b"c"
    with NetProxy(chunked_server) as front:
        connection = http.client.HTTPConnection(HOST, front.port, timeout=30)
        for path in ("/chunked", "/chunked"):
            connection.request("GET", path)
            reply = connection.getresponse()
            assert reply.status == 200 and reply.read() == expected
        connection.request("PUT", "/x", body=b"0123456789")
        reply = connection.getresponse()
        assert reply.read() == b"9876543210"
        connection.request("GET", "/eof")
        reply = connection.getresponse()
        assert reply.read() == expected
        assert reply.will_close  # a body framed by the end must end the client's connection too
        connection.close()
        stats = front.stats()
    assert stats.connections == 1 and stats.requests == stats.forwarded == 4


def test_the_command_line_proxies_and_prints_its_counts(s3_server: S3Server, s3_bucket: str,
                                                        data: bytes) -> None:
    command = [sys.executable, str(ROOT / "tools" / "netproxy.py"), "--upstream",
               s3_server.endpoint, "--latency-ms", "20", "--mbps", "50"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first.startswith("netproxy: listening on http://127.0.0.1:"), first
        url = first.split()[3].rstrip(",")
        store = s3_store(url, s3_bucket, max_retries=0)
        took = elapsed(lambda: obstore.get(store, "obj").bytes())
        assert took >= 0.02 + (OBJECT_SIZE - PIECE_SIZE) / 50e6
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    counts = json.loads(out.strip().splitlines()[-1])
    assert counts["requests"] == counts["forwarded"] == 1
    assert counts["response_bytes"] > OBJECT_SIZE


def test_the_command_line_refuses_a_bad_upstream() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "netproxy.py"), "--upstream",
                           "https://example.com/x"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "expected http://HOST:PORT" in done.stderr


def test_bad_settings_raise_before_anything_starts() -> None:
    with pytest.raises(ProxyError, match="expected http://HOST:PORT"):
        NetProxy("ftp://127.0.0.1:1")
    with pytest.raises(ProxyError, match="latency_s"):
        NetProxy("http://127.0.0.1:1", latency_s=-1)
    with pytest.raises(ProxyError, match="bytes_per_s"):
        NetProxy("http://127.0.0.1:1", bytes_per_s=0)
    unstarted = NetProxy("http://127.0.0.1:1")
    with pytest.raises(ProxyError, match="no port"):
        unstarted.url  # noqa: B018
    with pytest.raises(ProxyError, match=">= 0"):
        unstarted.set_faults(fail_next=-1)
    with unstarted:
        with pytest.raises(ProxyError, match="already running"):
            unstarted.start()
        with socket.socket() as taken:
            taken.bind((HOST, 0))
            taken.listen()
            with pytest.raises(ProxyError, match="cannot listen"):
                NetProxy("http://127.0.0.1:1", port=taken.getsockname()[1]).start()
