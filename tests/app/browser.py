"""Helpers for the end-to-end tests: the real `reflectrm app` in a subprocess, Chromium via Playwright."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from reflectrm.demo import demo_domain

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu"]
REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def app_env(db_url: str, **extra: str) -> dict[str, str]:
    # REFLECTRM_SHOTS is this test suite's own (where screenshots go): the app refuses a REFLECTRM_ name it does not read
    env = {**{k: v for k, v in os.environ.items() if k != "REFLECTRM_SHOTS"}, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
           "REFLECTRM_DATABASE_URL": db_url, "REFLECTRM_DEVICE": "cpu",
           "REFLECTRM_MAX_NEW_TOKENS": str(demo_domain().output_tokens),  # the shipped judge's analyses fit
           # one torch thread: on a small shared machine (the browser and pytest run beside the server) two
           # threads can spin-wait each other into minutes per judgment
           "REFLECTRM_THREADS": "1",
           "REFLECTRM_AUDIT_BATCH_SIZE": "1",  # Stop acts between batches: small ones make it prompt
           "TOKENIZERS_PARALLELISM": "false", "REFLECTRM_AUTH": ""}
    return {**env, **extra}


def wait_ready(url: str, proc: subprocess.Popen, *, timeout_s: float = 90.0) -> float:
    """Seconds until `url` answers 200 (raises if the server dies or the time runs out)."""
    started = time.perf_counter()
    while time.perf_counter() - started < timeout_s:
        if proc.poll() is not None:
            raise RuntimeError(f"the app exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return time.perf_counter() - started
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"the app did not answer at {url} within {timeout_s:.0f}s")


@contextmanager
def running_app(db_url: str, *, log: Path, port: int | None = None, **env: str) -> Iterator[str]:
    """Start `reflectrm app` on a free port; yields its URL; stops it afterwards."""
    port = port or free_port()
    cmd = [sys.executable, "-m", "reflectrm_app.cli", "app", "--host", "127.0.0.1", "--port", str(port)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=app_env(db_url, **env), stdout=out, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_ready(url + "/", proc)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class ProxyTrap:
    """A local TCP listener set as the app's HTTP(S) proxy: any outbound HTTP request lands here and is counted."""

    def __init__(self) -> None:
        self.connections = 0
        self._server = socket.socket()
        self._server.bind(("127.0.0.1", 0))
        self._server.listen()
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()

    def env(self) -> dict[str, str]:
        return {"HTTP_PROXY": self.url, "HTTPS_PROXY": self.url, "ALL_PROXY": self.url,
                "http_proxy": self.url, "https_proxy": self.url, "all_proxy": self.url,
                "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}

    def close(self) -> None:
        self._server.close()


def launch_chromium(playwright):  # noqa: ANN001, ANN201
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


@contextmanager
def app_process(db_url: str, log: Path, *, timeout_s: float = 90.0) -> Iterator[tuple[str, subprocess.Popen]]:
    """`reflectrm app` on a free port with its process, its output appended to `log`; killed at the end (a caller
    may kill it earlier, as a crash would). `timeout_s` bounds the wait for its first page."""
    port = free_port()
    cmd = [sys.executable, "-m", "reflectrm_app.cli", "app", "--host", "127.0.0.1", "--port", str(port)]
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=app_env(db_url), stdout=out, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_ready(url + "/", proc, timeout_s=timeout_s)
            yield url, proc
        finally:
            proc.kill()
            proc.wait()
