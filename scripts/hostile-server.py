#!/usr/bin/env python3
"""A hostile OpenAI-shaped server for measuring chatgate's memory bound (README "Reading from a server is bounded").

    python3 scripts/hostile-server.py 18777 &
    /usr/bin/time -v chatgate gate suites/smoke.toml --target http://127.0.0.1:18777 --format json
"""
import json, socketserver, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODELS = json.dumps({"object": "list", "data": [{"id": "tiny-chat", "object": "model"}]}).encode()

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_GET(self):
        body = MODELS if self.path.startswith("/v1/models") else b"{}"
        self.send_response(200); self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def do_POST(self):
        n = int(self.headers.get("content-length") or 0)
        req = json.loads(self.rfile.read(n) or b"{}")
        stream = bool(req.get("stream"))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream" if stream else "application/json")
        self.send_header("transfer-encoding", "chunked"); self.end_headers()
        chunk = (b'data: {"choices":[{"index":0,"delta":{"content":"' + b"x" * 60000 + b'"}}]}\n\n') if stream \
            else b'{"choices":[{"message":{"content":"' + b"x" * 65536
        try:
            if not stream:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk)); chunk = b"y" * 65536
            while True:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        except (BrokenPipeError, ConnectionResetError):
            pass

ThreadingHTTPServer.daemon_threads = True
srv = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H)
srv.serve_forever()
