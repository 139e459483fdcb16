#!/usr/bin/env python3
"""A known-timing OpenAI-compatible streaming server (stdlib only: asyncio, no dependencies).

Used by scripts/experiments/side-by-side.sh as the reference that chatgate, guidellm and aiperf are measured
against. Every request is held TTFT_MS after its body is fully read, then one content chunk (one
token) is written every ITL_MS, on an absolute schedule (chunk i is due at body_read + TTFT +
i * ITL), so lateness never accumulates. What the server *actually* did is logged, one JSON line
per request, by its own clocks:

  t_body_mono_ns      CLOCK_MONOTONIC when the request body was fully read
  t_body_wall_ns      the same instant on CLOCK_REALTIME (guidellm/aiperf stamp wall time)
  t_first_mono_ns     when the first content chunk was handed to the kernel (write returned)
  t_last_mono_ns      when the last content chunk was
  chunks              content chunks written (one token each)
  hold_ms             (t_first - t_body) / 1e6: the server's own TTFT
  itl_ms              mean gap between content chunks

Slots (--slots K, default unlimited): at most K generation requests are served at once, the
others wait first come, first served. A request holds its slot from when it starts being served
until its last content chunk is written; its TTFT_MS and ITL schedule start when it gets the slot,
and the wait counts in its TTFT (as a real server's queue does). Chunk i is due at slot + TTFT +
i * ITL, so one request's service time is S = TTFT_MS + (N - 1) * ITL_MS and K slots serve at
most K / S requests per second. Each log line then also has

  t_start_mono_ns     when the request got its slot (= t_body_mono_ns without --slots)
  queue_ms            (t_start - t_body) / 1e6: its wait for a slot
  service_ms          (t_last - t_start) / 1e6: how long it held the slot
  in_service          requests holding a slot when it got its own (itself included)
  waiting             requests still waiting when it got its slot

Routes: GET /health, GET /v1/models, GET /metrics (404), POST /v1/chat/completions and
POST /v1/completions, streamed (SSE) or not. N output tokens = max_completion_tokens, else
max_tokens, else --default-tokens. stream_options.include_usage adds a usage chunk.

Each content chunk is the text " the", one token in models/tiny-chat's byte-level BPE vocabulary
(id of "Ġthe"), so a client that counts output tokens with that tokenizer sees N tokens.

  python3 scripts/experiments/known_timing_server.py --port 8123 --ttft-ms 50 --itl-ms 10 --log /tmp/kts.jsonl
  python3 scripts/experiments/known_timing_server.py --port 8123 --slots 2 --ttft-ms 25 --itl-ms 5 \
      --default-tokens 16 --log /tmp/kts.jsonl     # 2 slots x 100 ms: at most 20 requests/s
"""

import argparse
import asyncio
import collections
import itertools
import json
import socket
import sys
import time

WORD = " the"
MODEL = "stand-in"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8123, help="0 picks a free port (printed)")
    p.add_argument("--ttft-ms", type=float, default=50.0)
    p.add_argument("--itl-ms", type=float, default=10.0)
    p.add_argument("--default-tokens", type=int, default=16)
    p.add_argument("--model", default=MODEL)
    p.add_argument("--log", required=True, help="JSONL file, one line per generation request")
    p.add_argument("--ready-file", help="write the bound port here once listening")
    p.add_argument("--slots", type=int, default=0,
                   help="serve at most this many generation requests at once, first come first "
                        "served; the wait counts in TTFT (default 0: unlimited)")
    args = p.parse_args(argv)
    if args.slots < 0:
        p.error("--slots must be 0 (unlimited) or more")
    return args


class Slots:
    """At most `k` holders (k = 0: unlimited); waiters are served strictly first come, first served."""

    def __init__(self, k):
        self.k = k
        self.busy = 0
        self.waiters = collections.deque()

    async def acquire(self):
        if self.k == 0 or (self.busy < self.k and not self.waiters):
            self.busy += 1
            return
        fut = asyncio.get_running_loop().create_future()
        self.waiters.append(fut)
        await fut  # release() hands its slot over: busy stays counted

    def release(self):
        if self.k == 0:
            return
        while self.waiters:
            fut = self.waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return
        self.busy -= 1


class Server:
    def __init__(self, args):
        self.a = args
        self.seq = itertools.count(1)
        self.log = open(args.log, "a", buffering=1)
        self.slots = Slots(args.slots)

    # --- HTTP/1.1 plumbing -------------------------------------------------------------------

    async def handle(self, reader, writer):
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = writer.get_extra_info("peername")
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                except asyncio.LimitOverrunError:
                    await self.plain(writer, 431, {"error": "headers too large"}, close=True)
                    return
                lines = head.decode("latin-1").split("\r\n")
                try:
                    method, target, version = lines[0].split(" ", 2)
                except ValueError:
                    await self.plain(writer, 400, {"error": "bad request line"}, close=True)
                    return
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                if headers.get("transfer-encoding", "").lower() == "chunked":
                    body = await self.read_chunked(reader)
                else:
                    body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
                t_body_mono = time.monotonic_ns()
                t_body_wall = time.time_ns()
                close = headers.get("connection", "").lower() == "close" or version == "HTTP/1.0"
                path = target.split("?", 1)[0]
                await self.route(method, path, headers, body, writer, peer, close,
                                 t_body_mono, t_body_wall)
                if close:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            try:
                writer.close()
            except Exception:
                pass

    @staticmethod
    async def read_chunked(reader):
        out = bytearray()
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                return bytes(out)
            out += await reader.readexactly(size)
            await reader.readexactly(2)

    @staticmethod
    def head(status, ctype, extra=()):
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
                  431: "Request Header Fields Too Large"}.get(status, "OK")
        lines = [f"HTTP/1.1 {status} {reason}", f"Content-Type: {ctype}", *extra]
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    async def plain(self, writer, status, obj, close=False):
        body = json.dumps(obj).encode()
        extra = [f"Content-Length: {len(body)}"] + (["Connection: close"] if close else [])
        writer.write(self.head(status, "application/json", extra) + body)
        await writer.drain()

    # --- routes ------------------------------------------------------------------------------

    async def route(self, method, path, headers, body, writer, peer, close, t_mono, t_wall):
        if path == "/health" and method == "GET":
            return await self.plain(writer, 200, {"status": "ok"}, close)
        if path in ("/v1/models", "/models") and method == "GET":
            return await self.plain(writer, 200, {"object": "list", "data": [
                {"id": self.a.model, "object": "model", "created": 0, "owned_by": "known-timing"}]},
                close)
        if path in ("/v1/chat/completions", "/v1/completions") and method == "POST":
            try:
                req = json.loads(body or b"{}")
            except ValueError:
                return await self.plain(writer, 400, {"error": "body is not JSON"}, close)
            return await self.generate(path.endswith("chat/completions"), req, headers, writer,
                                       peer, close, t_mono, t_wall)
        if path in ("/v1/chat/completions", "/v1/completions", "/health", "/v1/models"):
            return await self.plain(writer, 405, {"error": "method not allowed"}, close)
        return await self.plain(writer, 404, {"error": f"no route {path}"}, close)

    async def generate(self, chat, req, headers, writer, peer, close, t_mono, t_wall):
        a = self.a
        loop = asyncio.get_running_loop()
        seq = next(self.seq)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{seq}"
        created = int(time.time())
        n = req.get("max_completion_tokens")
        if n is None:
            n = req.get("max_tokens")
        n = int(a.default_tokens if n is None else n)
        stream = bool(req.get("stream"))
        usage_wanted = bool((req.get("stream_options") or {}).get("include_usage"))
        prompt_tokens = self.prompt_tokens(req, chat)
        times = []
        obj = "chat.completion.chunk" if chat else "text_completion"

        def chunk(delta_or_text, finish=None):
            choice = {"index": 0, "finish_reason": finish}
            if chat:
                choice["delta"] = delta_or_text
            else:
                choice["text"] = delta_or_text
            return {"id": rid, "object": obj, "created": created, "model": a.model,
                    "choices": [choice]}

        def event(o):
            data = b"data: " + (o if isinstance(o, bytes) else json.dumps(o).encode()) + b"\n\n"
            return f"{len(data):x}\r\n".encode() + data + b"\r\n"

        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n,
                 "total_tokens": prompt_tokens + n}
        if stream:
            extra = ["Cache-Control: no-cache", "Transfer-Encoding: chunked"]
            if close:
                extra.append("Connection: close")
            first = self.head(200, "text/event-stream", extra)
            if chat:  # a role-only chunk at once: no tool should count it as the first token
                first += event(chunk({"role": "assistant", "content": ""}))
            writer.write(first)
            await writer.drain()
            t_start, in_service, waiting = await self.start(t_mono)
            due = self.schedule(loop, t_start)
            try:
                for i in range(n):
                    delay = due(i) - loop.time()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    writer.write(event(chunk({"content": WORD} if chat else WORD)))
                    times.append(time.monotonic_ns())
                    await writer.drain()
            finally:
                self.slots.release()
            tail = event(chunk({} if chat else "", "length"))
            if usage_wanted:
                tail += event({"id": rid, "object": obj, "created": created, "model": a.model,
                               "choices": [], "usage": usage})
            tail += event(b"[DONE]") + b"0\r\n\r\n"
            writer.write(tail)
            await writer.drain()
        else:
            t_start, in_service, waiting = await self.start(t_mono)
            due = self.schedule(loop, t_start)
            try:
                delay = due(max(n - 1, 0)) - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                if chat:
                    choice = {"index": 0, "finish_reason": "length",
                              "message": {"role": "assistant", "content": WORD * n}}
                    o = {"id": rid, "object": "chat.completion", "created": created,
                         "model": a.model, "choices": [choice], "usage": usage}
                else:
                    o = {"id": rid, "object": "text_completion", "created": created,
                         "model": a.model, "usage": usage,
                         "choices": [{"index": 0, "text": WORD * n, "finish_reason": "length"}]}
                await self.plain(writer, 200, o, close)
                times.append(time.monotonic_ns())
            finally:
                self.slots.release()
        first, last = (times[0], times[-1]) if times else (None, None)
        rec = {
            "seq": seq, "id": rid, "x_request_id": headers.get("x-request-id"),
            "peer_port": peer[1] if peer else None, "stream": stream, "chat": chat,
            "n_planned": n, "chunks": len(times) if stream else (1 if times else 0),
            "t_body_mono_ns": t_mono, "t_body_wall_ns": t_wall,
            "t_first_mono_ns": first, "t_last_mono_ns": last,
            "hold_ms": (first - t_mono) / 1e6 if first else None,
            "itl_ms": ((last - first) / 1e6 / (len(times) - 1)) if len(times) > 1 else None,
            # how late the first write was against its due time (non-stream: the whole reply)
            # measured from when it got its slot: the queue is not lateness
            "late_first_ms": ((first - t_start) / 1e6 - a.ttft_ms
                              - (0 if stream else max(n - 1, 0) * a.itl_ms)) if first else None,
        }
        if a.slots:
            rec.update(t_start_mono_ns=t_start, queue_ms=(t_start - t_mono) / 1e6,
                       service_ms=(last - t_start) / 1e6 if last else None,
                       in_service=in_service, waiting=waiting)
        self.log.write(json.dumps(rec) + "\n")

    async def start(self, t_mono):
        """Wait for a slot; returns when it was got (CLOCK_MONOTONIC ns) and the occupancy then."""
        if not self.a.slots:
            return t_mono, None, None
        await self.slots.acquire()
        return time.monotonic_ns(), self.slots.busy, len(self.slots.waiters)

    def schedule(self, loop, t_start):
        """Chunk i's deadline on the loop's clock (time.monotonic): t_start + TTFT + i * ITL."""
        t0 = loop.time() - (time.monotonic_ns() - t_start) / 1e9
        return lambda i: t0 + (self.a.ttft_ms + i * self.a.itl_ms) / 1000.0

    @staticmethod
    def prompt_tokens(req, chat):
        if chat:
            text = ""
            for m in req.get("messages") or []:
                c = m.get("content")
                if isinstance(c, list):
                    c = " ".join(p.get("text", "") for p in c if isinstance(p, dict))
                text += " " + (c or "")
        else:
            p = req.get("prompt")
            text = p if isinstance(p, str) else " ".join(map(str, p or []))
        return max(1, len(text.split()))


async def main(argv=None):
    args = parse_args(argv)
    srv = Server(args)
    server = await asyncio.start_server(srv.handle, args.host, args.port, backlog=1024,
                                        limit=1 << 20)
    port = server.sockets[0].getsockname()[1]
    slots = f", {args.slots} slot(s)" if args.slots else ""
    print(f"known-timing server on http://{args.host}:{port} (TTFT {args.ttft_ms} ms, "
          f"ITL {args.itl_ms} ms{slots}, log {args.log})", file=sys.stderr, flush=True)
    if args.ready_file:
        with open(args.ready_file, "w") as f:
            f.write(f"{port}\n")
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
