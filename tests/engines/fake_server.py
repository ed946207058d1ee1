"""A tiny OpenAI-compatible HTTP server started by tests: each answer is scripted by a mode."""

from __future__ import annotations

import json
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
    """Serves /v1/models and /v1/chat/completions on 127.0.0.1; `mode` picks the chat answer.

    Modes: ok, no-logprobs, malformed, http500, fail-once (500 then ok), slow, context, stall.
    """

    def __init__(self, *, models: tuple[str, ...] = ("judge",), mode: str = "ok", slow_s: float = 2.0) -> None:
        self.models, self.mode, self.slow_s = models, mode, slow_s
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                data = {"object": "list", "data": [{"id": m, "object": "model", "max_model_len": 4096}
                                                   for m in server.models]}
                self._send(200, json.dumps(data).encode())

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    server.bodies.append(body)
                    server.headers.append(dict(self.headers))
                    calls = len(server.bodies)
                status, payload = server.reply(body, calls)
                self._send(status, payload)

            def _send(self, status: int, payload: bytes) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

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

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
