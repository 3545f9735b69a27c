"""A loopback HTTP/1.1 proxy that makes a local server look like a remote one: latency per
request, a bandwidth cap on responses, and injected faults (500s, truncated bodies, an endpoint
that goes away and comes back).

    python tools/netproxy.py --upstream http://127.0.0.1:PORT --latency-ms 20 --mbps 50

The benchmarks and tests of the remote reader put it between obstore and moto's S3 server. It
speaks just enough HTTP/1.1 to find message boundaries (request heads and Content-Length or
chunked bodies, responses framed by Content-Length, chunked encoding or the connection's end),
so keep-alive connections carry many requests and each request can be delayed, failed or cut
on its own. Messages pass through byte for byte, the Host header included: a client's request
signature (SigV4 signs Host) stays what the client computed. Standard library only; the event
loop runs in a background thread, so a test drives it with plain calls:

    with NetProxy("http://127.0.0.1:9000", latency_s=0.02, bytes_per_s=50e6) as proxy:
        store = S3Store(bucket, endpoint=proxy.url, ...)
        proxy.set_faults(fail_next=2)          # the next two GETs get an S3-style 500
        proxy.stop(); proxy.restart()          # the endpoint dies, then returns on its port
        proxy.stats()                          # requests and bytes forwarded so far
        proxy.hold_after("schema"); proxy.release()  # hold what follows a request, then free it
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import threading
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from types import TracebackType
from typing import Final

HOST: Final = "127.0.0.1"
PIECE_SIZE: Final = 64 * 1024  # bytes written per bandwidth grant: connections interleave at this grain
HEAD_SIZE_MAX: Final = 64 * 1024
BODILESS_STATUSES: Final = frozenset({204, 304})
STOP_TIMEOUT_S: Final = 10.0
HOLD_POLL_S: Final = 0.005  # how often a held request looks whether release() was called
ERROR_BODY: Final = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InternalError</Code>'
                     "<Message>We encountered an internal error. Please try again.</Message>"
                     "<RequestId>netproxy-{number}</RequestId></Error>\n")


class ProxyError(RuntimeError):
    """The proxy was configured or driven wrongly (bad upstream, start twice, ...)."""


class MessageError(Exception):
    """A message the proxy cannot frame; the connection is dropped."""


@dataclass(frozen=True)
class Faults:
    """What to break. Counting starts at `set_faults`; only requests whose method is in
    `methods` count and are failed; a truncation applies to the next responses with a body."""

    fail_every: int = 0      # answer every k-th matching request with a 500 (0: never)
    fail_next: int = 0       # answer the next n matching requests with a 500
    truncate_next: int = 0   # send the next n response bodies half, then close the connection
    methods: tuple[str, ...] = ("GET",)


@dataclass
class ProxyStats:
    """What went through since the start or the last `reset_stats`."""

    requests: int = 0            # requests read from clients
    forwarded: int = 0           # requests sent to the server (not failed by the proxy)
    request_bytes: int = 0       # request bytes sent to the server (heads and bodies)
    response_bytes: int = 0      # response bytes sent to clients (heads and bodies)
    failed: int = 0              # 500s the proxy answered itself
    truncated: int = 0           # responses cut short
    connections: int = 0         # client connections accepted


@dataclass
class Request:
    method: str
    head: bytes
    body: bytes
    close: bool  # the client asked to close after this exchange


@dataclass
class ResponseHead:
    version: str
    status: int
    raw: bytes
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def close(self) -> bool:
        """The server ends the connection after this response."""
        return wants_close(self.headers, self.version)


class Link:
    """The shared downlink: a token bucket whose rate caps response bytes over all connections.
    A burst of one piece keeps short idle gaps from being lost entirely."""

    def __init__(self, bytes_per_s: float | None) -> None:
        self.bytes_per_s = bytes_per_s
        self._free_at = 0.0  # loop time at which everything granted so far has been sent

    async def send(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        for start in range(0, len(data), PIECE_SIZE):
            piece = data[start:start + PIECE_SIZE]
            await self._grant(len(piece))
            writer.write(piece)
            await writer.drain()

    async def _grant(self, size: int) -> None:
        rate = self.bytes_per_s
        if not rate:
            return
        now = time.monotonic()
        burst_s = PIECE_SIZE / rate
        self._free_at = max(self._free_at, now - burst_s) + size / rate
        if self._free_at > now:
            await asyncio.sleep(self._free_at - now)


class Controls:
    """What the test thread sets and the proxy's thread reads: the faults still to inject, the
    latency, and the counts so far, behind one lock."""

    def __init__(self, latency_s: float) -> None:
        self.latency_s = latency_s
        self._lock = threading.Lock()
        self._faults = Faults()
        self._matched = 0  # requests of the fault methods since the faults were set
        self._stats = ProxyStats()
        # hold_after: once a request whose target contains this was answered, later requests
        # wait (holding) until release(); the test then acts between two requests for sure.
        self._hold_after: str | None = None
        self._holding = False

    def hold_after(self, target: str | None) -> None:
        with self._lock:
            self._hold_after, self._holding = target, False

    def note_answered(self, request: Request) -> None:
        """Starts holding when request is the one hold_after names."""
        with self._lock:
            if self._hold_after is not None and self._hold_after in request_target(request):
                self._holding = True

    def holding(self) -> bool:
        with self._lock:
            return self._holding

    def set_faults(self, faults: Faults) -> None:
        with self._lock:
            self._faults, self._matched = faults, 0

    def faults(self) -> Faults:
        with self._lock:
            return self._faults

    def stats(self, reset: bool = False) -> ProxyStats:
        with self._lock:
            done = replace(self._stats)
            if reset:
                self._stats = ProxyStats()
            return done

    def take_failure(self, method: str) -> bool:
        """Whether this request gets a 500 from the proxy (and counts it)."""
        with self._lock:
            faults = self._faults
            if method not in faults.methods:
                return False
            self._matched += 1
            fail = faults.fail_next > 0 or (faults.fail_every > 0
                                            and self._matched % faults.fail_every == 0)
            if faults.fail_next > 0:
                self._faults = replace(faults, fail_next=faults.fail_next - 1)
            self._stats.failed += fail
            return fail

    def take_truncation(self) -> bool:
        """Whether this response body gets cut (and counts it)."""
        with self._lock:
            if self._faults.truncate_next == 0:
                return False
            self._faults = replace(self._faults, truncate_next=self._faults.truncate_next - 1)
            self._stats.truncated += 1
            return True

    def count_connection(self) -> None:
        with self._lock:
            self._stats.connections += 1

    def count_request(self) -> int:
        """Counts a request read from a client; returns its number (from 1)."""
        with self._lock:
            self._stats.requests += 1
            return self._stats.requests

    def count_forward(self, size: int) -> None:
        with self._lock:
            self._stats.forwarded += 1
            self._stats.request_bytes += size

    def count_response(self, size: int) -> None:
        with self._lock:
            self._stats.response_bytes += size


def request_target(request: Request) -> str:
    """The request line's target (path and query)."""
    parts = request.head.split(b"\r\n", 1)[0].split(b" ")
    return parts[1].decode("latin-1") if len(parts) > 1 else ""


def parse_upstream(url: str) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname or parts.path not in ("", "/"):
        raise ProxyError(f"upstream {url!r}: expected http://HOST:PORT (plain http, no path)")
    return parts.hostname, parts.port or 80


def header_fields(head: bytes) -> dict[str, str]:
    """The head's header fields, names lowercased (a repeated field keeps its last value)."""
    fields = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, colon, value = line.partition(":")
        if colon:
            fields[name.strip().lower()] = value.strip()
    return fields


def content_length(fields: dict[str, str]) -> int | None:
    if "content-length" not in fields:
        return None
    try:
        size = int(fields["content-length"])
    except ValueError:
        raise MessageError(f"bad Content-Length {fields['content-length']!r}") from None
    if size < 0:
        raise MessageError(f"negative Content-Length {size}")
    return size


def is_chunked(fields: dict[str, str]) -> bool:
    return "chunked" in fields.get("transfer-encoding", "").lower()


def wants_close(fields: dict[str, str], version: str) -> bool:
    tokens = {t.strip().lower() for t in fields.get("connection", "").split(",")}
    return "close" in tokens or (version == "HTTP/1.0" and "keep-alive" not in tokens)


async def read_head(reader: asyncio.StreamReader) -> bytes | None:
    """A message head up to and including its blank line; None at a clean end of stream."""
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as error:
        if not error.partial:
            return None
        raise MessageError("the connection ended inside a message head") from None
    except asyncio.LimitOverrunError:
        raise MessageError(f"a message head longer than {HEAD_SIZE_MAX} bytes") from None


async def read_chunked(reader: asyncio.StreamReader) -> bytes:
    """A chunked body as sent (sizes, extensions and trailers kept), through its last chunk."""
    raw = bytearray()
    while True:
        line = await reader.readuntil(b"\r\n")
        raw += line
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise MessageError(f"bad chunk size line {bytes(line)!r}") from None
        if size == 0:
            break
        raw += await reader.readexactly(size + 2)
    while True:  # trailers, then the blank line
        line = await reader.readuntil(b"\r\n")
        raw += line
        if line == b"\r\n":
            return bytes(raw)


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    head = await read_head(reader)
    if head is None:
        return None
    request_line = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
    if len(request_line) != 3:
        raise MessageError(f"bad request line {request_line!r}")
    method, _, version = request_line
    fields = header_fields(head)
    if is_chunked(fields):
        body = await read_chunked(reader)
    else:
        body = await reader.readexactly(content_length(fields) or 0)
    return Request(method.upper(), head, body, wants_close(fields, version))


def parse_response_head(raw: bytes) -> ResponseHead:
    status_line = raw.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
    try:
        status = int(status_line[1])
    except (IndexError, ValueError):
        raise MessageError(f"bad status line {status_line!r}") from None
    return ResponseHead(status_line[0], status, raw, header_fields(raw))


def with_connection(head: bytes, keep_alive: bool) -> bytes:
    """The response head with its Connection field set to what the proxy does with the client's
    connection: Connection is hop-by-hop (RFC 9112), and the proxy keeps a client's connection
    alive even when the server (moto closes after every response) does not."""
    lines = [line for line in head[:-4].split(b"\r\n") if not line.lower().startswith(b"connection:")]
    lines.append(b"Connection: keep-alive" if keep_alive else b"Connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n"


def error_response(number: int, close: bool) -> bytes:
    body = ERROR_BODY.format(number=number).encode()
    head = ("HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/xml\r\n"
            f"Content-Length: {len(body)}\r\nx-amz-request-id: netproxy-{number}\r\n"
            f"Connection: {'close' if close else 'keep-alive'}\r\n\r\n")
    return head.encode() + body


class Upstream:
    """One connection to the server, opened when first needed and again after the server
    closed it (each client connection has its own, as a forward proxy would)."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.address = address
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.used = False  # it carried an exchange already: the server may have dropped it idle

    async def send(self, data: bytes) -> None:
        if self.writer is None or self.writer.is_closing():
            self.reader, self.writer = await asyncio.open_connection(*self.address, limit=HEAD_SIZE_MAX)
            self.used = False
        self.writer.write(data)
        await self.writer.drain()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.transport.abort()
        self.reader = self.writer = None
        self.used = False


class Exchange:
    """Carries one client connection's requests to the server and its responses back."""

    def __init__(self, controls: Controls, link: Link, upstream: tuple[str, int],
                 reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.controls = controls
        self.link = link
        self.reader = reader
        self.writer = writer
        self.upstream = Upstream(upstream)

    async def run(self) -> None:
        try:
            while await self._one():
                pass
        except (MessageError, ConnectionError, asyncio.IncompleteReadError, OSError):
            pass  # either side broke the exchange: drop the connection, as a network would
        finally:
            self.upstream.close()
            self.writer.transport.abort()

    async def _one(self) -> bool:
        """One request and its response; False when the connection should end."""
        request = await read_request(self.reader)
        if request is None:
            return False
        number = self.controls.count_request()
        while self.controls.holding():
            await asyncio.sleep(HOLD_POLL_S)
        if self.controls.latency_s > 0:
            await asyncio.sleep(self.controls.latency_s)
        if self.controls.take_failure(request.method):
            await self._pass(error_response(number, request.close))
            return not request.close
        keep_alive = await self._forward(request)
        self.controls.note_answered(request)
        return keep_alive

    async def _forward(self, request: Request) -> bool:
        head = await self._send_and_read_head(request)
        truncate = False
        if self._has_body(request, head):
            truncate = self.controls.take_truncation()
        if truncate:
            await self._send_truncated(head)
            return False
        # A body that ends with the server's connection can only end the client's too.
        framed = (not self._has_body(request, head) or is_chunked(head.headers)
                  or content_length(head.headers) is not None)
        keep_alive = framed and not request.close
        await self._pass(with_connection(head.raw, keep_alive))
        await self._relay_body(request, head)
        if head.close:
            self.upstream.close()
        return keep_alive

    async def _send_and_read_head(self, request: Request) -> ResponseHead:
        """Sends the request and reads the response head. A kept-alive server connection that
        the server closed while idle gets one more try on a new connection (the server read
        nothing of the request then); any other failure ends the exchange."""
        message = request.head + request.body
        for attempt in (0, 1):
            reused = attempt == 0 and self.upstream.used
            try:
                await self.upstream.send(message)
                assert self.upstream.reader is not None
                raw = await read_head(self.upstream.reader)
            except (ConnectionError, OSError):
                if not reused:
                    raise
                raw = None
            if raw is not None:
                break
            self.upstream.close()
            if not reused:
                raise MessageError("the server closed the connection without a response")
        assert raw is not None
        self.upstream.used = True
        self.controls.count_forward(len(message))
        head = parse_response_head(raw)
        if 100 <= head.status < 200:
            raise MessageError("interim 1xx responses are not relayed")
        return head

    @staticmethod
    def _has_body(request: Request, head: ResponseHead) -> bool:
        if request.method == "HEAD" or head.status in BODILESS_STATUSES:
            return False
        return content_length(head.headers) != 0

    async def _relay_body(self, request: Request, head: ResponseHead) -> None:
        if not self._has_body(request, head):
            return
        upstream = self.upstream.reader
        assert upstream is not None
        if is_chunked(head.headers):
            await self._pass(await read_chunked(upstream))
            return
        remaining = content_length(head.headers)
        if remaining is None:  # framed by the end of the connection
            while piece := await upstream.read(PIECE_SIZE):
                await self._pass(piece)
            self.upstream.close()
            return
        while remaining > 0:
            piece = await upstream.read(min(PIECE_SIZE, remaining))
            if not piece:
                raise MessageError("the server closed the connection inside a body")
            remaining -= len(piece)
            await self._pass(piece)

    async def _pass(self, data: bytes) -> None:
        await self.link.send(self.writer, data)
        self.controls.count_response(len(data))

    async def _send_truncated(self, head: ResponseHead) -> None:
        """The head and the first half of the body as the server sent it, then the end."""
        upstream = self.upstream.reader
        assert upstream is not None
        if is_chunked(head.headers):
            body = await read_chunked(upstream)
        else:
            size = content_length(head.headers)
            body = await (upstream.read() if size is None else upstream.readexactly(size))
        self.upstream.close()
        await self._pass(with_connection(head.raw, False) + body[:len(body) // 2])


class NetProxy:
    """The proxy on 127.0.0.1:`port` (a free one when 0) in front of `upstream` (http://HOST:PORT).
    `latency_s` delays each request before it is forwarded or failed; `bytes_per_s` caps the
    response bytes of all connections together (None: no cap)."""

    def __init__(self, upstream: str, *, port: int = 0, latency_s: float = 0.0,
                 bytes_per_s: float | None = None) -> None:
        self.upstream_address = parse_upstream(upstream)
        self.port = port
        self.link = Link(None)
        self.controls = Controls(0.0)
        self.set_latency(latency_s)
        self.set_bandwidth(bytes_per_s)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        if not self.port:
            raise ProxyError("the proxy has no port until it first starts")
        return f"http://{HOST}:{self.port}"

    @property
    def running(self) -> bool:
        return self._thread is not None

    def __enter__(self) -> NetProxy:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()

    def start(self) -> NetProxy:
        """Listens (on the port of the previous start, if any) and serves in a background thread."""
        if self._thread is not None:
            raise ProxyError(f"the proxy on port {self.port} is already running")
        loop = asyncio.new_event_loop()
        try:
            self._server = loop.run_until_complete(asyncio.start_server(
                self._serve, HOST, self.port, limit=HEAD_SIZE_MAX, reuse_address=True))
        except OSError as error:
            loop.close()
            raise ProxyError(f"cannot listen on {HOST}:{self.port}: {error}") from error
        self.port = self._server.sockets[0].getsockname()[1]
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name=f"netproxy-{self.port}",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops listening and drops every open connection (clients see them break)."""
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        asyncio.run_coroutine_threadsafe(self._shut(), loop).result(STOP_TIMEOUT_S)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(STOP_TIMEOUT_S)
        loop.close()
        self._thread = self._loop = self._server = None

    def restart(self) -> None:
        """Stops, then listens again on the same port."""
        self.stop()
        self.start()

    def set_faults(self, *, fail_every: int = 0, fail_next: int = 0, truncate_next: int = 0,
                   methods: Sequence[str] = ("GET",)) -> None:
        """Replaces the faults to inject (all zero: none) and restarts their counting."""
        if min(fail_every, fail_next, truncate_next) < 0:
            raise ProxyError("fault counts must be >= 0")
        self.controls.set_faults(
            Faults(fail_every, fail_next, truncate_next, tuple(m.upper() for m in methods)))

    def faults(self) -> Faults:
        """The faults still to inject (fail_next and truncate_next count down)."""
        return self.controls.faults()

    def hold_after(self, target: str) -> None:
        """Once a request whose target (path and query) contains `target` has been answered,
        every later request waits in the proxy until release(): a test can act between that
        request and the next one however slow the machine is."""
        self.controls.hold_after(target)

    def release(self) -> None:
        """Lets held requests go on, and holds no more."""
        self.controls.hold_after(None)

    def set_latency(self, latency_s: float) -> None:
        """The delay added to each request from now on."""
        if latency_s < 0:
            raise ProxyError(f"latency_s must be >= 0, got {latency_s}")
        self.controls.latency_s = latency_s

    def set_bandwidth(self, bytes_per_s: float | None) -> None:
        """The cap on response bytes per second from now on (None: no cap)."""
        if bytes_per_s is not None and bytes_per_s <= 0:
            raise ProxyError(f"bytes_per_s must be > 0 or None, got {bytes_per_s}")
        self.link.bytes_per_s = bytes_per_s

    def stats(self) -> ProxyStats:
        return self.controls.stats()

    def reset_stats(self) -> ProxyStats:
        """The counts so far, which start again from zero (one epoch's requests and bytes)."""
        return self.controls.stats(reset=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.controls.count_connection()
        try:
            await Exchange(self.controls, self.link, self.upstream_address, reader, writer).run()
        except asyncio.CancelledError:
            pass  # stop() cancels every connection; ending quietly keeps asyncio from logging it
        finally:
            self._tasks.discard(task)

    async def _shut(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--upstream", required=True, help="the server, http://HOST:PORT")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (default: a free one)")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="delay added to each request")
    parser.add_argument("--mbps", type=float, default=None,
                        help="cap on response bandwidth in megabytes (10^6 bytes) per second")
    parser.add_argument("--fail-every", type=int, default=0, help="answer every k-th GET with a 500")
    parser.add_argument("--fail-next", type=int, default=0, help="answer the first n GETs with a 500")
    parser.add_argument("--truncate-next", type=int, default=0,
                        help="cut the first n response bodies in half")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        proxy = NetProxy(args.upstream, port=args.port, latency_s=args.latency_ms / 1000,
                         bytes_per_s=None if args.mbps is None else args.mbps * 1e6)
        proxy.set_faults(fail_every=args.fail_every, fail_next=args.fail_next,
                         truncate_next=args.truncate_next)
        proxy.start()
    except ProxyError as error:
        print(f"netproxy: {error}", file=sys.stderr)
        return 2
    done = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: done.set())
    print(f"netproxy: listening on {proxy.url}, forwarding to {args.upstream}", flush=True)
    while not done.wait(0.2):
        pass
    proxy.stop()
    print(json.dumps(asdict(proxy.stats())), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
