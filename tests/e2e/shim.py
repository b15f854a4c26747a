"""A capturing HTTP shim: forwards every request to one upstream and keeps the exact bytes
of both bodies, so a test can compare what crossed cachet on either side.

Answers stream through as they arrive (a streamed answer is relayed chunk by chunk, so a
client sees the upstream's pace and can be interrupted mid-stream); the body bytes are
unchanged. A client that goes away mid-answer closes the shim's upstream connection too, as
the client's own disconnect would. Loopback only.
"""

import gzip
import http.client
import json
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
# `upgrade` crosses the shim: Codex asks for a WebSocket first, and cachet must see that it
# did (it answers such a request itself; it never answers 101, which this shim could not relay).


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
        with shim.lock:
            ex = Exchange(len(shim.exchanges), self.command, self.path, headers, body)
            shim.exchanges.append(ex)
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

    do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _forward
