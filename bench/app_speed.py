"""How fast the inspection app starts and shows a demo-judge judgment, measured in a real browser.

    python bench/app_speed.py [--runs 3] [--max-new-tokens N]

* ready: seconds from launching `reflectrm app` (a new process, a new SQLite file) until it answers
  HTTP 200, and until Chromium has the Judge tab on screen. Target: <= 15 s on 2 CPU cores.
* judgment: seconds from clicking Judge on a demo pair until the judgment is fully shown (the verdict,
  eight analysis cards, the reflections and the confidence chart). The first click after start-up,
  then the median of the next `--runs`. Target: <= 15 s.

The model loads in the background while the server starts, so "ready" does not wait for it; a
first click before it has loaded waits for it (that is in the first judgment's figure).
Uses Debian's Chromium at /usr/bin/chromium. The last line printed is one JSON object.
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from harness import finish, load_line, stopwatch, parser as bench_parser
from playwright.sync_api import Page, sync_playwright

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, proc: subprocess.Popen, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the app exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"the app did not answer within {timeout_s:.0f}s")


def _judge_once(page: Page, query: str, r1: str, r2: str) -> float:
    """Seconds from the click to the judgment fully on screen."""
    page.fill("#judge-query textarea", query)
    page.fill("#judge-r1 textarea", r1)
    page.fill("#judge-r2 textarea", r2)
    previous = page.locator("#judge-id textarea").input_value()
    clock = stopwatch()
    page.click("#judge-run")
    page.wait_for_function(
        """(previous) => {
            const id = document.querySelector('#judge-id textarea');
            const verdict = document.querySelector('#judge-verdict textarea');
            const cards = document.querySelectorAll('#judge-anatomy [data-testid=analysis-card]');
            const chart = document.querySelector('#judge-plot canvas, #judge-plot svg.marks');
            return id && id.value && id.value !== previous && verdict && verdict.value && cards.length >= 8 && chart;
        }""",
        arg=previous,
        timeout=300_000,
    )
    return clock.stop()


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--runs", type=int, default=3, help="judgments timed after the first (default 3)")
    parser.add_argument("--max-new-tokens", type=int, help="REFLECTRM_MAX_NEW_TOKENS (default: the app's, 1024)")
    parser.add_argument("--threads", type=int, help="REFLECTRM_THREADS (default: the app's, as `reflectrm app`)")
    args = parser.parse_args()

    from reflectrm.demo import demo_domain

    pairs = demo_domain().make_pairs(args.runs + 1, seed=2026)
    folder = Path(tempfile.mkdtemp(prefix="reflectrm-app-bench-"))
    port = _free_port()
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
           "REFLECTRM_DATABASE_URL": f"sqlite:///{folder / 'bench.db'}", "REFLECTRM_AUTH": ""}
    if args.max_new_tokens:
        env["REFLECTRM_MAX_NEW_TOKENS"] = str(args.max_new_tokens)
    if args.threads:
        env["REFLECTRM_THREADS"] = str(args.threads)
    load_before = load_line()
    url = f"http://127.0.0.1:{port}/"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        clock = stopwatch()
        proc = subprocess.Popen([sys.executable, "-m", "reflectrm_app.cli", "app", "--port", str(port)], cwd=REPO, env=env,
                                stdout=subprocess.DEVNULL, stderr=open(folder / "app.log", "wb"))
        try:
            _wait_http(url, proc)
            ready_http = clock.seconds
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(url, timeout=180_000)
            page.wait_for_selector("#judge-run", timeout=180_000)
            ready_page = clock.seconds
            times = [_judge_once(page, p.query, p.response_1, p.response_2) for p in pairs]
        finally:
            proc.terminate()
            proc.wait(timeout=20)
            browser.close()
    first, warm = times[0], times[1:]
    print(f"ready to serve (HTTP 200):      {ready_http:6.2f} s   (target <= 15 s)")
    print(f"ready in the browser:           {ready_page:6.2f} s")
    print(f"first judgment, click to shown: {first:6.2f} s   (target <= 15 s)")
    if warm:
        print(f"next {len(warm)} judgments, median:       {statistics.median(warm):6.2f} s   "
              f"(max {max(warm):.2f} s)")
    print(f"before: {load_before}; after: {load_line()}")
    finish({"ready_http_s": round(ready_http, 2), "ready_page_s": round(ready_page, 2),
                      "first_judgment_s": round(first, 2),
                      "judgment_median_s": round(statistics.median(warm), 2) if warm else None,
                      "judgment_max_s": round(max(warm), 2) if warm else None,
                      "max_new_tokens": args.max_new_tokens or "default", "threads": args.threads or "default",
                      "load_before": load_before})


if __name__ == "__main__":
    main()
