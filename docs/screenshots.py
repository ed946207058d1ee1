"""Take the app screenshots in docs/ (one per tab) with Chromium, on the demo judge.

    python docs/screenshots.py [--out docs]

Starts `reflectrm app` on a new SQLite file, adds the demo pairs, judges the first Judge-tab example (stage 2
overturns its careless anchor), audits it in both orders, runs a small batch audit, corrects a judgment with
the keyboard, then shoots each tab.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import Page, expect, sync_playwright

from reflectrm.demo import demo_domain

REPO = Path(__file__).resolve().parents[1]
TABS = ("judge", "audit", "review", "curate", "history")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(folder: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
           "REFLECTRM_DATABASE_URL": f"sqlite:///{folder / 'shots.db'}",
           "REFLECTRM_MAX_NEW_TOKENS": str(demo_domain().output_tokens),
           "REFLECTRM_AUTH": ""}
    proc = subprocess.Popen([sys.executable, "-m", "reflectrm_app.cli", "app", "--port", str(port)], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=open(folder / "app.log", "wb"))
    url = f"http://127.0.0.1:{port}/"
    for _ in range(600):
        try:
            with urllib.request.urlopen(url, timeout=2):
                return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the app did not start")


def _until(page: Page, elem_id: str, pattern: str, timeout_s: float = 300) -> None:
    expect(page.locator(f"#{elem_id} textarea").first).to_have_value(re.compile(pattern), timeout=timeout_s * 1000)


def _tour(page: Page, out: Path) -> None:
    page.click("#judge-demo-pairs")
    _until(page, "judge-status", "^demo pairs")
    query, r1, r2 = demo_domain().examples[0]  # one where stage 2 overturns the careless anchor
    page.fill("#judge-query textarea", query)
    page.fill("#judge-r1 textarea", r1)
    page.fill("#judge-r2 textarea", r2)
    page.click("#judge-run")
    _until(page, "judge-verdict", "^(Response|ABSTAIN)")
    page.locator("#judge-anatomy details").first.evaluate("d => d.open = true")
    page.screenshot(path=str(out / "app-judge.png"), full_page=True)

    page.click("#judge-audit")
    _until(page, "audit-banner", "^(CONSISTENT|FLIPPED|UNDECIDED)")
    page.click("#audit-source input")  # the batch audit runs on the demo pairs, not the one typed in
    page.locator("[role=option]", has_text=demo_domain().source).first.click()
    page.fill("#audit-sample input", "4")
    page.click("#audit-run")
    _until(page, "audit-status", "^(audited|error)")
    page.wait_for_timeout(1500)  # the chart draws
    page.screenshot(path=str(out / "app-audit.png"), full_page=True)

    page.get_by_role("tab", name="Review queue").click()
    _until(page, "review-header", r"^Judgment #")
    page.locator("#review-right label").nth(0).click()
    page.locator("#review-wrong label").nth(1).click()
    page.fill("#review-note textarea", "checked the arithmetic by hand")
    page.keyboard.press("Escape")
    page.keyboard.press("1")
    _until(page, "review-status", "^(Saved|confirm)")
    if page.locator("#review-status textarea").input_value().startswith("confirm"):
        page.keyboard.press("1")  # it contradicted the label or the samples: the same key confirms
        _until(page, "review-status", "^Saved")
    page.screenshot(path=str(out / "app-review.png"), full_page=True)

    page.get_by_role("tab", name="Curate").click()
    _until(page, "curate-status", r"reflection example\(s\) shown")
    page.wait_for_timeout(1000)
    page.screenshot(path=str(out / "app-curate.png"), full_page=True)

    page.get_by_role("tab", name="History").click()
    page.fill("#history-id textarea", "1")
    page.click("#history-open")
    _until(page, "history-status", r"^judgment #1 ")
    page.screenshot(path=str(out / "app-history.png"), full_page=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="reflectrm-shots-"))
    proc, url = _start(folder)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(url)
            page.wait_for_selector("#judge-run")
            _tour(page, args.out)
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    for tab in TABS:
        print(args.out / f"app-{tab}.png")


if __name__ == "__main__":
    main()
