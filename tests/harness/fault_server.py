"""A small OpenAI-style ``/v1/completions`` server on 127.0.0.1 that fails on purpose, for the remote tests.

``server.mode`` picks the behaviour of the next requests: ``ok`` streams ``server.tokens`` (every
``server.token_delay`` s), and each failure mode fails one way. It runs in a thread (stdlib
``ThreadingHTTPServer``, HTTP/1.1 with chunked bodies, so connections are kept alive) and records what it
saw: connections, request bodies and headers, and per stream how many tokens it sent and whether the
client left before the end. Every wait is bounded, so a test that forgets it cannot hang.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODES = ("ok", "http_error", "unknown_model", "slow_first_byte", "malformed", "truncated", "broken",
         "echo_key", "not_sse")
MAX_STALL_S = 20.0  # the longest any mode keeps a client waiting


class StreamRecord:
    def __init__(self) -> None:
        self.sent = 0
        self.client_left = False
        self.finished = False


class FaultServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.mode = "ok"
        self.tokens: list[str] = ["    return", " a", " +", " b", "\n"]
        self.token_delay = 0.0
        self.models = ["qwen-coder"]
        self.bodies: list[dict[str, Any]] = []
        self.headers_seen: list[dict[str, str]] = []
        self.connections = 0
        self.streams: list[StreamRecord] = []
        self.stop_event = threading.Event()
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> FaultServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop_event.set()
        self.shutdown()
        self.server_close()

    def get_request(self):  # type: ignore[override]
        self.connections += 1
        return super().get_request()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FaultServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        pass

    # -- helpers -------------------------------------------------------------------------------------
    def _json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _start_stream(self, content_type: str = "text/event-stream") -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _event(self, payload: Any) -> None:
        text = payload if isinstance(payload, str) else json.dumps(payload)
        self._chunk(f"data: {text}\n\n".encode())

    def _end(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    @staticmethod
    def _choice(text: str, reason: str | None) -> dict[str, Any]:
        return {"id": "cmpl-1", "object": "text_completion", "model": "qwen-coder",
                "choices": [{"index": 0, "text": text, "finish_reason": reason, "logprobs": None}]}

    # -- routes --------------------------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in self.server.models]})
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        server = self.server
        server.bodies.append(body)
        server.headers_seen.append({k.lower(): v for k, v in self.headers.items()})
        if self.path != "/v1/completions":
            self._json(404, {"detail": "Not Found"})
            return
        mode = server.mode
        if mode == "http_error":
            self._json(500, {"error": {"message": "CUDA out of memory on device 0", "type": "server_error"}})
        elif mode == "unknown_model" or (body.get("model") and body["model"] not in server.models):
            self._json(404, {"object": "error", "message": f"The model `{body.get('model')}` does not exist.",
                             "type": "NotFoundError", "code": 404})
        elif mode == "echo_key":
            self._json(401, {"error": {"message": f"invalid key {self.headers.get('Authorization')}"}})
        elif mode == "slow_first_byte":
            self._start_stream()
            server.stop_event.wait(MAX_STALL_S)
        elif mode == "not_sse":
            self._start_stream("text/html")
            self._chunk(b"<html>proxy login</html>")
            self._end()
        elif mode == "malformed":
            self._start_stream()
            self._event(self._choice("    re", None))
            self._event("{this is not json")
            self._end()
        elif mode in ("truncated", "broken"):
            self._start_stream()
            self._event(self._choice("    re", None))
            self._event(self._choice("turn", None))
            if mode == "truncated":
                self._end()  # a clean end of body, but no finish_reason and no [DONE]
            else:
                self.close_connection = True  # the connection drops mid-body
        else:
            self._stream_ok(body)

    def _stream_ok(self, body: dict[str, Any]) -> None:
        server = self.server
        record = StreamRecord()
        server.streams.append(record)
        self._start_stream()
        all_tokens, delay = server.tokens, server.token_delay  # as when this stream started
        tokens = all_tokens[: int(body.get("max_tokens", len(all_tokens)))]
        try:
            for i, token in enumerate(tokens):
                if delay and server.stop_event.wait(delay):
                    return
                last = i == len(tokens) - 1
                self._event(self._choice(token, ("length" if len(tokens) < len(all_tokens) else "stop")
                                         if last else None))
                record.sent += 1
            self._event("[DONE]")
            self._end()
            record.finished = True
        except (BrokenPipeError, ConnectionResetError):
            record.client_left = True
            self.close_connection = True

