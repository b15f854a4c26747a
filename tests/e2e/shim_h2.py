"""The capturing shim's cleartext HTTP/2 side (prior knowledge, as the AWS SDK for JavaScript
speaks it to an `http://` Bedrock endpoint): each stream of the client's connection is one
exchange, sent upstream over HTTP/2 as well (a connection of its own per request), its answer
relayed back frame by frame as it arrives. Flow control is honoured both ways. Built on the
`h2` package (scripts/agents-e2e.sh installs it).
"""

import socket
import threading

import h2.config
import h2.connection
import h2.events

# Headers that name a connection, which HTTP/2 has none of (RFC 9113 §8.2.2).
CONNECTION_SPECIFIC = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"}


def _text(headers):
    return [(k.decode("latin-1").lower() if isinstance(k, bytes) else k.lower(),
             v.decode("latin-1") if isinstance(v, bytes) else v) for k, v in headers]


class _Side:
    """One HTTP/2 connection and its socket, shared by the threads that send on it."""

    def __init__(self, sock, client_side):
        self.sock = sock
        self.conn = h2.connection.H2Connection(
            config=h2.config.H2Configuration(client_side=client_side, header_encoding=None))
        self.cond = threading.Condition()

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def send_body(self, stream_id, body, end=True):
        """Send `body` on the stream as the peer's windows allow (the reader notifies)."""
        at = 0
        while at < len(body):
            with self.cond:
                while True:
                    window = min(self.conn.local_flow_control_window(stream_id),
                                 self.conn.max_outbound_frame_size)
                    if window > 0:
                        break
                    self.cond.wait(1)
                chunk = body[at:at + window]
                at += len(chunk)
                self.conn.send_data(stream_id, chunk, end_stream=end and at == len(body))
                self.flush()
        if not body and end:
            with self.cond:
                self.conn.end_stream(stream_id)
                self.flush()


class _GoawayFilter:
    """Takes the client's GOAWAY frames (RFC 9113 §6.8) out of what it sends. A client may send
    one while its last stream is still answered (Node.js does, closing a session it will not
    reuse); `h2` closes the whole connection on it, so the answer could not be finished. The
    client closes the socket itself once its streams have ended."""

    def __init__(self):
        self.buf = b""
        self.preface = 24

    def feed(self, data):
        self.buf += data
        out = b""
        if self.preface:
            take = self.buf[:self.preface]
            out += take
            self.buf = self.buf[len(take):]
            self.preface -= len(take)
        while len(self.buf) >= 9:
            length = int.from_bytes(self.buf[:3], "big")
            if len(self.buf) < 9 + length:
                break
            frame, self.buf = self.buf[:9 + length], self.buf[9 + length:]
            if frame[3] != 0x7:
                out += frame
        return out


def serve(sock, shim, new_exchange):
    """Serve one client connection until it ends."""
    client = _Side(sock, client_side=False)
    with client.cond:
        client.conn.initiate_connection()
        client.flush()
    requests = {}
    goaway = _GoawayFilter()
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                break
            data = goaway.feed(data)
            with client.cond:
                events = client.conn.receive_data(data)
                for ev in events:
                    if isinstance(ev, h2.events.RequestReceived):
                        requests[ev.stream_id] = (_text(ev.headers), bytearray())
                    elif isinstance(ev, h2.events.DataReceived):
                        requests[ev.stream_id][1].extend(ev.data)
                        client.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                    elif isinstance(ev, h2.events.StreamEnded) and ev.stream_id in requests:
                        headers, body = requests.pop(ev.stream_id)
                        threading.Thread(target=_exchange, daemon=True,
                                         args=(client, ev.stream_id, headers, bytes(body), shim,
                                               new_exchange)).start()
                    elif isinstance(ev, h2.events.StreamReset):
                        requests.pop(ev.stream_id, None)
                    elif isinstance(ev, h2.events.ConnectionTerminated):
                        client.flush()
                        return
                client.flush()
                client.cond.notify_all()
    except OSError:
        pass


def _exchange(client, stream_id, headers, body, shim, new_exchange):
    pseudo = dict((k, v) for k, v in headers if k.startswith(":"))
    plain = [(k, v) for k, v in headers if not k.startswith(":")]
    ex = new_exchange(pseudo.get(":method", "GET"), pseudo.get(":path", "/"), plain, body)
    ex.http2 = True
    up = _Side(socket.create_connection((shim.upstream.hostname, shim.upstream.port), timeout=600),
               client_side=True)
    try:
        with up.cond:
            up.conn.initiate_connection()
            sid = up.conn.get_next_available_stream_id()
            out = [(":method", pseudo.get(":method", "GET")), (":scheme", "http"),
                   (":authority", shim.upstream.netloc), (":path", pseudo.get(":path", "/"))]
            out += [(k, v) for k, v in plain if k not in CONNECTION_SPECIFIC]
            up.conn.send_headers(sid, out, end_stream=not body)
            up.flush()
        sender = threading.Thread(target=up.send_body, args=(sid, body), daemon=True) if body else None
        if sender:
            sender.start()
        answer = []
        done = False
        while not done:
            data = up.sock.recv(65536)
            if not data:
                break
            with up.cond:
                events = up.conn.receive_data(data)
                up.flush()
                up.cond.notify_all()
            for ev in events:
                if isinstance(ev, h2.events.ResponseReceived) and ev.stream_id == sid:
                    resp = _text(ev.headers)
                    ex.status = int(dict(resp)[":status"])
                    ex.resp_headers = [(k, v) for k, v in resp if not k.startswith(":")]
                    with client.cond:
                        client.conn.send_headers(stream_id, ev.headers)
                        client.flush()
                elif isinstance(ev, h2.events.DataReceived) and ev.stream_id == sid:
                    answer.append(ev.data)
                    with up.cond:
                        up.conn.acknowledge_received_data(ev.flow_controlled_length, sid)
                        up.flush()
                    client.send_body(stream_id, ev.data, end=False)
                elif isinstance(ev, (h2.events.StreamEnded, h2.events.StreamReset)) and ev.stream_id == sid:
                    done = True
        ex.resp_body = b"".join(answer)
        with client.cond:
            client.conn.end_stream(stream_id)
            client.flush()
    except Exception:  # the client or the upstream went away
        ex.client_gone = True
    finally:
        up.sock.close()
