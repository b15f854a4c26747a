"""A capturing HTTP shim: forwards every request to one upstream and keeps the exact bytes
of both bodies, so a test can compare what crossed cachet on either side.

It reads the upstream's whole answer before replying (with a Content-Length instead of the
upstream's framing); the body bytes are unchanged. Loopback only.
"""

import gzip
import http.client
import json
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
            data = resp.read() if self.command != "HEAD" else b""
            ex.status = resp.status
            ex.resp_headers = [(k.lower(), v) for k, v in resp.getheaders()]
            ex.resp_body = data
        except Exception as e:  # the upstream is gone: answer 502 like a proxy would
            ex.status = 502
            ex.resp_body = f"shim: upstream failed: {e}".encode()
        finally:
            conn.close()
        self.send_response_only(ex.status)
        for k, v in ex.resp_headers:
            if k not in HOP_BY_HOP:
                self.send_header(k, v)
        self.send_header("content-length", str(len(ex.resp_body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(ex.resp_body)

    do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _forward
