"""Helpers for the end-to-end tests: the real `reflectrm app` in a subprocess, Chromium via Playwright."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu"]
REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def app_env(db_url: str, **extra: str) -> dict[str, str]:
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
           "REFLECTRM_DATABASE_URL": db_url, "REFLECTRM_MAX_NEW_TOKENS": "96", "REFLECTRM_DEVICE": "cpu",
           "TOKENIZERS_PARALLELISM": "false", **extra}
    env.pop("REFLECTRM_AUTH", None) if "REFLECTRM_AUTH" not in extra else None
    return env


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
    cmd = [sys.executable, "-m", "app.cli", "app", "--host", "127.0.0.1", "--port", str(port)]
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


def launch_chromium(playwright):  # noqa: ANN001, ANN201
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
