#!/usr/bin/env python3
"""A hostile OpenAI-shaped server: `GET /v1/models` answers normally (so a client gets as far as
generation), every POST misbehaves the way MODE says. Used by scripts/ci/hostile-battery.py (CI) and
for the memory figures in docs/commands/gate.md:

    python3 scripts/ci/hostile-server.py PORT [MODE]      # MODE defaults to endless
    /usr/bin/time -v chatgate gate suites/smoke.toml --target http://127.0.0.1:PORT --format json

Modes:
  endless        an endless JSON body (plain requests) or SSE stream (streamed requests)
  giant-line     an SSE `data:` line that never ends
  giant-json     a 512 MiB JSON body announced with its Content-Length
  no-headers     bytes that are not HTTP at all, then close
  stall          read the request, never answer
  stall-all      GET /v1/models stalls too
  slow-loris     the status line one byte a second, forever (each byte inside any read timeout)
  429 / 503      refuse with `Retry-After: 3600`
  bad-utf8       a well-formed stream / reply whose text holds invalid UTF-8
  reset          two SSE events, then a TCP reset
  echo-key       replies that echo the Authorization header into the content (and a 401 body)
"""
import json
import socket
import socketserver
import struct
import sys
import time

MODELS = json.dumps({"object": "list", "data": [{"id": "tiny-chat", "object": "model"}]}).encode()


def read_request(f):
    """(method, path, headers, body) of one request, or None at EOF."""
    line = f.readline(65536)
    if not line:
        return None
    parts = line.decode("latin-1").split()
    method, path = (parts + ["", ""])[:2]
    headers = {}
    while True:
        h = f.readline(65536)
        if h in (b"\r\n", b"\n", b""):
            break
        k, _, v = h.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip()
    n = int(headers.get("content-length") or 0)
    body = f.read(n) if n else b""
    return method, path, headers, body


def respond(w, status, body, ctype="application/json", extra=""):
    w.write(
        b"HTTP/1.1 %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n%s\r\n"
        % (status.encode(), ctype.encode(), len(body), extra.encode())
        + body
    )


def chunk(w, b):
    w.write(b"%x\r\n%s\r\n" % (len(b), b))


def sse_head(w):
    w.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")


def event(content):
    d = {"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": content}}]}
    return b"data: " + json.dumps(d).encode() + b"\n\n"


def reply(content, finish="stop"):
    return json.dumps({"id": "x", "object": "chat.completion", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()


def post(mode, sock, w, headers, req):
    stream = bool(req.get("stream"))
    if mode == "endless":
        if stream:
            sse_head(w)
            ev = event("x" * 60000)
            while True:
                chunk(w, ev)
        w.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")
        chunk(w, b'{"choices":[{"message":{"content":"')
        while True:
            chunk(w, b"y" * 65536)
    if mode == "giant-line":
        sse_head(w)
        chunk(w, b"data: ")
        while True:
            chunk(w, b"z" * 65536)
    if mode == "giant-json":
        n = 512 << 20
        w.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % n)
        w.write(b'{"choices":[{"message":{"content":"')
        while True:
            w.write(b"g" * 65536)
    if mode == "no-headers":
        w.write(b"this is not HTTP\0\xff\xfe and then the connection closes\n")
        return False
    if mode in ("stall", "stall-all"):
        time.sleep(3600)
    if mode == "slow-loris":
        for b in b"HTTP/1.1 200 OK\r\n" * 1000:
            w.write(bytes([b]))
            w.flush()
            time.sleep(1.0)
    if mode in ("429", "503"):
        status = "429 Too Many Requests" if mode == "429" else "503 Service Unavailable"
        body = json.dumps({"error": {"message": "overloaded, come back later", "type": "overloaded"}}).encode()
        respond(w, status, body, extra="retry-after: 3600\r\n")
        return True
    if mode == "bad-utf8":
        bad = b"caf\xc3 \xff\xfe broken \xed\xa0\x80 surrogate"
        if stream:
            sse_head(w)
            d = b'data: {"choices":[{"index":0,"delta":{"content":"' + bad + b'"}}]}\n\n'
            chunk(w, d)
            chunk(w, b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n')
            chunk(w, b"")
        else:
            respond(w, "200 OK", b'{"choices":[{"index":0,"message":{"role":"assistant","content":"' + bad
                    + b'"},"finish_reason":"stop"}]}')
        return True
    if mode == "reset":
        sse_head(w)
        chunk(w, event("Hel"))
        chunk(w, event("lo"))
        w.flush()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        return False
    if mode == "echo-key":
        key = headers.get("authorization", "")
        text = "you sent " + key
        if req.get("max_tokens") == 1 and not stream:
            respond(w, "401 Unauthorized", json.dumps({"error": {"message": "bad key " + key}}).encode())
            return True
        if stream:
            sse_head(w)
            chunk(w, event(text))
            chunk(w, b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n')
            chunk(w, b"")
        else:
            respond(w, "200 OK", reply(text))
        return True
    raise SystemExit(f"unknown mode {mode}")


class Handler(socketserver.StreamRequestHandler):
    def handle(self):
        mode = self.server.mode
        try:
            while True:
                r = read_request(self.rfile)
                if r is None:
                    return
                method, path, headers, body = r
                if method == "GET":
                    if mode == "stall-all":
                        time.sleep(3600)
                    if path.startswith("/v1/models"):
                        respond(self.wfile, "200 OK", MODELS)
                    else:
                        respond(self.wfile, "404 Not Found", b'{"error":{"message":"not found"}}')
                    self.wfile.flush()
                    continue
                try:
                    req = json.loads(body or b"{}")
                except ValueError:
                    req = {}
                if not isinstance(req, dict) or "messages" not in req and "prompt" not in req:
                    # Introspection probes (tokenize routes): not found, like a plain server.
                    respond(self.wfile, "404 Not Found", b'{"error":{"message":"not found"}}')
                    self.wfile.flush()
                    continue
                keep = post(mode, self.connection, self.wfile, headers, req)
                self.wfile.flush()
                if not keep:
                    return
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


if __name__ == "__main__":
    port = int(sys.argv[1])
    srv = Server(("127.0.0.1", port), Handler)
    srv.mode = sys.argv[2] if len(sys.argv) > 2 else "endless"
    print(f"hostile server ({srv.mode}) on 127.0.0.1:{srv.server_address[1]}", flush=True)
    srv.serve_forever()
