"""A tiny OpenAI-compatible HTTP server started by tests: each answer is scripted by a mode."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def answer(body: dict[str, Any], *, logprobs: bool = True) -> dict[str, Any]:
    """A well-formed chat completion whose text names the seed, with one log-prob per word."""
    words = [f"seed{body.get('seed')}", "<Result>Response", "1", "is", "better</Result>"]
    # Like vLLM: the stop token is listed last (not in the text) and counted in usage.
    content = [{"token": w, "logprob": -0.1 * (k + 1), "bytes": None, "top_logprobs": []}
               for k, w in enumerate([*words, "<|im_end|>"])]
    choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": " ".join(words)},
                              "finish_reason": "stop"}
    if logprobs:
        choice["logprobs"] = {"content": content}
    return {"id": "x", "object": "chat.completion", "model": body.get("model"), "choices": [choice],
            "usage": {"prompt_tokens": 10, "completion_tokens": len(words) + 1, "total_tokens": 16}}


class FakeServer:
    """Serves /health, /v1/models and /v1/chat/completions on 127.0.0.1; `mode` picks the chat answer.

    Modes: ok, no-logprobs, malformed, http500, fail-once (500 then ok), slow, context, stall.
    `delay_s` holds every chat answer that long; while `gate` is clear every chat answer waits for it.
    `kill()` stops it as a crash would (the requests it holds get no answer, new connections are refused);
    `restart()` serves again on the same port. `answered` lists the bodies whose answers were sent.
    """

    def __init__(self, *, models: tuple[str, ...] = ("judge",), mode: str = "ok", slow_s: float = 2.0,
                 delay_s: float = 0.0) -> None:
        self.models, self.mode, self.slow_s, self.delay_s = models, mode, slow_s, delay_s
        self.bodies: list[dict[str, Any]] = []
        self.answered: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.gets: list[str] = []
        self.gate = threading.Event()
        self.gate.set()
        self._lock = threading.Lock()
        self._killed = threading.Event()
        self._port = 0
        self._serve()
        self.url = f"http://127.0.0.1:{self._port}/v1"

    def _serve(self) -> None:
        server, killed = self, self._killed

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                with server._lock:
                    server.gets.append(self.path)
                if self.path == "/health":
                    self._send(200, b"")
                    return
                data = {"object": "list", "data": [{"id": m, "object": "model", "max_model_len": 4096}
                                                   for m in server.models]}
                self._send(200, json.dumps(data).encode())

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    server.bodies.append(body)
                    server.headers.append(dict(self.headers))
                    calls = len(server.bodies)
                if not server._hold(killed):
                    self.close_connection = True  # killed: the client gets no answer, as from a crashed server
                    with contextlib.suppress(OSError):  # the client may have gone already
                        self.connection.shutdown(socket.SHUT_RDWR)
                    return
                status, payload = server.reply(body, calls)
                if status == 200:
                    with server._lock:  # before the answer leaves: the client may count it as soon as it arrives
                        server.answered.append(body)
                if not self._send(status, payload) and status == 200:
                    with server._lock:
                        server.answered.remove(body)

            def _send(self, status: int, payload: bytes) -> bool:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return True
                except (BrokenPipeError, ConnectionResetError):
                    return False

        self.httpd = ThreadingHTTPServer(("127.0.0.1", self._port), Handler)
        self.httpd.daemon_threads = True
        self._port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def _hold(self, killed: threading.Event) -> bool:
        """Wait for the gate, then `delay_s`; False when this life of the server was killed meanwhile."""
        while not self.gate.wait(0.02):
            if killed.is_set():
                return False
        return not killed.wait(self.delay_s) if self.delay_s else not killed.is_set()

    def reply(self, body: dict[str, Any], calls: int) -> tuple[int, bytes]:
        mode = self.mode
        if mode == "fail-once":
            mode = "http500" if calls == 1 else "ok"
        if mode in ("slow", "stall"):
            time.sleep(self.slow_s)
            mode = "ok"
        if mode == "http500":
            return 500, b'{"error": {"message": "internal error"}}'
        if mode == "malformed":
            return 200, b'{"choices": [ {"message": '
        if mode == "context":
            message = "This model's maximum context length is 4096 tokens"
            return 400, json.dumps({"error": {"message": message}}).encode()
        return 200, json.dumps(answer(body, logprobs=mode != "no-logprobs")).encode()

    def kill(self) -> None:
        """Stop as a crash would: held requests are dropped unanswered, the port refuses connections."""
        self._killed.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def restart(self) -> None:
        """Serve again on the same port (a new life: `kill` drops only the requests of the life it ends)."""
        self._killed = threading.Event()
        self._serve()

    def close(self) -> None:
        if not self._killed.is_set():
            self.kill()
