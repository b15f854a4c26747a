"""A capturing HTTP shim: forwards every request to one upstream and keeps the exact bytes
of both bodies, so a test can compare what crossed cachet on either side.

Answers stream through as they arrive (a streamed answer is relayed chunk by chunk, so a
client sees the upstream's pace and can be interrupted mid-stream); the body bytes are
unchanged. A client that goes away mid-answer closes the shim's upstream connection too, as
the client's own disconnect would. A client that speaks cleartext HTTP/2 (prior knowledge) is
served in HTTP/2 and sent on in HTTP/2 (`shim_h2`). Loopback only.
"""

import gzip
import http.client
import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "content-length",
}
# `upgrade` crosses the shim: Codex asks for a WebSocket first. An upgraded connection is
# relayed as bytes (see `_Handler._tunnel`), and each `response.create` on it is kept as an
# exchange of its own, its answer's events as the event stream an HTTP request would get.
# What an HTTP/2 client sends first (RFC 9113 §3.4).
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
TERMINAL_EVENTS = {"response.completed", "response.incomplete", "response.failed", "error"}


def starts_http2(sock):
    """Whether the connection's first bytes are HTTP/2's preface (peeked: not taken)."""
    while True:
        head = sock.recv(len(HTTP2_PREFACE), socket.MSG_PEEK)
        if not head or not HTTP2_PREFACE.startswith(head):
            return False
        if len(head) == len(HTTP2_PREFACE):
            return True
        time.sleep(0.001)


class Exchange:
    """One request and its answer, as bytes."""

    def __init__(self, seq, method, path, req_headers, req_body):
        self.seq = seq
        self.started = time.monotonic()
        self.method = method
        self.path = path
        self.req_headers = req_headers  # list of (lower-case name, value)
        self.req_body = req_body
        self.status = None
        self.resp_headers = []
        self.resp_body = b""
        # The client went away before the whole answer reached it.
        self.client_gone = False
        # A `response.create` message of a WebSocket, kept as the request it stands for.
        self.over_socket = False
        # A stream of a cleartext HTTP/2 connection.
        self.http2 = False

    def request_json(self):
        """The request body as JSON, decoded by its content-encoding as cachet reads it
        (Codex signed in with ChatGPT sends zstd); `{}` for an empty body."""
        body = self.req_body or b"{}"
        coding = (self.header("content-encoding") or "").strip().lower()
        if coding == "zstd":
            import zstandard  # installed by scripts/agents-e2e.sh

            body = zstandard.ZstdDecompressor().decompressobj().decompress(body)
        elif coding == "gzip":
            body = gzip.decompress(body)
        return json.loads(body)

    def header(self, name, which="req"):
        headers = self.req_headers if which == "req" else self.resp_headers
        for k, v in headers:
            if k == name:
                return v
        return None


class Frames:
    """WebSocket frames (RFC 6455 §5.2) read as they cross, into whole messages."""

    def __init__(self):
        self.buf = bytearray()
        self.parts = []
        self.opcode = None

    def feed(self, data):
        """The messages `data` completes: (opcode, payload), control frames included."""
        self.buf += data
        out = []
        while len(self.buf) >= 2:
            b0, b1 = self.buf[0], self.buf[1]
            n, i = b1 & 0x7F, 2
            if n == 126:
                if len(self.buf) < 4:
                    break
                n, i = int.from_bytes(self.buf[2:4], "big"), 4
            elif n == 127:
                if len(self.buf) < 10:
                    break
                n, i = int.from_bytes(self.buf[2:10], "big"), 10
            key = None
            if b1 & 0x80:
                if len(self.buf) < i + 4:
                    break
                key, i = bytes(self.buf[i:i + 4]), i + 4
            if len(self.buf) < i + n:
                break
            payload = bytes(self.buf[i:i + n])
            del self.buf[:i + n]
            if key and n:
                mask = (key * (n // 4 + 1))[:n]
                payload = (int.from_bytes(payload, "big") ^ int.from_bytes(mask, "big")).to_bytes(n, "big")
            opcode = b0 & 0x0F
            if opcode >= 8:
                out.append((opcode, payload))
                continue
            if opcode:
                self.opcode, self.parts = opcode, []
            self.parts.append(payload)
            if b0 & 0x80:
                out.append((self.opcode, b"".join(self.parts)))
        return out


class Shim(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream):
        self.upstream = urlsplit(upstream)
        self.exchanges = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"

    def stop(self):
        self.shutdown()
        self.server_close()

    def handle_error(self, request, client_address):
        """A client that drops an idle keep-alive connection is no error; anything else is."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    def snapshot(self):
        with self.lock:
            return list(self.exchanges)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def handle(self):
        """HTTP/1.1, or cleartext HTTP/2 when the connection starts with its preface."""
        if starts_http2(self.connection):
            import shim_h2  # needs the `h2` package, which only HTTP/2 clients' runs use

            shim_h2.serve(self.connection, self.server, self._new_exchange)
            self.close_connection = True
            return
        super().handle()

    def _new_exchange(self, method, path, headers, body):
        shim = self.server
        with shim.lock:
            ex = Exchange(len(shim.exchanges), method, path, headers, body)
            shim.exchanges.append(ex)
        return ex

    def _read_body(self):
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length else b""

    def _forward(self):
        shim = self.server
        body = self._read_body()
        headers = [(k.lower(), v) for k, v in self.headers.items()]
        ex = self._new_exchange(self.command, self.path, headers, body)
        if (self.headers.get("upgrade") or "").lower() == "websocket":
            self._tunnel(ex, headers)
            return
        conn = http.client.HTTPConnection(shim.upstream.hostname, shim.upstream.port, timeout=120)
        try:
            conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for k, v in headers:
                if k not in HOP_BY_HOP:
                    conn.putheader(k, v)
            if body or self.command in ("POST", "PUT", "PATCH"):
                conn.putheader("content-length", str(len(body)))
            conn.endheaders(body)
            resp = conn.getresponse()
        except Exception as e:  # the upstream is gone: answer 502 like a proxy would
            conn.close()
            ex.status = 502
            ex.resp_body = f"shim: upstream failed: {e}".encode()
            self.send_response_only(ex.status)
            self.send_header("content-length", str(len(ex.resp_body)))
            self.end_headers()
            self.wfile.write(ex.resp_body)
            return
        try:
            self._relay(ex, resp)
        finally:
            conn.close()

    def _relay(self, ex, resp):
        """Send the upstream's answer on as it arrives: with its length when it said one,
        else chunk by chunk."""
        ex.status = resp.status
        ex.resp_headers = [(k.lower(), v) for k, v in resp.getheaders()]
        length = resp.getheader("content-length")
        bodiless = self.command == "HEAD" or resp.status in (204, 304)
        chunked = length is None and not bodiless
        self.send_response_only(ex.status)
        for k, v in ex.resp_headers:
            if k not in HOP_BY_HOP:
                self.send_header(k, v)
        if length is not None:
            self.send_header("content-length", length)
        elif chunked:
            self.send_header("transfer-encoding", "chunked")
        body = []
        try:
            self.end_headers()
            while not bodiless:
                try:
                    data = resp.read1(65536)
                except Exception:  # the upstream cut its answer: end ours the same way
                    self.close_connection = True
                    break
                if not data:
                    if chunked:
                        self.wfile.write(b"0\r\n\r\n")
                    break
                body.append(data)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
                self.wfile.flush()
        except OSError:  # the client is gone: so is our upstream request
            ex.client_gone = True
            self.close_connection = True
        finally:
            ex.resp_body = b"".join(body)

    def _tunnel(self, ex, headers):
        """A WebSocket handshake: sent upstream as it came; its answer goes back as it came,
        and after a 101 the connection is relayed byte for byte both ways until either side
        ends it. Each `response.create` is kept as an exchange of its own (a `POST` of the
        message, answered by its events as an event stream)."""
        shim = self.server
        self.close_connection = True
        up = socket.create_connection((shim.upstream.hostname, shim.upstream.port), timeout=600)
        head = [f"{self.command} {self.path} HTTP/1.1", f"host: {shim.upstream.netloc}"]
        head += [f"{k}: {v}" for k, v in headers if k != "host"]
        up.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            data = up.recv(65536)
            if not data:
                break
            buf += data
        answer, _, rest = buf.partition(b"\r\n\r\n")
        lines = answer.decode("latin-1").split("\r\n")
        ex.status = int(lines[0].split()[1]) if len(lines[0].split()) > 1 else 502
        ex.resp_headers = [(k.strip().lower(), v.strip()) for k, _, v in
                           (line.partition(":") for line in lines[1:] if ":" in line)]
        if ex.status != 101:
            length = int(ex.header("content-length", "resp") or 0)
            while len(rest) < length:
                data = up.recv(65536)
                if not data:
                    break
                rest += data
            ex.resp_body = rest
            self.wfile.write(answer + b"\r\n\r\n" + rest)
            self.wfile.flush()
            up.close()
            return
        self.wfile.write(answer + b"\r\n\r\n")
        self.wfile.flush()
        client = self.connection
        opened = []  # the socket's response.create exchanges whose answers have not ended
        path = self.path

        def from_client(payload):
            try:
                kind = json.loads(payload).get("type")
            except (ValueError, AttributeError):
                return
            if kind == "response.create":
                with shim.lock:
                    turn = Exchange(len(shim.exchanges), "POST", path, headers, payload)
                    turn.status = 200
                    turn.over_socket = True
                    turn.resp_headers = [("content-type", "text/event-stream")]
                    shim.exchanges.append(turn)
                    opened.append(turn)

        def from_upstream(payload):
            try:
                kind = json.loads(payload).get("type")
            except (ValueError, AttributeError):
                return
            if not isinstance(kind, str):
                return
            with shim.lock:
                if not opened:
                    return
                turn = opened[0]
                turn.resp_body += b"event: %s\ndata: %s\n\n" % (kind.encode(), payload)
                if kind in TERMINAL_EVENTS:
                    opened.pop(0)

        def pump(src, dst, read):
            frames = Frames()
            try:
                if src is up and rest:
                    dst.sendall(rest)
                    for opcode, payload in frames.feed(rest):
                        if opcode == 1:
                            read(payload)
                while True:
                    data = src.recv(65536)
                    if not data:
                        break
                    dst.sendall(data)
                    for opcode, payload in frames.feed(data):
                        if opcode == 1:
                            read(payload)
            except OSError:
                pass
            finally:
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass

        t = threading.Thread(target=pump, args=(client, up, from_client), daemon=True)
        t.start()
        pump(up, client, from_upstream)
        t.join(timeout=5)
        up.close()
        with shim.lock:
            for turn in opened:
                turn.client_gone = True

    do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _forward
